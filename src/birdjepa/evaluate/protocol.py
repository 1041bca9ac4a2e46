"""One encoder on one test set: every probe x k x seed trained on cached embeddings, every
metric, and the intervals of each (probe, k) group (`birdjepa.evaluate.intervals`).

The runs of one probe (all k and seeds) go to `probes.fit_predict_many` together, which trains
runs of similar length in one vmapped scan. Training windows carry their recording's labels; a
few-shot subset is the windows of its k recordings per class (`checks.TestSetPlan.recordings`).
The test resamples of the bootstrap are the same for every encoder and probe of a test set
(seed 0), so differences between rows are paired.
"""

import concurrent.futures
import dataclasses
import time

import jax
import numpy as np

import birdjepa.evaluate.checks as checks
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.intervals as intervals
import birdjepa.evaluate.metrics as metrics
import birdjepa.evaluate.probes as probes
import birdjepa.evaluate.progress as progress


def k_label(k: int) -> str:
    """A k as the tables show it: "1", "5", ..., "all" for 0."""
    return str(k) if k else "all"


def settings(cfg: eval_config.EvalConfig, tp: checks.TestSetPlan, enc) -> dict:
    """The columns every row of (test set, encoder) repeats: encoder identity, data, recipe."""
    return {
        "encoder_run_dir": enc.run_dir, "encoder_step": enc.step,
        "encoder_config_hash": enc.config_hash, "encoder_digest": enc.digest,
        "train_shards": str(tp.spec.train_shards), "test_shards": str(tp.spec.test_shards),
        "train_windows": cfg.train_windows, "window_s": cfg.window_s,
        "hop_s": float("nan") if cfg.hop_s is None else cfg.hop_s,
        "pool": cfg.pool, "n_boot": cfg.n_boot, "protocol": cfg.protocol,
        "sampling": cfg.sampling,
        **{f"probe_{k}": v for k, v in dataclasses.asdict(cfg.probe).items()},
    }


def _inputs(tr: dict, te: dict, kinds) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{field: (train, test)} standardised with all training rows' statistics, once per field."""
    fields = {probes.FIELDS[k] for k in kinds}
    return {f: probes.standardise(tr[f], tr[f], te[f])[1:] for f in sorted(fields)}


def _replicates(scores: list[np.ndarray], y_test, n_boot: int) -> dict[str, np.ndarray]:
    """{metric: (seeds, n_boot)}, computing identical score arrays (kNN at k = all) once."""
    memo: dict[bytes, dict] = {}
    per_seed = []
    for s in scores:
        key = s.tobytes()
        if key not in memo:
            memo[key] = intervals.replicates([s], y_test, n_boot=n_boot, seed=0)
        per_seed.append(memo[key])
    return {m: np.concatenate([r[m] for r in per_seed]) for m in metrics.METRICS}


def _group_rows(base: dict, runs: list[dict], y_test, cfg: eval_config.EvalConfig) -> list[dict]:
    """Rows (one per seed and metric) of one (probe, k) group, with its Summary per metric."""
    few_shot = runs[0]["k"] != 0
    need = not (few_shot and len(runs) < intervals.MIN_SEEDS)
    reps = _replicates([r["scores"] for r in runs], y_test, cfg.n_boot) if need else None
    chance = metrics.chance(y_test)
    rows = []
    for m in metrics.METRICS:
        values = [r["metrics"][m] for r in runs]
        s = intervals.summarise(values, None if reps is None else reps[m], few_shot=few_shot)
        group = {"n_seeds": s.n_seeds, "mean": s.mean, "sd": s.sd, "min": s.min, "max": s.max,
                 "lo": s.lo, "hi": s.hi, "interval": s.method, "chance": chance[m]}
        for r, v in zip(runs, values, strict=True):
            rows.append({**base, "k": k_label(r["k"]), "seed": r["seed"], "metric": m,
                         "value": v, **group, **r["info"]})
    return rows


def evaluate(tp: checks.TestSetPlan, enc, tr: dict, te: dict, cfg: eval_config.EvalConfig, *,
             verbose: bool = True) -> list[dict]:
    """Every (probe, k, seed) of `enc` on test set `tp`: result rows (see birdjepa.evaluate
    .results for the columns)."""
    if not np.array_equal(te["row"], np.arange(len(tp.y_test))):
        raise ValueError(f"test set {tp.spec.name!r}: expected one window per segment "
                         f"({len(tp.y_test)}), got {len(te['row'])} windows")
    y_win = tp.y_train[tr["row"]]
    inputs = _inputs(tr, te, cfg.probes)
    runs = [(k, seed) for k in cfg.shots for seed in cfg.seeds]
    subsets = [np.flatnonzero(np.isin(tr["row"], tp.recordings[r])) for r in runs]
    keys = [jax.random.fold_in(jax.random.key(seed), k) for k, seed in runs]
    common = {"test_set": tp.spec.name, "encoder": enc.name, **settings(cfg, tp, enc)}
    label = f"probes {enc.name} on {tp.spec.name}"
    total = len(cfg.probes) * len(runs)
    pending = []
    # The metrics and bootstrap intervals (numpy) of one probe run on a thread while the next
    # probe trains (XLA releases the GIL), so the two overlap on the two cores.
    with progress.Progress(label, total, unit="fits", enabled=verbose) as bar, \
            concurrent.futures.ThreadPoolExecutor(1) as pool:
        for kind in cfg.probes:
            t0 = time.perf_counter()
            x, x_test = inputs[probes.FIELDS[kind]]
            bar.extra = kind
            fits = probes.fit_predict_many(kind, x, y_win, x_test, subsets, cfg.probe,
                                           keys=keys, progress=lambda n: bar.update(n))
            fit_s = (time.perf_counter() - t0) / len(runs)
            pending.append(pool.submit(_score_probe, {**common, "probe": kind}, runs, subsets,
                                       fits, fit_s, tp, cfg))
    return [r for f in pending for r in f.result()]


def _score_probe(base: dict, runs, subsets, fits, fit_s: float, tp: checks.TestSetPlan,
                 cfg: eval_config.EvalConfig) -> list[dict]:
    """Rows of one probe's runs: metrics per run, then each k's group with its intervals."""
    counts = metrics.counts(tp.y_test)
    done = []
    for (k, seed), sel, (scores, info) in zip(runs, subsets, fits, strict=True):
        info = {"n_train_recordings": int(len(tp.recordings[(k, seed)])),
                "n_train_windows": int(len(sel)), "n_steps": info["n_steps"],
                "loss_first": info.get("loss_first", float("nan")),
                "loss_last": info.get("loss_last", float("nan")), "fit_s": fit_s, **counts}
        done.append({"k": k, "seed": seed, "scores": scores, "info": info,
                     "metrics": metrics.all_metrics(scores, tp.y_test)})
    rows = []
    for k in cfg.shots:
        rows += _group_rows(base, [d for d in done if d["k"] == k], tp.y_test, cfg)
    return rows
