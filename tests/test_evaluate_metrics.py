"""BirdSet's metric conventions pinned by hand-computed cases with an empty class; scikit-learn
parity (the independent reference) where the conventions agree, ties and empty classes
included; resample weights equal duplicated rows; few-shot sampling."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

import birdjepa.data.fewshot as fewshot
import birdjepa.evaluate.metrics as metrics

# 4 segments x 3 classes; class 2 has no positive (like NES's rucwar1).
Y = np.array([[1, 0, 0], [0, 0, 0], [1, 0, 0], [0, 1, 0]], bool)
S = np.array([[0.9, 0.1, 0.5], [0.8, 0.2, 0.4], [0.1, 0.3, 0.25], [0.2, 0.7, 0.2]])
# class 0: ranks 0.9 P, 0.8 N, 0.2 N, 0.1 P: AP = (1/1 + 2/4) / 2 = 0.75; AUC = 2 of 4 pairs.
# class 1: its positive ranks first: AP 1, AUC 1. class 2: AP NaN, AUC undefined.


def test_conventions_by_hand_with_an_empty_class():
    assert metrics.cmap(S, Y) == pytest.approx((0.75 + 1.0) / 2)  # class 2 left out
    assert metrics.auroc(S, Y) == pytest.approx((0.5 + 1.0 + 0.0) / 3)  # BirdSet: 0, kept
    assert metrics.auroc_present(S, Y) == pytest.approx((0.5 + 1.0) / 2)  # ours: left out
    assert metrics.top1(S, Y) == pytest.approx(2 / 3)  # segment 2's argmax is class 1
    assert np.isnan(metrics.cmap5(S, Y))  # no class has 5 positives
    m = metrics.all_metrics(S, Y)
    assert m == pytest.approx({"cmap": 0.875, "cmap5": np.nan, "auroc": 0.5,
                               "auroc_present": 0.75, "top1": 2 / 3}, nan_ok=True)
    assert list(m) == list(metrics.METRICS)
    assert metrics.counts(Y) == {"n_segments": 4, "n_labelled": 3, "n_classes": 3,
                                 "n_classes_scored": 2, "n_classes_cmap5": 0}


def test_birdset_auroc_scores_a_class_without_negatives_zero():
    """torchmetrics' ROC of a class without negatives has FPR all 0: area 0, kept in the mean."""
    y = np.array([[1, 1], [0, 1], [1, 1]], bool)
    s = np.array([[0.9, 0.3], [0.2, 0.1], [0.8, 0.2]])
    assert metrics.auroc(s, y) == pytest.approx((1.0 + 0.0) / 2)
    assert metrics.auroc_present(s, y) == pytest.approx(1.0)
    assert metrics.cmap(s, y) == pytest.approx(1.0)  # an all-positive class has AP 1


def test_cmap5_keeps_classes_with_five_positives():
    y = np.zeros((10, 2), bool)
    y[:5, 0] = True  # 5 positives
    y[5:9, 1] = True  # 4 positives
    s = np.zeros((10, 2))
    s[:, 0] = [0.9, 0.8, 0.7, 0.6, 0.1, 0.5, 0.4, 0.3, 0.2, 0.05]
    s[:, 1] = y[:, 1] + 0.01 * np.arange(10)
    ap0 = (4 + 5 / 9) / 5  # positives at ranks 1-4 and 9
    assert metrics.cmap5(s, y) == pytest.approx(ap0)
    assert metrics.cmap(s, y) == pytest.approx((ap0 + 1.0) / 2)


