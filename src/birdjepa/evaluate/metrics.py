"""Multilabel metrics with BirdSet's conventions, in numpy, over the test set's full class list.

BirdSet (its `modules/metrics/multilabel.py`) computes with torchmetrics 1.2 after a sigmoid; the
metrics here are rank-based, so they are computed on the raw scores (a sigmoid changes no order,
but in float32 it can tie scores that differ, which torchmetrics would then score as ties).
The columns of `labels_nc` are the test set's class list: its `ClassLabel` names, classes without
a positive in the split included (NES's test split has no `rucwar1`).

* `cmap`: `MultilabelAveragePrecision(average="macro")`, the macro mean of per-class AP over the
  classes with >= 1 positive (a class without positives is NaN and left out).
* `cmap5`: BirdSet's `cmAP5`, the same mean over the classes with >= 5 positives.
* `auroc`: `AUROC(task="multilabel", average="macro")`: the macro mean of per-class ROC AUC over
  the full class list, where a class without positives (or without negatives) scores 0 and stays
  in the mean, as torchmetrics' ROC returns an all-zero TPR (FPR) curve for it.
* `auroc_present`: macro ROC AUC over the classes with both positives and negatives only
  (scikit-learn's per-class AUC; what this package reported as `auroc` before BirdSet's).
* `top1`: BirdSet's T1 (`TopKAccuracy(topk=1)`): the fraction of segments with >= 1 positive whose
  highest-scoring class is one of them (segments without birds are left out).

Per-class AP and AUROC equal scikit-learn's `average_precision_score` and `roc_auc_score`, ties
included; tests/test_evaluate_metrics.py checks them to 1e-6 and pins each convention with a
hand-computed case. torchmetrics is not a second reference there: it needs torch (a CPU wheel of
~200 MB, the default Linux wheel pulls ~2.5 GB of CUDA libraries), too much for this package's
CI for four functions whose semantics are pinned by hand-computed cases instead.

Every metric takes optional per-segment `weights` (B, n) and then returns B values: a bootstrap
resample is integer weights (the count of each segment in it), equal to the metric of the
resampled set, ties included (to ~1e-6: weighted curves compute in float32, in which sums of
counts are exact). `all_metrics(..., weights)` serves `birdjepa.evaluate.intervals`.
"""

import numpy as np
from jaxtyping import Bool, Float

METRICS = ("cmap", "cmap5", "auroc", "auroc_present", "top1")
"""Every ranking metric a result row carries, in table order."""
THRESHOLD_METRICS = ("precision", "recall", "f1")
"""Metrics at a model's decision rule (a head's thresholds: birdjepa.evaluate.heads), macro
over the classes with a positive."""

CMAP5_MIN_POSITIVES = 5
"""cmAP5's class threshold (BirdSet's `sample_threshold`)."""


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


def _weights(weights, n: int) -> tuple[np.ndarray, bool]:
    """(B, n) float weights and whether they were given (else one row of ones)."""
    if weights is None:
        return np.ones((1, n)), False
    w = np.asarray(weights, np.float64)
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"weights: expected shape (B, {n}), got {w.shape}")
    return w, True


def _tie_bounds(sorted_cn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) position of each position's group of tied scores, per row, (c, n) each."""
    n = sorted_cn.shape[1]
    idx = np.broadcast_to(np.arange(n), sorted_cn.shape)
    new = np.ones(sorted_cn.shape, bool)
    new[:, 1:] = sorted_cn[:, 1:] != sorted_cn[:, :-1]
    last = np.ones(sorted_cn.shape, bool)
    last[:, :-1] = new[:, 1:]
    start = np.maximum.accumulate(np.where(new, idx, 0), axis=1)
    end = np.minimum.accumulate(np.where(last, idx, n)[:, ::-1], axis=1)[:, ::-1]
    return start, end


_CHUNK = 1 << 20
"""Segments x classes x resamples per block of `curves` (a few float64 arrays of this size)."""


def _cumsum0(x: np.ndarray) -> np.ndarray:
    """Cumulative sum along axis 0 as one vector add per row: ~5x numpy's cumsum here, whose
    accumulate loop does not vectorise across the trailing axes."""
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, len(x)):
        np.add(out[i - 1], x[i], out=out[i])
    return out


