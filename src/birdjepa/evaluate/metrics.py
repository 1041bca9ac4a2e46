"""Multilabel metrics with BirdSet's semantics, in numpy (no scikit-learn).

* `cmap`: class-wise mean average precision, the macro average of per-class AP over the classes
  with at least one positive in the test labels (BirdSet's cmAP; classes absent from the test
  split are left out, not scored 0).
* `auroc`: macro ROC AUC over the classes with both positives and negatives.
* `top1`: the fraction of segments with at least one label whose highest-scoring class is one of
  them (segments without birds are left out).

Per-class AP and AUROC equal scikit-learn's `average_precision_score` and `roc_auc_score`,
ties included (tests/test_evaluate_metrics.py checks them to 1e-6).
"""

import numpy as np
from jaxtyping import Bool, Float


def _check(scores_nc: np.ndarray, labels_nc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores_nc, np.float64)
    y = np.asarray(labels_nc).astype(bool)
    if s.ndim != 2 or s.shape != y.shape:
        raise ValueError(
            f"expected scores and labels of one shape (n, classes), got {s.shape} and {y.shape}"
        )
    if not np.isfinite(s).all():
        raise ValueError(f"expected finite scores, got {int((~np.isfinite(s)).sum())} non-finite")
    return s, y


def average_precision(scores_n: np.ndarray, labels_n: np.ndarray) -> float:
    """AP of one class: sum over score thresholds of (recall step) x precision, thresholds at the
    distinct scores (tied scores form one step), as scikit-learn computes it. NaN without
    positives."""
    y = np.asarray(labels_n).astype(bool)
    n_pos = int(y.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-np.asarray(scores_n, np.float64), kind="mergesort")
    s, y = np.asarray(scores_n, np.float64)[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # last index of each tied group
    tp = np.cumsum(y)[last]
    precision = tp / (last + 1)
    recall_step = np.diff(np.r_[0, tp]) / n_pos
    return float((recall_step * precision).sum())


def roc_auc(scores_n: np.ndarray, labels_n: np.ndarray) -> float:
    """ROC AUC of one class via the Mann-Whitney statistic with mid-ranks for ties (equal to the
    trapezoidal area scikit-learn computes). NaN unless both positives and negatives exist."""
    y = np.asarray(labels_n).astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    s = np.asarray(scores_n, np.float64)
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    mid = (starts + ends + 1) / 2.0  # 1-based mid-rank of each tied group
    ranks[order] = np.repeat(mid, ends - starts)
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def per_class_ap(scores_nc: Float[np.ndarray, "n c"], labels_nc) -> np.ndarray:
    """AP per class, NaN for classes without positives."""
    s, y = _check(scores_nc, labels_nc)
    return np.array([average_precision(s[:, c], y[:, c]) for c in range(s.shape[1])])


def cmap(scores_nc: Float[np.ndarray, "n c"], labels_nc: Bool[np.ndarray, "n c"]) -> float:
    """Macro AP over the classes with >= 1 positive; NaN when no class has one."""
    ap = per_class_ap(scores_nc, labels_nc)
    return float(np.nanmean(ap)) if np.isfinite(ap).any() else float("nan")


def auroc(scores_nc: Float[np.ndarray, "n c"], labels_nc: Bool[np.ndarray, "n c"]) -> float:
    """Macro ROC AUC over the classes with both positives and negatives."""
    s, y = _check(scores_nc, labels_nc)
    auc = np.array([roc_auc(s[:, c], y[:, c]) for c in range(s.shape[1])])
    return float(np.nanmean(auc)) if np.isfinite(auc).any() else float("nan")


def top1(scores_nc: Float[np.ndarray, "n c"], labels_nc: Bool[np.ndarray, "n c"]) -> float:
    """Fraction of labelled segments whose argmax class is among their labels."""
    s, y = _check(scores_nc, labels_nc)
    has = y.any(1)
    if not has.any():
        return float("nan")
    hit = y[np.arange(len(s)), s.argmax(1)]
    return float(hit[has].mean())


def all_metrics(scores_nc: np.ndarray, labels_nc: np.ndarray) -> dict[str, float]:
    """{"cmap", "auroc", "top1"} plus the counts they were computed over."""
    _, y = _check(scores_nc, labels_nc)
    return {
        "cmap": cmap(scores_nc, labels_nc),
        "auroc": auroc(scores_nc, labels_nc),
        "top1": top1(scores_nc, labels_nc),
        "n_segments": int(len(y)),
        "n_labelled": int(y.any(1).sum()),
        "n_classes_scored": int(y.any(0).sum()),
    }
