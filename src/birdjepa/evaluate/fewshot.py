"""Few-shot training subsets (exactly k recordings per class, deterministic per seed) and the
mean +- 95 % Student-t interval over seeds."""

import math

import numpy as np
from jaxtyping import Bool

# Two-sided 95 % Student-t quantiles t_{0.975, df} for df = 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)


def t975(df: int) -> float:
    """t_{0.975, df}: tabulated up to 30, then the Cornish-Fisher expansion (error < 1e-3)."""
    if df < 1:
        raise ValueError(f"expected df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values) -> tuple[float, float]:
    """(mean, half-width of the 95 % t-interval); the half-width is 0 for a single value."""
    x = np.asarray(values, np.float64)
    if x.size == 0:
        raise ValueError("expected at least one value, got none")
    if x.size == 1:
        return float(x[0]), 0.0
    return float(x.mean()), t975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)


def sample(labels_nc: Bool[np.ndarray, "n c"], k: int | None, *, seed: int) -> np.ndarray:
    """Sorted row indices with exactly `k` rows of each class (all rows when `k` is None).

    Classes are filled in order, each from the rows holding it that were not taken yet, so a
    multilabel row counts once, for the class that took it. Deterministic in (labels, k, seed).
    """
    y = np.asarray(labels_nc, bool)
    if k is None:
        return np.arange(len(y))
    if k < 1:
        raise ValueError(f"expected k >= 1 or None (all), got {k}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, k, 0xF5]))
    taken = np.zeros(len(y), bool)
    for c in range(y.shape[1]):
        pool = np.flatnonzero(y[:, c] & ~taken)
        if len(pool) < k:
            raise ValueError(
                f"few-shot k={k}: expected >= {k} training rows per class, class {c} has "
                f"{len(pool)}"
            )
        taken[rng.choice(pool, size=k, replace=False)] = True
    return np.flatnonzero(taken)
