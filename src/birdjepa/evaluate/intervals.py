"""Spread over seeds and 95 % bootstrap intervals, every one inside the metric's range [0, 1].

One (test set, encoder, probe, k) group has one metric value per seed. It is reported as
the mean and the standard deviation over seeds, plus an interval:

* k = all: the 95 % percentile bootstrap interval over test segments of the seed mean. Each
  resample draws the test segments with replacement (the same draw for every seed) and
  recomputes the metric of every seed on it, so the interval says how much the number would
  move on another test set of the same size; it is valid for any number of seeds.
* few-shot k with >= 3 seeds: the same, resampling the seeds (with replacement) too, so that
  the choice of the k training recordings, which moves few-shot numbers most, is in it.
* few-shot k with < 3 seeds: the minimum and maximum over the seeds, named "min-max": two
  seeds cannot support an interval (a t-interval over 2 seeds multiplies their gap by 12.7).

The bootstrap intervals are bias-corrected percentile intervals (Efron's BC): cmAP on a
resample runs high (on the demo's random-init attentive probe, resamples average 0.272 against
0.263 observed, 67 % of them above it: AP is not linear in the segments, and a resampled
segment's copies tie with each other), so a plain 2.5-97.5 % interval can miss the observed
value. BC moves both percentiles by the share of resamples below the observed value (ties
counted half); with no bias it is the plain percentile interval. Either way the ends are
resampled metric values, so they lie within [0, 1].
"""

import dataclasses
import statistics

import numpy as np

import birdjepa.evaluate.metrics as metrics

BOOTSTRAP_SEGMENTS = "bootstrap-segments"
BOOTSTRAP_SEEDS = "bootstrap-seeds+segments"
MIN_MAX = "min-max"
MIN_SEEDS = 3
"""Fewer seeds than this give a min-max range instead of a few-shot interval."""


@dataclasses.dataclass(frozen=True)
class Summary:
    """One group's numbers: mean, spread and interval of a metric over seeds."""

    mean: float
    sd: float
    """Standard deviation over seeds (ddof 1); 0 for one seed."""
    min: float
    max: float
    lo: float
    """Interval's lower end."""
    hi: float
    """Interval's upper end."""
    method: str
    """BOOTSTRAP_SEGMENTS, BOOTSTRAP_SEEDS or MIN_MAX."""
    n_seeds: int


def weight_chunks(n: int, n_boot: int, seed: int, max_cells: int = 1 << 22):
    """(b, n) int resample counts (each row a multinomial draw of n segments), in chunks of at
    most `max_cells` cells, n_boot rows in all; deterministic in (n, n_boot, seed)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, n, 0xB007]))
    rows = max(1, max_cells // max(n, 1))
    for i in range(0, n_boot, rows):
        yield rng.multinomial(n, np.full(n, 1.0 / n), size=min(rows, n_boot - i))


def replicates(scores_snc: list[np.ndarray], labels_nc: np.ndarray, *, n_boot: int,
               seed: int = 0) -> dict[str, np.ndarray]:
    """{metric: (seeds, n_boot)}: each seed's metric on the same n_boot resamples of the test
    segments. The seeds' classes are scored side by side in one `metrics.curves` pass (about
    twice as fast as one pass per seed)."""
    y = np.asarray(labels_nc, bool)
    n, c = y.shape
    stacked = np.concatenate([np.asarray(s, np.float64) for s in scores_snc], axis=1)
    tiled = np.tile(y, len(scores_snc))
    out: dict[str, list] = {m: [[] for _ in scores_snc] for m in metrics.METRICS}
    # Sparse labels are counted per positive (one matrix product for many resamples at once);
    # the running sums of dense ones hold (n, classes, resamples) arrays: fewer resamples a
    # block. Both give the same numbers (metrics.curves).
    sparse = y.size and y.sum() <= metrics.SPARSE_LABELS * y.size
    cells = 1 << 26 if sparse else max(1, (1 << 22) // max(1, c))
    for w in weight_chunks(n, n_boot, seed, max_cells=cells):
        cv = metrics.curves(stacked, tiled, w)
        for i, s in enumerate(scores_snc):
            part = {k: v[:, i * c : (i + 1) * c] for k, v in cv.items()}
            vals = metrics.from_curves(part, metrics.top1(s, y, w))
            for m, v in vals.items():
                out[m][i].append(v)
    return {m: np.array([np.concatenate(v) for v in per_seed]) for m, per_seed in out.items()}


def _mean(x: np.ndarray, axis: int) -> np.ndarray:
    """Mean of the finite entries along `axis`; NaN where there are none (no warning)."""
    ok = np.isfinite(x)
    n = ok.sum(axis)
    return np.where(n > 0, np.where(ok, x, 0.0).sum(axis) / np.maximum(n, 1), np.nan)


def bc_interval(reps: np.ndarray, observed: float, level: float = 0.95) -> tuple[float, float]:
    """Bias-corrected percentile interval of bootstrap replicates around `observed`; NaNs
    (resamples where the metric is undefined) are left out."""
    x = np.asarray(reps, np.float64)
    x = x[np.isfinite(x)]
    if not len(x) or not np.isfinite(observed):
        return float("nan"), float("nan")
    below = (np.sum(x < observed) + 0.5 * np.sum(x == observed)) / len(x)
    below = min(max(below, 0.5 / len(x)), 1 - 0.5 / len(x))
    normal = statistics.NormalDist()
    z0, z = normal.inv_cdf(below), normal.inv_cdf(0.5 + level / 2)
    q = [100 * normal.cdf(2 * z0 - z), 100 * normal.cdf(2 * z0 + z)]
    lo, hi = np.percentile(x, q)
    return float(lo), float(hi)


def summarise(values_s, reps_sb: np.ndarray | None, *, few_shot: bool, seed: int = 0) -> Summary:
    """The group's Summary from its per-seed values and (unless min-max applies) the per-seed
    metric on shared resamples of the test segments (`replicates`)."""
    v = np.asarray(values_s, np.float64)
    if v.size == 0:
        raise ValueError("expected at least one seed's value, got none")
    fin = v[np.isfinite(v)]
    mean = float(fin.mean()) if len(fin) else float("nan")
    sd = float(fin.std(ddof=1)) if len(fin) > 1 else 0.0
    lo_v, hi_v = (float(fin.min()), float(fin.max())) if len(fin) else (np.nan, np.nan)
    if few_shot and v.size < MIN_SEEDS:
        return Summary(mean, sd, lo_v, hi_v, lo_v, hi_v, MIN_MAX, int(v.size))
    if reps_sb is None:
        raise ValueError("expected bootstrap replicates for an interval, got None")
    reps = np.asarray(reps_sb, np.float64)
    if few_shot:
        rng = np.random.default_rng(np.random.SeedSequence([seed, reps.shape[1], 0x5EED]))
        pick = rng.integers(0, reps.shape[0], size=(reps.shape[1], reps.shape[0]))
        boot = _mean(reps[pick, np.arange(reps.shape[1])[:, None]], axis=1)
        method = BOOTSTRAP_SEEDS
    else:
        boot = _mean(reps, axis=0)
        method = BOOTSTRAP_SEGMENTS
    lo, hi = bc_interval(boot, mean)
    return Summary(mean, sd, lo_v, hi_v, lo, hi, method, int(v.size))