def _block(ws, ys, start, end) -> tuple[np.ndarray, ...]:
    """(ap, auc, positives, negatives), (c, b) each, of weights `ws` (n, c, b) in per-class
    descending score order; `start`, `end` (n, c): each position's tie group, or None when no
    class has tied scores (each position its own group: no gathers)."""
    pos = ws * ys
    tp, seen = _cumsum0(pos), _cumsum0(ws)
    n_pos = tp[-1]
    n_neg = seen[-1] - n_pos
    with np.errstate(invalid="ignore", divide="ignore"):
        if end is None:  # a segment is all positive or all negative: no half-counted ties
            ap = np.einsum("ncb,ncb->cb", pos, tp / np.maximum(seen, 1e-30))
            u = n_pos * n_neg - np.einsum("ncb,ncb->cb", pos, seen - tp)
        else:
            cls = np.arange(ws.shape[1])
            negc = np.concatenate([np.zeros((1,) + ws.shape[1:], ws.dtype), seen - tp])
            prec = tp[end, cls] / np.maximum(seen[end, cls], 1e-30)
            ap = np.einsum("ncb,ncb->cb", pos, prec)
            ties = negc[end + 1, cls] + negc[start, cls]  # 2 x negatives above + tied ones
            u = np.einsum("ncb,ncb->cb", pos, n_neg - 0.5 * ties)
        ap, auc = ap / n_pos, u / (n_pos * n_neg)
    return (np.where(n_pos > 0, ap, np.nan), np.where((n_pos > 0) & (n_neg > 0), auc, np.nan),
            n_pos, n_neg)


SPARSE_LABELS = 0.05
"""`curves` counts by positives (`curves_by_positives`) when at most this share of the
(segment, class) cells is positive: BirdSet's test sets hold ~0.5-3 %, XCL-sized label
spaces far less."""


def curves(scores_nc, labels_nc, weights=None) -> dict[str, np.ndarray]:
    """Per-class AP, ROC AUC (NaN where undefined), positive and negative weight, each (B, c)
    (B = 1 without weights), all classes and resamples at once.

    Scores sort descending per class; a group of tied scores is one threshold. AP = sum over
    positives of weight x precision at the end of its tie group / positives (scikit-learn's step
    sum). AUC = sum over positives of weight x (negatives below + half the tied negatives) /
    (positives x negatives): the Mann-Whitney statistic, equal to the trapezoidal ROC area.
    Sparse labels (SPARSE_LABELS) take `curves_by_positives`: the same sums, counted per
    positive."""
    s, y = _check(scores_nc, labels_nc)
    if y.size and y.sum() <= SPARSE_LABELS * y.size:
        return curves_by_positives(s, y, weights)
    return _curves_sorted(s, y, weights)


