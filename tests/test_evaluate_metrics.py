"""BirdSet metrics against scikit-learn (the independent reference), ties and empty classes
included; few-shot sampling and intervals."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

import birdjepa.evaluate.fewshot as fewshot
import birdjepa.evaluate.metrics as metrics


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


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ties", [False, True])
def test_metrics_match_sklearn(seed, ties):
    s, y = problem(seed, ties=ties)
    pos = y.any(0)
    ap = [average_precision_score(y[:, c], s[:, c]) for c in range(y.shape[1]) if pos[c]]
    both = pos & (~y).any(0)
    auc = [roc_auc_score(y[:, c], s[:, c]) for c in range(y.shape[1]) if both[c]]
    got_ap = metrics.per_class_ap(s, y)
    assert np.isnan(got_ap[0]) and np.isfinite(got_ap[pos]).all()
    np.testing.assert_allclose(got_ap[pos], ap, rtol=0, atol=1e-6)
    assert abs(metrics.cmap(s, y) - np.mean(ap)) < 1e-6
    assert abs(metrics.auroc(s, y) - np.mean(auc)) < 1e-6
    has = y.any(1)
    want_top1 = np.mean(y[has][np.arange(has.sum()), s[has].argmax(1)])
    m = metrics.all_metrics(s, y)
    assert abs(m["top1"] - want_top1) < 1e-12
    assert m["n_labelled"] == has.sum() and m["n_classes_scored"] == pos.sum()
    assert has.sum() < len(y) if seed % 2 == 0 else not both[1]


def test_metrics_known_values_and_errors():
    y = np.array([[1, 0], [0, 0], [1, 0], [0, 1]], bool)
    s = np.array([[0.9, 0.1], [0.8, 0.2], [0.1, 0.3], [0.2, 0.7]])
    # class 0: positives ranked 1st and 4th: AP = (1 + 2/4) / 2; class 1: AP 1.
    assert metrics.cmap(s, y) == pytest.approx(((1 + 2 / 4) / 2 + 1) / 2)
    assert metrics.top1(s, y) == pytest.approx(2 / 3)  # segment 2's argmax is class 1
    perfect = y.astype(float)
    assert metrics.cmap(perfect, y) == 1.0 and metrics.auroc(perfect, y) == 1.0
    with pytest.raises(ValueError, match=r"\(4, 2\) and \(4, 3\)"):
        metrics.cmap(s, np.zeros((4, 3), bool))
    with pytest.raises(ValueError, match="non-finite"):
        metrics.cmap(np.full((4, 2), np.nan), y)


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
    with pytest.raises(ValueError, match="class 2 has 0"):
        fewshot.sample(y[labels != 2], 1, seed=0)


def test_t_interval_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for n in (2, 3, 5, 10, 31, 100):
        x = np.random.default_rng(n).normal(size=n)
        mean, half = fewshot.mean_ci(x)
        want = stats.t.ppf(0.975, n - 1) * x.std(ddof=1) / np.sqrt(n)
        assert mean == pytest.approx(x.mean()) and half == pytest.approx(want, rel=2e-3)
    assert fewshot.mean_ci([0.5]) == (0.5, 0.0)