def problem(seed: int, n: int = 200, c: int = 9, ties: bool = False):
    rng = np.random.default_rng(seed)
    y = rng.random((n, c)) < rng.uniform(0.02, 0.3, c)
    y[:, 0] = False  # a class with no positives
    if seed % 2:
        y[:, 1] = True  # (odd seeds) a class without negatives: no AUROC, but an AP
    else:
        y[: n // 5] = False  # (even seeds) all-negative segments
    s = rng.normal(size=(n, c)) + 1.5 * y
    if ties:
        s = np.round(s, 1)  # many tied scores
    return s, y


PATHS = {"sorted": -1.0, "by_positives": 1.0}
"""metrics.SPARSE_LABELS forcing each way of computing `curves` (issue 48: the per-positive
counts that make a 10,000-class bootstrap take seconds); both must match scikit-learn."""


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ties", [False, True])
def test_metrics_match_sklearn(seed, ties, path, monkeypatch):
    monkeypatch.setattr(metrics, "SPARSE_LABELS", PATHS[path])
    s, y = problem(seed, ties=ties)
    c = y.shape[1]
    pos = y.any(0)
    ap = [average_precision_score(y[:, i], s[:, i]) for i in range(c) if pos[i]]
    both = pos & (~y).any(0)
    auc = {i: roc_auc_score(y[:, i], s[:, i]) for i in range(c) if both[i]}
    got_ap = metrics.per_class_ap(s, y)
    assert np.isnan(got_ap[0]) and np.isfinite(got_ap[pos]).all()
    np.testing.assert_allclose(got_ap[pos], ap, rtol=0, atol=1e-6)
    got_auc = metrics.per_class_auroc(s, y)
    np.testing.assert_allclose(got_auc[both], list(auc.values()), rtol=0, atol=1e-6)
    assert abs(metrics.cmap(s, y) - np.mean(ap)) < 1e-6
    assert abs(metrics.auroc_present(s, y) - np.mean(list(auc.values()))) < 1e-6
    assert abs(metrics.auroc(s, y) - sum(auc.values()) / c) < 1e-6  # the others score 0
    keep5 = y.sum(0) >= 5
    ap5 = [average_precision_score(y[:, i], s[:, i]) for i in range(c) if keep5[i]]
    assert abs(metrics.cmap5(s, y) - np.mean(ap5)) < 1e-6
    has = y.any(1)
    want_top1 = np.mean(y[has][np.arange(has.sum()), s[has].argmax(1)])
    m = metrics.all_metrics(s, y)
    assert abs(m["top1"] - want_top1) < 1e-12
    assert metrics.counts(y)["n_labelled"] == has.sum()
    assert has.sum() < len(y) if seed % 2 == 0 else not both[1]


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("ties", [False, True])
def test_resample_weights_equal_duplicated_rows(ties, path, monkeypatch):
    """A bootstrap resample as integer weights gives the metrics of the resampled set (to
    float32 round-off: weighted curves compute in float32)."""
    monkeypatch.setattr(metrics, "SPARSE_LABELS", PATHS[path])
    s, y = problem(3, n=60, ties=ties)
    w = np.random.default_rng(0).multinomial(60, np.full(60, 1 / 60), size=4)
    weighted = metrics.all_metrics(s, y, w)
    for b in range(4):
        rows = np.repeat(np.arange(60), w[b])
        want = metrics.all_metrics(s[rows], y[rows])
        for m in metrics.METRICS:
            np.testing.assert_allclose(weighted[m][b], want[m], rtol=0, atol=1e-6)


def test_metric_errors():
    with pytest.raises(ValueError, match=r"\(4, 3\) and \(4, 2\)"):
        metrics.cmap(S, np.zeros((4, 2), bool))
    with pytest.raises(ValueError, match="non-finite"):
        metrics.cmap(np.full((4, 3), np.nan), Y)
    with pytest.raises(ValueError, match=r"weights: expected shape \(B, 4\)"):
        metrics.all_metrics(S, Y, np.ones((2, 5)))


def test_fewshot_exactly_k_and_deterministic():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 300)
    y = np.eye(5, dtype=bool)[labels]
    for k in (1, 5, 10):
        a = fewshot.sample(y, k, seed=3)
        assert np.array_equal(a, fewshot.sample(y, k, seed=3))
        assert not np.array_equal(a, fewshot.sample(y, k, seed=4))
        assert len(np.unique(a)) == len(a) == 5 * k
        np.testing.assert_array_equal(y[a].sum(0), k)
    assert np.array_equal(fewshot.sample(y, None, seed=0), np.arange(300))
    with pytest.raises(ValueError, match="class 2 \\('c'\\) has 0"):
        fewshot.sample(y[labels != 2], 1, seed=0, names=list("abcde"))