def _curves_sorted(s: np.ndarray, y: np.ndarray, weights=None) -> dict[str, np.ndarray]:
    """`curves` by one sort per class and weighted running sums: B x n x c work."""
    w, _ = _weights(weights, len(s))
    order = np.argsort(-s, axis=0, kind="mergesort")  # (n, c)
    ys = np.take_along_axis(y, order, 0).astype(np.float64)[:, :, None]
    start, end = _tie_bounds(np.take_along_axis(s, order, 0).T)
    start, end = (None, None) if (end == np.arange(len(s))).all() else (start.T, end.T)
    # Resample counts are integers: their sums are exact in float32, which halves the memory
    # traffic of the bootstrap (AP and AUC then agree with float64 to ~1e-6).
    wt = np.ascontiguousarray(w.T, np.float32 if weights is not None else np.float64)
    ys = ys.astype(wt.dtype)
    rows = max(1, _CHUNK // max(1, s.size))
    parts = [_block(wt[:, i : i + rows][order], ys, start, end)
             for i in range(0, len(w), rows)]
    ap, auc, n_pos, n_neg = (np.concatenate(x, axis=1).T for x in zip(*parts, strict=True))
    return {"ap": ap, "auroc": auc, "n_pos": n_pos, "n_neg": n_neg}


_POSITIVE_BLOCK = 1 << 24
"""Segments x positives per block of `curves_by_positives` (four float32 matrices of it)."""
_SPARSE_RANKS = 0.1
"""`curves_by_positives` counts the (segment, positive) pairs of a block sparsely when at most
this share of them scores at or above the positive (a model that ranks positives high); else
as dense matrix products."""


def curves_by_positives(scores_nc, labels_nc, weights=None) -> dict[str, np.ndarray]:
    """`curves`' sums counted per positive (p: segment i, class c, score t): with W(>= t) and
    W(> t) the weight of the class's segments scoring at least (above) t, overall and positives
    only, AP_c = sum_p w_i Wpos(>= t) / W(>= t) / Wpos and AUC_c = sum_p w_i (Wneg - (Wneg(>= t)
    + Wneg(> t)) / 2) / (Wpos Wneg): the same step sum and Mann-Whitney statistic, ties
    included. Each W is one matrix product of the (B, n) weights with a (n, positives)
    indicator, so the work is B x n x positives in BLAS instead of B x n x classes of running
    sums: what makes a 10,000-class bootstrap take seconds, not hours."""
    import scipy.sparse

    s, y = _check(scores_nc, labels_nc)
    w, given = _weights(weights, len(s))
    dt = np.float32 if given else np.float64  # integer counts: exact in float32
    wt = np.asarray(w, dt)
    yf = y.astype(dt)
    n_pos = wt @ yf
    n_neg = wt.sum(1, keepdims=True) - n_pos
    rows, cls = np.nonzero(y.T)  # positives grouped by class: (class, segment)
    rows, cls = cls, rows
    s_cn, y_cn = np.ascontiguousarray(s.T), np.ascontiguousarray(y.T)  # a class's scores: a row
    wtt = np.ascontiguousarray(wt.T)
    ap_sum = np.zeros((len(w), y.shape[1]), np.float64)
    u_sum = np.zeros_like(ap_sum)
    step = max(1, _POSITIVE_BLOCK // max(1, len(s)))
    for a in range(0, len(rows), step):
        i, c = rows[a : a + step], cls[a : a + step]
        t = s[i, c][:, None]
        col, pos_b = s_cn[c], y_cn[c]  # (P, n): each positive's class
        ge_b, gt_b = col >= t, col > t
        wi = wt[:, i]
        # Without ties (each positive's score is its own) "above" is "at or above" less itself.
        tied = int(ge_b.sum() - gt_b.sum()) != len(c)
        mats = (ge_b, ge_b & pos_b) + ((gt_b, gt_b & pos_b) if tied else ())
        if ge_b.sum() <= _SPARSE_RANKS * ge_b.size:  # positives rank high: count their pairs
            got = [np.asarray(scipy.sparse.csr_matrix(m, dtype=dt) @ wtt).T for m in mats]
        else:
            got = [wt @ m.astype(dt).T for m in mats]
        all_ge, pos_ge = got[:2]
        all_gt, pos_gt = got[2:] if tied else (all_ge - wi, pos_ge - wi)
        with np.errstate(invalid="ignore", divide="ignore"):
            prec = np.where(all_ge > 0, pos_ge / np.maximum(all_ge, 1e-30), 0.0)
        neg = n_neg[:, c] - 0.5 * ((all_ge - pos_ge) + (all_gt - pos_gt))
        onehot = scipy.sparse.csr_matrix((np.ones(len(c)), (np.arange(len(c)), c)),
                                         shape=(len(c), y.shape[1]))
        ap_sum += np.asarray((onehot.T @ (wi * prec).T).T)
        u_sum += np.asarray((onehot.T @ (wi * neg).T).T)
    n_pos, n_neg = n_pos.astype(np.float64), n_neg.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ap = np.where(n_pos > 0, ap_sum / n_pos, np.nan)
        auc = np.where((n_pos > 0) & (n_neg > 0), u_sum / (n_pos * n_neg), np.nan)
    return {"ap": ap, "auroc": auc, "n_pos": n_pos, "n_neg": n_neg}


def average_precision(scores_n: np.ndarray, labels_n: np.ndarray) -> float:
    """AP of one class (scikit-learn's `average_precision_score`); NaN without positives."""
    return float(curves(np.reshape(scores_n, (-1, 1)), np.reshape(labels_n, (-1, 1)))["ap"][0, 0])


def roc_auc(scores_n: np.ndarray, labels_n: np.ndarray) -> float:
    """ROC AUC of one class (scikit-learn's `roc_auc_score`); NaN without both label values."""
    c = curves(np.reshape(scores_n, (-1, 1)), np.reshape(labels_n, (-1, 1)))
    return float(c["auroc"][0, 0])


def per_class_ap(scores_nc: Float[np.ndarray, "n c"], labels_nc, weights=None) -> np.ndarray:
    """AP per class, (c,) or with weights (B, c); NaN for classes without positives."""
    ap = curves(scores_nc, labels_nc, weights)["ap"]
    return ap if weights is not None else ap[0]


def per_class_auroc(scores_nc: Float[np.ndarray, "n c"], labels_nc, weights=None) -> np.ndarray:
    """ROC AUC per class, (c,) or (B, c); NaN for classes without positives or negatives."""
    auc = curves(scores_nc, labels_nc, weights)["auroc"]
    return auc if weights is not None else auc[0]


def _nanmean(x: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Mean over the last axis of the finite (and kept) entries; NaN where there are none."""
    ok = np.isfinite(x) if keep is None else np.isfinite(x) & keep
    n = ok.sum(-1)
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, np.where(ok, x, 0.0).sum(-1) / np.maximum(n, 1), np.nan)


def _positives(labels_nc, weights) -> np.ndarray:
    """Positives per class, (c,) or (B, c) (weighted counts)."""
    y = np.asarray(labels_nc).astype(np.float64)
    return y.sum(0) if weights is None else np.asarray(weights, np.float64) @ y


def _out(x: np.ndarray):
    return float(x) if np.ndim(x) == 0 else x


def cmap(scores_nc: Float[np.ndarray, "n c"], labels_nc: Bool[np.ndarray, "n c"],
         weights=None):
    """Macro AP over the classes with >= 1 positive; NaN when no class has one."""
    return _out(_nanmean(per_class_ap(scores_nc, labels_nc, weights)))


def cmap5(scores_nc: Float[np.ndarray, "n c"], labels_nc: Bool[np.ndarray, "n c"],
          weights=None):
    """Macro AP over the classes with >= 5 positives (BirdSet's cmAP5); NaN if there are none."""
    keep = _positives(labels_nc, weights) >= CMAP5_MIN_POSITIVES
    return _out(_nanmean(per_class_ap(scores_nc, labels_nc, weights), keep))


def auroc(scores_nc: Float[np.ndarray, "n c"], labels_nc: Bool[np.ndarray, "n c"],
          weights=None):
    """BirdSet's macro AUROC: the mean over every class, 0 for a class without positives or
    without negatives."""
    auc = per_class_auroc(scores_nc, labels_nc, weights)
    return _out(np.nan_to_num(auc, nan=0.0).mean(-1) if auc.shape[-1] else np.nan * auc.sum(-1))


def auroc_present(scores_nc: Float[np.ndarray, "n c"], labels_nc: Bool[np.ndarray, "n c"],
                  weights=None):
    """Macro ROC AUC over the classes with both positives and negatives; NaN if there are none."""
    return _out(_nanmean(per_class_auroc(scores_nc, labels_nc, weights)))


def top1(scores_nc: Float[np.ndarray, "n c"], labels_nc: Bool[np.ndarray, "n c"], weights=None):
    """Fraction of labelled segments whose argmax class is among their labels."""
    s, y = _check(scores_nc, labels_nc)
    has = y.any(1)
    hit = (y[np.arange(len(s)), s.argmax(1)] & has).astype(np.float64) if len(s) else (
        np.zeros(0))
    w = np.ones((1, len(s))) if weights is None else np.asarray(weights, np.float64)
    den = w @ has.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(den > 0, (w @ hit) / np.where(den > 0, den, 1.0), np.nan)
    return _out(out[0] if weights is None else out)


def from_curves(c: dict[str, np.ndarray], top1_b: np.ndarray) -> dict[str, np.ndarray]:
    """{metric: (B,)} from `curves`' per-class arrays and top-1 per resample."""
    return {
        "cmap": _nanmean(c["ap"]),
        "cmap5": _nanmean(c["ap"], c["n_pos"] >= CMAP5_MIN_POSITIVES),
        "auroc": np.where(np.isnan(c["auroc"]), 0.0, c["auroc"]).mean(-1),
        "auroc_present": _nanmean(c["auroc"]),
        "top1": np.atleast_1d(top1_b),
    }


def all_metrics(scores_nc: np.ndarray, labels_nc: np.ndarray, weights=None) -> dict:
    """{metric: value (or (B,) values with weights)} for every metric in METRICS, from one
    `curves` pass."""
    out = from_curves(curves(scores_nc, labels_nc, weights), top1(scores_nc, labels_nc, weights))
    return {k: (float(v[0]) if weights is None else v) for k, v in out.items()}


def counts(labels_nc: np.ndarray) -> dict[str, int]:
    """The counts the metrics are computed over: segments, labelled segments, classes in the
    list, classes with a positive (cmAP's), classes with >= 5 positives (cmAP5's)."""
    y = np.asarray(labels_nc).astype(bool)
    pos = y.sum(0)
    return {"n_segments": int(len(y)), "n_labelled": int(y.any(1).sum()),
            "n_classes": int(y.shape[1]), "n_classes_scored": int((pos > 0).sum()),
            "n_classes_cmap5": int((pos >= CMAP5_MIN_POSITIVES).sum())}


def chance(labels_nc: np.ndarray) -> dict[str, float]:
    """Each metric's chance level on these labels: its expected value for scores that ignore the
    audio (a random ranking), the line a plot draws. cmAP (cmAP5): the mean prevalence
    (positives / segments) over the classes it averages (NaN: none); AUROC 0.5 per class, so
    `auroc` 0.5 x the share of classes with positives and negatives (the rest score 0) and
    `auroc_present` 0.5; top-1: the mean over labelled segments of positives / classes."""
    y = np.asarray(labels_nc).astype(bool)
    n, c = y.shape
    pos = y.sum(0)
    prevalence = pos / max(n, 1)
    both = (pos > 0) & (pos < n)
    labelled = y[y.any(1)]

    def mean(x):
        return float(x.mean()) if len(x) else float("nan")
    return {"cmap": mean(prevalence[pos > 0]),
            "cmap5": mean(prevalence[pos >= CMAP5_MIN_POSITIVES]),
            "auroc": 0.5 * float(both.sum()) / c if c else float("nan"),
            "auroc_present": 0.5 if both.any() else float("nan"),
            "top1": mean(labelled.sum(1) / c)}

