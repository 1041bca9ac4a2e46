"""Deterministic, resumable data loading over Hugging Face Arrow shards.

`Loader` wraps the Rust pipeline (`birdjepa._rs.Loader`): an I/O thread, `n_workers` transform
threads and a re-sequencing/batch-assembly thread, all outside the GIL. The batch stream is a pure
function of (dataset, stream-shaping config, seed): it is bitwise identical for any `n_workers`,
and `Loader(..., state=loader.state_dict())` continues with exactly the next batch.

Batches are dicts of numpy arrays:

* `data` float32 `(B, T, M)`, or `(V, B, T, M)` with `n_views > 1`: log-mel features normalised
  Bird-MAE style as `(x - mean) / (2 * std)` (defaults mean=-7.2, std=4.43). Clips shorter than
  `n_frames` are padded with 0.0 *after* normalisation (the dataset mean); longer ones are cut.
* `target` int64 `(B,)`: the label column (-1 when `label_column=None` or the label is null).
* `index` int64 `(B,)`: the global row index (shards concatenated in order); -1 for eval padding.
* `shard` int32 `(B,)`: the shard number; -1 for eval padding.
* `valid` bool `(B,)`: False for eval padding rows and for samples that failed to decode.

With `process_count > 1`, `batch_size` is the global batch and each process gets its contiguous
`batch_size // process_count` slice; the union over processes of step `s` is the single-process
batch at step `s`. See docs/issues/003-deterministic-loader/README.md for the design.
"""

import hashlib
import json
import math
import os
import time
import warnings
from collections.abc import Sequence

import numpy as np

import birdjepa._rs

DEFAULT_MEAN = -7.2
DEFAULT_STD = 4.43
STATE_VERSION = 1


def resolve_shards(shards) -> list[str]:
    """Arrow shard paths from a list of paths, a directory (its *.arrow, sorted), a single file,
    or a `datasets.Dataset` (its `cache_files`)."""
    if hasattr(shards, "cache_files") and not isinstance(shards, (str, os.PathLike)):
        if getattr(shards, "_indices", None) is not None:
            raise birdjepa._rs.BadArgumentError(
                "bad argument shards: expected a datasets.Dataset without an indices mapping, got "
                "one made by select/shuffle/filter (call .flatten_indices() first)"
            )
        files = [f["filename"] for f in shards.cache_files]
        if not files:
            raise birdjepa._rs.BadArgumentError(
                "bad argument shards: expected a datasets.Dataset backed by Arrow cache files, "
                "got an in-memory dataset (save_to_disk and load_from_disk it first)"
            )
        return files
    if isinstance(shards, (str, os.PathLike)):
        path = os.fspath(shards)
        if os.path.isdir(path):
            files = sorted(
                os.path.join(path, f) for f in os.listdir(path) if f.endswith(".arrow")
            )
            if not files:
                raise birdjepa._rs.BadArgumentError(
                    f"bad argument shards: expected *.arrow files in {path}, got none"
                )
            return files
        return [path]
    if isinstance(shards, Sequence):
        return [os.fspath(p) for p in shards]
    raise birdjepa._rs.BadArgumentError(
        "bad argument shards: expected a list of paths, a directory or a datasets.Dataset, "
        f"got {type(shards).__name__}"
    )


