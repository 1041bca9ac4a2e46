"""Deterministic, resumable data loading over Hugging Face Arrow shards.

`Loader` wraps the Rust pipeline (`birdjepa._rs.Loader`): an I/O thread, `n_workers` transform
threads and a re-sequencing/batch-assembly thread, all outside the GIL. The batch stream is a pure
function of (dataset, stream-shaping config, seed): it is bitwise identical for any `n_workers`,
and `Loader(..., state=loader.state_dict())` continues with exactly the next batch.

Batches are dicts of numpy arrays:

* `data` float32 `(B, T, M)`, or `(V, B, T, M)` with `n_views > 1`: log-mel features normalised
  Bird-MAE style as `(x - mean) / (2 * std)` (defaults mean=-7.2, std=4.43). Clips shorter than
  `n_frames` are padded with 0.0 *after* normalisation (the dataset mean); longer ones are cut.
* `target` int64 `(B,)`: the label column (-1 when `label_column=None` or the label is null); for
  a `list<int>` label column (multilabel, HF `Sequence(ClassLabel)`) float32 `(B, n_classes)`
  multi-hot (all zero for an empty or null list, and for padding).
* `index` int64 `(B,)`: the global row index (shards concatenated in order); -1 for eval padding.
* `shard` int32 `(B,)`: the shard number; -1 for eval padding.
* `valid` bool `(B,)`: False for eval padding rows and for samples that failed to decode.
* `start_s` float64 `(B,)`, or `(V, B)`: where each view starts in its recording, in seconds
  (-1 for padding and failed slots).
* with `n_local > 0` (multi-crop), `local` float32 `(L, B, local_frames, M)` and `local_start_s`
  float64 `(L, B)`: the local crops, cut from the same decoded window as the views.

With `process_count > 1`, `batch_size` is the global batch and each process gets its contiguous
`batch_size // process_count` slice; the union over processes of step `s` is the single-process
batch at step `s`. See docs/issues/003-deterministic-loader/README.md for the design.
"""

import dataclasses
import hashlib
import json
import math
import os
import time
import warnings

import numpy as np

import birdjepa._rs
import birdjepa.sources

DEFAULT_MEAN = -7.2
DEFAULT_STD = 4.43
STATE_VERSION = 1


def resolve_shards(shards, split: str | None = None) -> list[str]:
    """The Arrow files `shards` means: a `datasets.Dataset`; a `DatasetDict` with `split`; a
    `save_to_disk` directory (exactly the files its state.json lists; map/filter cache-*.arrow
    files beside them are not read, with a warning); a DatasetDict directory or a `load_dataset`
    cache directory with a split, as `"DIR:SPLIT"` or `split=`; a plain directory (its *.arrow,
    sorted); a glob; a file; or a list of these. An .arrow file no rule explains is an error
    naming it. Details: `birdjepa.sources`."""
    return birdjepa.sources.resolve(shards, split)


def check_labels(dataset, label_column: str | None) -> dict | None:
    """`dataset.label_range()` ({"min": (label, path, row), "max": ..., "nulls": n}, None
    without a label column); a label below -1 is a DatasetError naming it and where it is."""
    r = dataset.label_range()
    if r is not None and r["min"] is not None and r["min"][0] < -1:
        v, path, row = r["min"]
        raise birdjepa._rs.DatasetError(
            f"{path}: row {row}, column '{label_column}': expected class ids >= 0 (or -1/null "
            f"for no label), got {v}")
    return r


def label_problem(label_range: dict | None, n_classes: int) -> str | None:
    """Why labels with `label_range` do not fit `n_classes` classes, or None if they do."""
    if label_range is None or label_range["max"] is None:
        return None
    v, path, row = label_range["max"]
    if v < n_classes:
        return None
    lo = label_range["min"][0]
    return (f"n_classes={n_classes}: expected labels in [0, {n_classes}), got {v} at {path} row "
            f"{row} (labels span {lo}..{v})")


def _added(default):
    """A stream-shaping setting added after the state format was fixed: in `Loader.config` and
    the fingerprint only when it differs from `default`, so that states saved before it existed
    (which used the default) still resume."""
    return dataclasses.field(default=default, metadata={"omit_at_default": True})


