"""Scoring a head at XCL scale: `python -m benchmarks scoring [--rows N] [--classes C]
[--n_boot B]`.

What `python -m birdjepa.evaluate --heads` does after the encoder has run, on N rows x C
classes (default 10,000 x 10,000, BirdSet XCL's label space is 9,736): the head (a (d, C)
linear layer on (N, d) embeddings, d = 384; its compile timed apart) and its sigmoid, every ranking metric (one
`metrics.curves` pass), the metrics at the decision thresholds, and the bootstrap intervals
(B resamples; each stage timed apart). The peer in the same run: scikit-learn's macro
`average_precision_score` on the same arrays (cmAP alone, no intervals), timed on 500 classes
and scaled to all (it scores one class at a time). Multilabel targets
with ~1.5 positives per row over a Zipf-like class frequency; scores correlated with them.
Target (issue 48): the whole scoring of 10,000 rows x 10,000 classes within a minute here.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

import birdjepa.common.cli_args as cli_args
import birdjepa.evaluate.heads as heads
import birdjepa.evaluate.intervals as intervals
import birdjepa.evaluate.metrics as metrics


def data(n: int, c: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings (n, 384) float32, labels (n, c) bool)."""
    rng = np.random.default_rng(seed)
    freq = 1.0 / np.arange(1, c + 1) ** 0.8
    freq /= freq.sum()
    y = np.zeros((n, c), bool)
    k = rng.poisson(1.5, n)
    for i in range(n):
        y[i, rng.choice(c, size=min(max(k[i], 0), c), replace=False, p=freq)] = True
    return rng.standard_normal((n, 384)).astype(np.float32), y


def run(n: int, c: int, n_boot: int) -> dict:
    emb, y = data(n, c)
    rng = np.random.default_rng(1)
    w = jnp.asarray(rng.standard_normal((384, c)).astype(np.float32) / 20.0)
    t = {}
    head = jax.jit(lambda x: x @ w)
    t0 = time.perf_counter()
    head(jnp.asarray(emb)).block_until_ready()  # compile (reported apart)
    t["head_compile_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    logits = head(jnp.asarray(emb)).block_until_ready()
    probs = np.asarray(jax.nn.sigmoid(logits + 3.0 * jnp.asarray(y)), np.float64)
    t["head_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    values = metrics.all_metrics(probs, y)
    t["metrics_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = heads.decisions(probs, np.full(c, heads.DEFAULT_THRESHOLD))
    th = heads.at_threshold(pred, y)
    t["thresholds_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    intervals.replicates([probs], y, n_boot=n_boot, seed=0)
    t["bootstrap_ranking_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for wb in intervals.weight_chunks(n, n_boot, 0, max_cells=1 << 26):
        heads.at_threshold(pred, y, wb)
    t["bootstrap_thresholds_s"] = time.perf_counter() - t0
    t["total_s"] = sum(v for k, v in t.items() if k != "head_compile_s")
    import sklearn.metrics  # the peer (a test dependency)

    # scikit-learn scores a class at a time (~30 ms each here): timed on the first 500 scored
    # classes and scaled to all of them; its cmAP over those 500 checks ours on the same.
    keep = np.flatnonzero(y.any(0))
    part = keep[:500]
    t0 = time.perf_counter()
    peer = sklearn.metrics.average_precision_score(y[:, part], probs[:, part], average="macro")
    t["peer_sklearn_cmap_s"] = (time.perf_counter() - t0) * len(keep) / len(part)
    ours = metrics.cmap(probs[:, part], y[:, part])
    return {"rows": n, "classes": c, "n_boot": n_boot, "positives": int(y.sum()),
            "cmap": values["cmap"], "cmap_500": float(ours), "cmap_500_sklearn": float(peer),
            "f1": float(th["f1"][0]), **t}


def main(argv: list[str] | None = None) -> int:
    p = cli_args.Parser("python -m benchmarks scoring", __doc__.split("\n\n")[0])
    p.add_argument("--rows", type=cli_args.converter(int), default=10_000,
                   help="test rows (windows) scored")
    p.add_argument("--classes", type=cli_args.converter(int), default=10_000,
                   help="the head's classes (BirdSet XCL: 9,736)")
    p.add_argument("--n_boot", type=cli_args.converter(int), default=1000,
                   help="bootstrap resamples of the intervals (evaluate's default)")
    a = p.parse_args(argv)
    r = run(a.rows, a.classes, a.n_boot)
    for k, v in r.items():
        print(f"{k:>24}: {v:.4g}" if isinstance(v, float) else f"{k:>24}: {v}")
    print(f"{'ours_vs_sklearn_cmap':>24}: {r['peer_sklearn_cmap_s'] / r['metrics_s']:.2f}x "
          "(sklearn's cmAP alone, scaled from 500 classes / our one pass of all five metrics)")
    return 0