def _clip_frames(clip_s: float) -> int:
    """Kaldi fbank frames of a clip (25 ms window, 10 ms shift, snip edges): 498 for 5 s."""
    samples_ms = int(round(clip_s * 1000))
    return max(1, 1 + (samples_ms - 25) // 10)


class Loader:
    """Deterministic batches over Arrow shards; see the module docstring.

    Train mode is infinite (reshuffled every epoch, random crops); eval mode is one finite pass in
    index order with centre crops, the last batch padded to `batch_size` (`valid` marks real rows);
    each `iter(loader)` after the first batch of a pass starts a new pass.

    `transform` selects the per-sample transform: "audio" (decode -> resample -> fbank) or "debug"
    (a deterministic hash of the bytes and crop, for tests; `debug_delay_s` slows it down).
    """

    def __init__(
        self,
        shards,
        *,
        mode: str = "train",
        batch_size: int,
        seed: int = 0,
        n_workers: int = 2,
        process_index: int = 0,
        process_count: int = 1,
        state: dict | None = None,
        n_views: int = 1,
        n_frames: int = 512,
        n_mels: int = 128,
        audio_column: str = "audio",
        label_column: str | None = "label",
        clip_s: float = 5.0,
        sample_rate: int = 32000,
        mean: float = DEFAULT_MEAN,
        std: float = DEFAULT_STD,
        block_size: int = 16,
        shuffle_window: int = 8192,
        prefetch: int = 2,
        max_replacements: int = 16,
        transform: str = "audio",
        debug_delay_s: float = 0.0,
    ):
        if mode not in ("train", "eval"):
            raise birdjepa._rs.BadArgumentError(
                f"bad argument mode: expected 'train' or 'eval', got {mode!r}"
            )
        for name, value in (("batch_size", batch_size), ("seed", seed), ("n_workers", n_workers)):
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise birdjepa._rs.BadArgumentError(
                    f"bad argument {name}: expected a non-negative int, got {value!r}"
                )
        self._core = None
        self.mode = mode
        self.batch_size = int(batch_size)
        self.process_index = int(process_index)
        self.process_count = int(process_count)
        self.paths = resolve_shards(shards)
        t0 = time.perf_counter()
        self._dataset = birdjepa._rs.Dataset(self.paths, audio_column, label_column)
        self.open_s = time.perf_counter() - t0
        self.n_samples = int(self._dataset.n_rows)
        if hasattr(shards, "cache_files") and len(shards) != self.n_samples:
            raise birdjepa._rs.BadArgumentError(
                f"bad argument shards: expected a datasets.Dataset spanning its cache files "
                f"({self.n_samples} rows), got a view of {len(shards)} rows (call "
                f".flatten_indices() or save_to_disk/load_from_disk first)"
            )
        shard_list = [(os.path.basename(p), rows) for p, rows, _ in self._dataset.shards()]
        shards_hash = hashlib.sha256(json.dumps(shard_list).encode()).hexdigest()[:16]
        # Everything that shapes the stream; n_workers/prefetch/process_* do not.
        self.config = {
            "mode": mode,
            "seed": int(seed),
            "batch_size": self.batch_size,
            "n_views": int(n_views),
            "n_frames": int(n_frames),
            "n_mels": int(n_mels),
            "clip_s": float(clip_s),
            "sample_rate": int(sample_rate),
            "mean": float(mean),
            "std": float(std),
            "block_size": int(block_size),
            "shuffle_window": int(shuffle_window),
            "max_replacements": int(max_replacements),
            "transform": transform,
            "audio_column": audio_column,
            "label_column": label_column,
            "n_shards": len(shard_list),
            "n_rows": self.n_samples,
            "shards_hash": shards_hash,
        }
        self.fingerprint = hashlib.sha256(
            json.dumps(self.config, sort_keys=True).encode()
        ).hexdigest()[:16]
        self._core_kwargs = dict(
            mode=mode,
            batch_size=self.batch_size,
            seed=int(seed),
            n_workers=int(n_workers),
            process_index=self.process_index,
            process_count=self.process_count,
            n_views=int(n_views),
            n_frames=int(n_frames),
            n_mels=int(n_mels),
            block_size=int(block_size),
            shuffle_window=int(shuffle_window),
            prefetch=int(prefetch),
            mean=float(mean),
            std=float(std),
            max_replacements=int(max_replacements),
            transform=transform,
            clip_s=float(clip_s),
            sample_rate=int(sample_rate),
            debug_frames=_clip_frames(clip_s),
            debug_delay_s=float(debug_delay_s),
        )
        start = 0 if state is None else self._check_state(state)
        self._logged: set[int] = set()
        self._failures_seen = 0
        self._wait_s = 0.0
        self._yielded = 0
        self._start(start)

    # -- lifecycle ------------------------------------------------------------------------------

    def _start(self, step: int) -> None:
        if self._core is not None:
            self._core.close()
            self._core = None
        self._step = step
        self._pass_fresh = True
        self._finished = False
        self._core = birdjepa._rs.Loader(self._dataset, start_step=step, **self._core_kwargs)

    def close(self) -> None:
        """Stop and join every pipeline thread. Idempotent."""
        if self._core is not None:
            self._core.close()
            self._core = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- iteration ------------------------------------------------------------------------------

    def __len__(self) -> int:
        if self.mode != "eval":
            raise TypeError("a train Loader is infinite; len() is defined for mode='eval'")
        return math.ceil(self.n_samples / self.batch_size)

    def __iter__(self):
        if self.mode == "eval" and not self._pass_fresh:
            self._start(0)
        return self

    def __next__(self) -> dict:
        if self._core is None:
            raise birdjepa._rs.BadArgumentError(
                "bad argument loader: expected an open loader, got a closed one"
            )
        if self._finished:
            raise StopIteration
        t0 = time.perf_counter()
        out = self._core.next()
        self._wait_s += time.perf_counter() - t0
        self._pass_fresh = False
        if out is None:
            self._finished = True
            raise StopIteration
        step, batch, failures = out
        self._step = step + 1
        self._yielded += 1
        for index, shard, row, error in failures:
            self._failures_seen += 1
            if index not in self._logged:
                self._logged.add(index)
                warnings.warn(
                    f"birdjepa.data: skipped sample {index} ({self.paths[shard]} row {row}): "
                    f"{error}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return batch

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Where the stream is, as a small JSON-serialisable dict: the next global step to yield
        (counting only batches already returned, not prefetched ones), plus the fingerprint and
        a readable summary of the stream-shaping configuration."""
        position = self._step * self.batch_size
        return {
            "version": STATE_VERSION,
            "step": self._step,
            "epoch": position // self.n_samples if self.mode == "train" else 0,
            "position": position,
            "fingerprint": self.fingerprint,
            "config": dict(self.config),
        }

    def _check_state(self, state: dict) -> int:
        err = birdjepa._rs.StateMismatchError
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            got = state.get("version") if isinstance(state, dict) else type(state).__name__
            raise err(f"loader state mismatch: expected version {STATE_VERSION}, got {got!r}")
        if state.get("fingerprint") != self.fingerprint:
            theirs = state.get("config", {})
            diffs = [
                f"{k}: state has {theirs.get(k)!r}, loader has {v!r}"
                for k, v in self.config.items()
                if theirs.get(k) != v
            ]
            detail = "; ".join(diffs) if diffs else "fingerprint differs"
            raise err(f"loader state mismatch: {detail}")
        step = state.get("step")
        if not isinstance(step, int) or step < 0:
            raise err(f"loader state mismatch: expected a step >= 0, got {step!r}")
        return step

    # -- diagnostics ----------------------------------------------------------------------------

    def stats(self) -> dict:
        """Pipeline counters (decoded, failures, replaced, invalid include prefetched work), the
        next step, batches yielded, seconds spent waiting for batches, and the last failures."""
        s = dict(self._core.stats()) if self._core is not None else {}
        s["recent_failures"] = [
            {"index": i, "shard": self.paths[sh], "row": r, "error": e}
            for i, sh, r, e in s.get("recent_failures", [])
        ]
        s.update(
            step=self._step,
            batches_yielded=self._yielded,
            wait_s=self._wait_s,
            open_s=self.open_s,
            failures_yielded=self._failures_seen,
        )
        return s


def _batch_entropy(labels: np.ndarray, batch_size: int) -> float:
    """Mean over batches of the plug-in entropy (nats) of the label histogram."""
    n = len(labels) // batch_size
    ent = []
    for b in labels[: n * batch_size].reshape(n, batch_size):
        _, counts = np.unique(b, return_counts=True)
        p = counts / batch_size
        ent.append(float(-(p * np.log(p)).sum()))
    return float(np.mean(ent))


def _lag1(x: np.ndarray) -> float:
    x = x.astype(np.float64)
    a, b = x[:-1] - x.mean(), x[1:] - x.mean()
    denom = float((a * a).sum())
    return float((a * b).sum() / denom) if denom > 0 else 0.0


def _same_rate_kappa(x: np.ndarray) -> float:
    """Categorical lag-1 autocorrelation: (P(x_t == x_t+1) - sum p_k^2) / (1 - sum p_k^2)."""
    _, counts = np.unique(x, return_counts=True)
    p2 = float(((counts / len(x)) ** 2).sum())
    same = float((x[:-1] == x[1:]).mean())
    return (same - p2) / (1 - p2) if p2 < 1 else 0.0


def shuffle_quality(
    shards,
    *,
    batch_size: int = 256,
    seed: int = 0,
    block_size: int = 16,
    shuffle_window: int = 8192,
    n_batches: int | None = None,
    audio_column: str = "audio",
    label_column: str = "label",
) -> dict:
    """Compare the train order's mixing with a uniform random permutation, without decoding.

    Over `n_batches` batches (default: one epoch), reports for both orders the mean per-batch label
    entropy (nats) and the lag-1 autocorrelation of the shard sequence (Pearson on shard numbers,
    and categorical kappa), plus `entropy_ratio` = loader / uniform.
    """
    ds = birdjepa._rs.Dataset(resolve_shards(shards), audio_column, label_column)
    n = int(ds.n_rows)
    labels, shard_ids = ds.labels(), ds.shard_ids()
    if n_batches is None:
        n_batches = max(1, n // batch_size)
    count = n_batches * batch_size
    order = birdjepa._rs.train_indices(n, seed, block_size, shuffle_window, 0, count)
    rng = np.random.default_rng(seed)
    reps = math.ceil(count / n)
    uniform = np.concatenate([rng.permutation(n) for _ in range(reps)])[:count]
    out = {"n_rows": n, "n_shards": int(shard_ids.max()) + 1, "batch_size": batch_size,
           "n_batches": n_batches, "block_size": block_size, "shuffle_window": shuffle_window}
    for name, idx in (("loader", order), ("uniform", uniform)):
        out[name] = {
            "label_entropy": _batch_entropy(labels[idx], batch_size),
            "shard_autocorr": _lag1(shard_ids[idx]),
            "shard_kappa": _same_rate_kappa(shard_ids[idx]),
            "label_autocorr": _lag1(labels[idx]),
        }
    out["entropy_ratio"] = out["loader"]["label_entropy"] / out["uniform"]["label_entropy"]
    return out