def _speed(default):
    """A setting that only affects speed (or only when the loader gives up): not part of
    `Loader.config` or the fingerprint."""
    return dataclasses.field(default=default, metadata={"shapes_stream": False})


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """Every loader setting. The Rust twin is `LoaderConfig` in rust/src/loader/config.rs (same
    names and defaults, checked by tests/test_loader_config.py); `birdjepa._rs.Loader` reads this
    as JSON. Adding a setting: one field here, one there, plus its test. Settings made with
    `_speed` do not shape the stream; every other one is in `Loader.config` and the fingerprint."""

    batch_size: int
    """Global batch size (all processes together); each process gets batch_size // process_count."""
    mode: str = "train"
    """"train" (infinite, reshuffled every epoch, random crops) or "eval" (one pass in index order,
    centre crops, last batch padded)."""
    seed: int = 0
    """Seeds the order and the crops."""
    n_workers: int = _speed(2)
    """Transform threads."""
    process_index: int = _speed(0)
    """This process's rank; it yields slots [i * b, (i + 1) * b) of each global batch."""
    process_count: int = _speed(1)
    """Processes sharing each global batch."""
    n_views: int = 1
    """Crops per row; data is (V, B, T, M) when > 1."""
    n_frames: int = 512
    """Frames per clip: shorter clips are padded with 0.0 after normalisation, longer ones cut."""
    n_mels: int = 128
    """Mel bins."""
    block_size: int = 16
    """Rows kept contiguous by the order (locality of reads)."""
    shuffle_window: int = 8192
    """Rows over which blocks are shuffled."""
    prefetch: int = _speed(2)
    """Assembled batches queued ahead of the consumer."""
    mean: float = DEFAULT_MEAN
    """Normalisation: (x - mean) / (2 * std)."""
    std: float = DEFAULT_STD
    """Normalisation: (x - mean) / (2 * std)."""
    max_replacements: int = 16
    """Train mode: later rows tried in place of a failed one before the slot is invalid."""
    transform: str = "audio"
    """"audio" (decode -> resample -> fbank); "debug" is a test-only transform (_DebugLoader)."""
    clip_s: float = 5.0
    """Clip duration in seconds."""
    sample_rate: int = 32000
    """Sample rate the audio is resampled to."""
    view_window_s: float = _added(0.0)
    """0: every view is its own random crop of the recording, one decode each. Otherwise one
    window of this many seconds (>= clip_s) per sample is decoded, resampled and featurized once,
    and its views are clip_s crops cut from it at random 10 ms frame offsets (all inside the part
    of the window that the recording covers): views that overlap, at about 1/n_views of the cost
    per view. Eval mode takes the centre window and centre views."""
    n_local: int = _added(0)
    """Local crops per sample (multi-crop, as in DINO and LeJEPA): `local_s`-second views cut,
    like the global views, from the one decoded `view_window_s` window (required), at their own
    random frame offsets; batches then carry `local` (n_local, B, local_frames, n_mels) and
    `local_start_s` (n_local, B). Eval mode takes centre crops."""
    local_s: float = _added(0.0)
    """Duration of a local crop, seconds, in (0, clip_s]."""
    local_frames: int = _added(0)
    """Frames of a local view in the batch (cut or zero-padded after normalising, like
    n_frames); with n_local > 0, at least 1."""
    audio_column: str = "audio"
    """Column with the encoded audio (HF Audio struct or binary)."""
    label_column: str | None = "label"
    """Label column: int (one class per row), list<int> (multilabel: multi-hot targets), or None
    (targets are then -1)."""
    n_classes: int = _added(0)
    """Multi-hot width for a list<int> label column; 0 takes the number of its ClassLabel names
    (an error without them). Ignored for an int column."""
    debug_delay_s: float = _speed(0.0)
    """The debug transform's artificial per-sample delay (tests)."""
    max_failure_fraction: float = _speed(0.1)
    """Raise birdjepa.TooManyFailuresError once more than this fraction of the last
    `failure_window` samples (each failed attempt and each success, in stream order) failed,
    naming the most common error and example (file, row)s; 1.0 never raises. A dataset smaller
    than the window is judged once all its rows were tried. Does not shape the stream."""
    failure_window: int = _speed(512)
    """Samples over which max_failure_fraction is judged (512: one or two batches)."""

    @classmethod
    def shaping(cls) -> tuple[str, ...]:
        """The settings that shape the batch stream, in declaration order."""
        return tuple(
            f.name for f in dataclasses.fields(cls) if f.metadata.get("shapes_stream", True)
        )

    def shaping_values(self) -> dict:
        """The settings that shape the stream, by name (see `_added` for the omitted ones)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.metadata.get("shapes_stream", True) and not (
                    f.metadata.get("omit_at_default") and v == f.default):
                out[f.name] = v
        return out

    def __post_init__(self):
        self._check()
        # Plain int/float values (numpy scalars, 5 for 5.0), so that config and fingerprint are
        # the same however a value was spelled.
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type is int and isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                object.__setattr__(self, f.name, int(v))
            elif f.type is float and isinstance(v, (int, float, np.integer, np.floating)):
                object.__setattr__(self, f.name, float(v))

    def _check(self) -> None:
        """The checks Rust cannot word as well (types and the mode); Rust checks the rest."""
        bad = birdjepa._rs.BadArgumentError
        if self.mode not in ("train", "eval"):
            raise bad(f"bad argument mode: expected 'train' or 'eval', got {self.mode!r}")
        for f in dataclasses.fields(self):  # JSON has no NaN or inf: say which setting it is
            v = getattr(self, f.name)
            if isinstance(v, (float, np.floating)) and not math.isfinite(v):
                raise bad(f"bad argument {f.name}: expected a finite number, got {v!r}")
        for name in ("batch_size", "seed", "n_workers", "n_classes", "n_local", "local_frames"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise bad(f"bad argument {name}: expected a non-negative int, got {value!r}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))


def _make_config(config: LoaderConfig | None, settings: dict) -> LoaderConfig:
    if config is not None and settings:
        raise TypeError(f"Loader: pass config= or settings, not both (got {sorted(settings)})")
    if config is not None:
        return config
    names = {f.name for f in dataclasses.fields(LoaderConfig)}
    unknown = sorted(set(settings) - names)
    if unknown:
        raise TypeError(f"Loader got unexpected settings {unknown}; known: {sorted(names)}")
    return LoaderConfig(**settings)


class Loader:
    """Deterministic batches over Arrow shards; see the module docstring and `LoaderConfig`.

    `Loader(shards, batch_size=..., **settings)` or `Loader(shards, config=LoaderConfig(...))`;
    `shards` and `split` as `resolve_shards` takes them; `state` (from `state_dict()`) resumes a
    stream. Opening reads the label column once: `label_range` is its min/max and where they
    are, labels below -1 are a DatasetError (-1 and nulls mean "no label"); `multilabel` says
    whether it is a list column and `class_names` are its ClassLabel names (None if absent).
    Train mode is infinite; eval mode is one finite pass and each `iter(loader)` after the first
    batch of a pass starts a new pass.
    """

    _TEST_TRANSFORMS: tuple[str, ...] = ()

    def __init__(self, shards, *, split: str | None = None, state: dict | None = None,
                 config: LoaderConfig | None = None, **settings):
        self._core = None
        cfg = self.cfg = _make_config(config, settings)
        if cfg.transform in ("debug",) and cfg.transform not in self._TEST_TRANSFORMS:
            raise birdjepa._rs.BadArgumentError(
                f"bad argument transform: expected \"audio\", got {cfg.transform!r} (a test-only "
                "transform: use birdjepa.data._DebugLoader)"
            )
        self.mode, self.batch_size = cfg.mode, int(cfg.batch_size)
        self.process_index, self.process_count = int(cfg.process_index), int(cfg.process_count)
        self._open(shards, split)
        self.multilabel = bool(self._dataset.multilabel)
        self.class_names = (birdjepa.sources.class_names(self.paths, cfg.label_column, shards)
                            if cfg.label_column else None)
        if self.multilabel and cfg.n_classes == 0 and self.class_names:
            cfg = self.cfg = dataclasses.replace(cfg, n_classes=len(self.class_names))
        self.config = cfg.shaping_values() | self._summary()
        self.fingerprint = hashlib.sha256(
            json.dumps(self.config, sort_keys=True).encode()
        ).hexdigest()[:16]
        start = 0 if state is None else self._check_state(state)
        self._logged: set[int] = set()
        self._failures_seen = 0
        self._wait_s = 0.0
        self._yielded = 0
        self._start(start)

    def _open(self, shards, split) -> None:
        self.paths = resolve_shards(shards, split)
        t0 = time.perf_counter()
        self._dataset = birdjepa._rs.Dataset(
            self.paths, self.cfg.audio_column, self.cfg.label_column
        )
        self.label_range = check_labels(self._dataset, self.cfg.label_column)
        self.open_s = time.perf_counter() - t0
        self.n_samples = int(self._dataset.n_rows)
        if type(shards).__name__ == "DatasetDict":
            shards = shards[split]
        if hasattr(shards, "cache_files") and len(shards) != self.n_samples:
            raise birdjepa._rs.BadArgumentError(
                f"bad argument shards: expected a datasets.Dataset spanning its cache files "
                f"({self.n_samples} rows), got a view of {len(shards)} rows (call "
                f".flatten_indices() or save_to_disk/load_from_disk first)"
            )

    def _summary(self) -> dict:
        """The shards part of `config`: count, rows and a hash of (file name, rows)."""
        shard_list = [(os.path.basename(p), rows) for p, rows, _ in self._dataset.shards()]
        shards_hash = hashlib.sha256(json.dumps(shard_list).encode()).hexdigest()[:16]
        return {"n_shards": len(shard_list), "n_rows": self.n_samples, "shards_hash": shards_hash}

    # -- lifecycle ------------------------------------------------------------------------------

    def _start(self, step: int) -> None:
        if self._core is not None:
            self._core.close()
            self._core = None
        self._step = step
        self._pass_fresh = True
        self._finished = False
        self._core = birdjepa._rs.Loader(self._dataset, self.cfg.to_json(), start_step=step)

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
                f"{k}: state has {theirs.get(k)!r}, loader has {self.config.get(k)!r}"
                for k in sorted(set(self.config) | set(theirs))
                if theirs.get(k) != self.config.get(k)
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


class _DebugLoader(Loader):
    """A Loader that also accepts the test-only transform="debug" (a deterministic hash of the
    bytes and the crop, `debug_delay_s` slower per sample). For tests and benchmarks only."""

    _TEST_TRANSFORMS = ("debug",)


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
