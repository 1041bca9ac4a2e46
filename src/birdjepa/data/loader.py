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
  multi-hot (all zero for an empty list, no species, and for padding; all -1 for a null list,
  unlabelled: the objectives mask it as they mask a null int label).
* `index` int64 `(B,)`: the global row index (shards concatenated in order); -1 for eval padding.
* `shard` int32 `(B,)`: the shard number; -1 for eval padding.
* `valid` bool `(B,)`: False for eval padding rows and for samples that failed to decode.
* `start_s` float64 `(B,)`, or `(V, B)`: where each view starts in its recording, in seconds
  (-1 for padding and failed slots).
* with `n_local > 0` (multi-crop), `local` float32 `(L, B, local_frames, M)` and `local_start_s`
  float64 `(L, B)`: the local crops, cut from the same decoded window as the views.

With `batch_dtype="bfloat16"`, `data` and `local` are `ml_dtypes.bfloat16` (the float32 values
rounded to nearest even). With `features="device"`, `data` and `local` are absent and the batch
carries `wave` `(B, S)` (each sample's window of S = window seconds x sample_rate samples, int16
meaning x / 32768 from a corpus packed as 16-bit at `sample_rate`, else float32), `crop_start`
and `crop_frames` int32 `(V, B)` (each view's first frame in the window's fbank and the frames
from there that are the clip's; the rest of the view is padding) and, with local crops,
`local_crop_start` and `local_crop_frames` `(L, B)`; `birdjepa.data.device_features.featurize`
makes `data` and `local` of them.

With `process_count > 1`, `batch_size` is the global batch and each process gets its contiguous
`batch_size // process_count` slice; the union over processes of step `s` is the single-process
batch at step `s`. See docs/issues/003-deterministic-loader/README.md for the design.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
import warnings

import ml_dtypes

import birdjepa._rs
import birdjepa.common.errors as errors
import birdjepa.data.loader_config
import birdjepa.data.pack_dst as pack_dst
import birdjepa.data.sources as sources

STATE_VERSION = 1
TEST_TRANSFORMS = ("debug",)
"""Transforms of `_DebugLoader` only (Rust checks that a transform is one it has)."""
PATH_CHECK_ROWS = 64
"""Rows whose audio file opening checks (spread evenly over the dataset)."""


def resolve_shards(shards, split: str | None = None) -> list[str]:
    """The Arrow files `shards` means: a `datasets.Dataset`; a `DatasetDict` with `split`; a
    `save_to_disk` directory (exactly the files its state.json lists; map/filter cache-*.arrow
    files beside them are not read, with a warning); a DatasetDict directory or a `load_dataset`
    cache directory with a split, as `"DIR:SPLIT"` or `split=`; a plain directory (its *.arrow,
    sorted); a glob; a file; or a list of these. An .arrow file no rule explains is an error
    naming it. Details: `birdjepa.data.sources`."""
    return sources.resolve(shards, split)


def check_labels(dataset, label_column: str | None) -> dict | None:
    """`dataset.label_range()` ({"min": (label, path, row), "max": ..., "nulls": n}, None
    without a label column); a label below -1 is a DatasetError naming it and where it is."""
    r = dataset.label_range()
    if r is not None and r["min"] is not None and r["min"][0] < -1:
        v, path, row = r["min"]
        raise errors.DatasetError(
            f"{path}: row {row}, column '{label_column}': expected class ids >= 0 (or -1/null "
            f"for no label), got {v}")
    return r


def class_count(n_classes: int, names: list[str] | None, label_column: str | None) -> int:
    """The number of classes: the label column's ClassLabel names are the truth (int and list
    columns); an explicit n_classes that disagrees with them is a BadArgumentError; without names,
    n_classes as given (0: unknown)."""
    if names and n_classes and n_classes != len(names):
        raise errors.BadArgumentError(
            f"bad argument n_classes: expected {len(names)} (the ClassLabel names of column "
            f"'{label_column}'), got {n_classes}; leave n_classes unset to take the names")
    return len(names) if names else n_classes


def check_paths(dataset) -> tuple[int, int]:
    """Path-only audio: check that the files of `PATH_CHECK_ROWS` rows spread evenly over
    `dataset` exist and are regular files within max_audio_mb (stat only: a FIFO cannot block).
    None usable is a DatasetError naming one (and, for missing files, the settings that fix it);
    some missing or unusable is one warning per cause with the count. Returns (rows checked,
    rows whose file is missing or unusable)."""
    checked, missing, example, unusable, why = dataset.check_paths(PATH_CHECK_ROWS)
    if unusable:
        row, reason = why
        if unusable + missing == checked:
            raise errors.DatasetError(
                f"{dataset.shards()[0][0]}: none of the {checked} audio files checked can be "
                f"read (row {row}: {reason})")
        warnings.warn(f"birdjepa.data: {unusable} of {checked} audio files checked cannot be read "
                      f"as audio (row {row}: {reason}); those rows will be skipped (train) or "
                      "invalid (eval)", RuntimeWarning, stacklevel=4)
    if not missing:
        return checked, unusable
    row, stored, resolved = example
    where = (f"row {row} stores {stored!r}" + (f", read as {resolved!r}" if resolved != stored
                                                 else ""))
    if missing == checked:
        raise errors.DatasetError(
            f"{dataset.shards()[0][0]}: none of the {checked} audio files checked exists ({where}); "
            "set audio_root to the directory relative paths start from, or path_map = "
            "{\"<stored prefix>\" = \"<local prefix>\"} where the files moved")
    warnings.warn(f"birdjepa.data: {missing} of {checked} audio files checked do not exist "
                  f"({where}); those rows will be skipped (train) or invalid (eval)",
                  RuntimeWarning, stacklevel=4)
    return checked, missing + unusable


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


def _make_config(config: birdjepa.data.loader_config.LoaderConfig | None, settings: dict
                 ) -> birdjepa.data.loader_config.LoaderConfig:
    names = {f.name for f in dataclasses.fields(birdjepa.data.loader_config.LoaderConfig)}
    unknown = sorted(set(settings) - names)
    if unknown:
        known = sorted(names | set(birdjepa.data.loader_config.RUN_ARGS))
        raise TypeError(f"Loader got unexpected settings {unknown}; known: {known}")
    if config is not None and settings:
        return dataclasses.replace(config, **settings)
    return config if config is not None else birdjepa.data.loader_config.LoaderConfig(**settings)


class Loader:
    """Deterministic batches over Arrow shards; see the module docstring and
    `birdjepa.data.LoaderConfig`.

    `Loader(shards, batch_size=..., **settings)` or `Loader(shards, batch_size=...,
    config=LoaderConfig(...))` (settings passed beside `config` override it; a training
    config's `data` section is a LoaderConfig). The run's own arguments: `batch_size` (global,
    all processes together; each gets batch_size // process_count), `mode` ("train": infinite,
    reshuffled every epoch, random crops; "eval": one pass in index order, centre crops, last
    batch padded), `seed` (the order and the crops), `process_index`/`process_count` (this
    process yields slots [i * b, (i + 1) * b) of each global batch), `n_classes` (multi-hot width
    of a list<int> label column; 0 takes the number of its ClassLabel names). `shards` and
    `split` as `resolve_shards` takes them; `state` (from `state_dict()`) resumes a stream.
    Opening reads the label column once: `label_range` is its min/max and where they are,
    labels below -1 are a DatasetError (-1 and nulls mean "no label"); `multilabel` says whether
    it is a list column and `class_names` are its ClassLabel names (None if absent);
    `n_classes` is their number (an explicit n_classes must agree), else n_classes as given.
    Path-only audio (bytes null and a path, or a string column of paths) is read from the files,
    resolved with `audio_root` / `path_map`; opening checks a sample of them (`check_paths`). Each
    `iter(loader)` in eval mode after the first batch of a pass starts a new pass.
    """

    _TEST_TRANSFORMS: tuple[str, ...] = ()

    def __init__(self, shards, *, batch_size: int, mode: str = "train", seed: int = 0,
                 process_index: int = 0, process_count: int = 1, n_classes: int = 0,
                 split: str | None = None, state: dict | None = None,
                 config: birdjepa.data.loader_config.LoaderConfig | None = None, transform: str = "audio",
                 debug_delay_s: float = 0.0, batch_dtype: str = "float32", **settings):
        self._core = None
        self._open_checked(shards, split, config, settings, mode=mode, transform=transform,
                           batch_size=batch_size, seed=seed, process_index=process_index,
                           process_count=process_count, n_classes=n_classes,
                           debug_delay_s=debug_delay_s, batch_dtype=batch_dtype, state=state)
        self._rounded = 0
        start = 0 if state is None else self._check_state(state)
        self._by_kind: dict[str, int] = {}
        self._damaged: set[tuple[int, int]] = set()
        self._failures_seen = 0
        self._wait_s = 0.0
        self._yielded = 0
        self._start(start)

    # -- opening ------------------------------------------------------------------------------

    def _open_checked(self, shards, split, config, settings, *, mode, transform, batch_size,
                      seed, process_index, process_count, n_classes, debug_delay_s,
                      batch_dtype="float32", state=None) -> None:
        """Check the settings and run arguments, open and check the shards, and derive the
        stream's config, fingerprint and the JSON the Rust core runs with. An unset
        `resampler` is resolved here: `state`'s (the stream it resumes), else the default."""
        cfg = _make_config(config, settings)
        cfg = self.cfg = dataclasses.replace(cfg, resampler=birdjepa.data.loader_config.resolve_resampler(cfg, state))
        if transform in TEST_TRANSFORMS and transform not in self._TEST_TRANSFORMS:
            raise errors.BadArgumentError(
                f"bad argument transform: expected \"audio\", got {transform!r} (a test-only "
                "transform: use birdjepa.data._DebugLoader)")
        # The settings and the run arguments' types, checked by Rust (the rest once the
        # shards are open): each error names its setting.
        args = {"mode": mode, "batch_size": batch_size, "seed": seed, "n_classes": n_classes,
                "process_index": process_index, "process_count": process_count,
                "transform": transform, "debug_delay_s": debug_delay_s,
                "batch_dtype": batch_dtype}
        opening = birdjepa.data.loader_config.rust_json(cfg, args)
        birdjepa._rs.check_loader_settings(opening)
        self.mode, self.batch_size, self.seed = mode, int(batch_size), int(seed)
        self.process_index, self.process_count = int(process_index), int(process_count)
        self.transform, self.debug_delay_s = transform, float(debug_delay_s)
        self._open(shards, split, opening)
        self.batch_dtype = batch_dtype
        self.wave_dtype = "int16" if cfg.features == "device" and pack_dst.packed_16bit_at(
            self.paths, cfg.sample_rate) else "float32"
        self.multilabel = bool(self._dataset.multilabel)
        self.class_names = (sources.class_names(self.paths, cfg.label_column, shards)
                            if cfg.label_column else None)
        self.n_classes = class_count(int(n_classes), self.class_names, cfg.label_column)
        # The stream's n_classes: the multi-hot width of a list column; an int column's stream
        # does not use it, and keeps it as given (its fingerprint is that of before).
        stream_classes = self.n_classes if self.multilabel else int(n_classes)
        run = {"mode": self.mode, "seed": self.seed, "batch_size": self.batch_size,
               "transform": transform}
        self.config = (run | cfg.shaping_values()
                       | ({"n_classes": stream_classes} if stream_classes else {})
                       | self._summary())
        self.fingerprint = hashlib.sha256(
            json.dumps(self.config, sort_keys=True).encode()
        ).hexdigest()[:16]
        self._json = birdjepa.data.loader_config.rust_json(cfg, {
            **run, "process_index": self.process_index, "process_count": self.process_count,
            "n_classes": stream_classes, "debug_delay_s": self.debug_delay_s,
            "batch_dtype": batch_dtype, "wave_dtype": self.wave_dtype})

    def _open(self, shards, split, config_json: str) -> None:
        self.paths = resolve_shards(shards, split)
        t0 = time.perf_counter()
        self._dataset = birdjepa._rs.Dataset(
            self.paths, self.cfg.audio_column, self.cfg.label_column, config=config_json
        )
        check_paths(self._dataset)
        self.label_range = check_labels(self._dataset, self.cfg.label_column)
        self.open_s = time.perf_counter() - t0
        self.n_samples = int(self._dataset.n_rows)
        if type(shards).__name__ == "DatasetDict":
            shards = shards[split]
        if hasattr(shards, "cache_files") and len(shards) != self.n_samples:
            raise errors.BadArgumentError(
                f"bad argument shards: expected a datasets.Dataset spanning its cache files "
                f"({self.n_samples} rows), got a view of {len(shards)} rows (call "
                f".flatten_indices() or save_to_disk/load_from_disk first)"
            )

    def _summary(self) -> dict:
        """The shards part of `config`: count, rows and a hash of (file name, rows)."""
        shard_list = [(os.path.basename(p), rows) for p, rows, _ in self._dataset.shards()]
        shards_hash = hashlib.sha256(json.dumps(shard_list).encode()).hexdigest()[:16]
        return {"n_shards": len(shard_list), "n_rows": self.n_samples, "shards_hash": shards_hash}

    def _check_state(self, state: dict) -> int:
        err = errors.StateMismatchError
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

    # -- lifecycle ------------------------------------------------------------------------------

    def _start(self, step: int) -> None:
        if self._core is not None:
            self._core.close()
            self._core = None
        self._step = step
        self._pass_fresh = True
        self._finished = False
        self._core = birdjepa._rs.Loader(self._dataset, self._json, start_step=step)

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
            raise errors.BadArgumentError(
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
        step, batch, failures, damaged = out
        if self.batch_dtype == "bfloat16":
            for k in ("data", "local"):
                if k in batch:
                    batch[k] = batch[k].view(ml_dtypes.bfloat16)
        rounded = batch.pop("wave_rounded", 0)
        if rounded and not self._rounded:
            warnings.warn(f"birdjepa.data: {rounded} samples of a batch were not 16-bit audio at "
                          f"{self.cfg.sample_rate} Hz and were rounded to int16 (the corpus's "
                          "pack plan promised 16-bit); counted in loader.stats()['wave_rounded']",
                          RuntimeWarning, stacklevel=2)
        self._rounded += rounded
        self._step = step + 1
        self._yielded += 1
        for _index, shard, row, message, _kind in damaged:
            if (shard, row) not in self._damaged:  # once per recording, however often drawn
                self._damaged.add((shard, row))
                warnings.warn(f"birdjepa.data: {self.paths[shard]} row {row}: {message}; using "
                              "what it holds", RuntimeWarning, stacklevel=2)
        for index, shard, row, error, kind in failures:
            self._failures_seen += 1
            n = self._by_kind[kind] = self._by_kind.get(kind, 0) + 1
            if _is_power_of_ten(n):  # one line per kind, again at 10, 100, ... of them
                warnings.warn(
                    f"birdjepa.data: skipped sample {index} ({self.paths[shard]} row {row}): "
                    f"{error} [{kind}: {n} so far; counts by kind in "
                    "loader.stats()['failures_by_kind']]",
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

    # -- diagnostics ----------------------------------------------------------------------------

    def stats(self) -> dict:
        """Pipeline counters (decoded, failures, replaced, invalid include prefetched work), the
        next step, batches yielded, seconds spent waiting for batches, and the last failures."""
        s = dict(self._core.stats()) if self._core is not None else {}
        s["recent_failures"] = [
            {"index": i, "shard": self.paths[sh], "row": r, "error": e, "kind": k}
            for i, sh, r, e, k in s.get("recent_failures", [])
        ]
        s["failures_by_kind"] = dict(self._by_kind)
        s.update(
            step=self._step,
            batches_yielded=self._yielded,
            wait_s=self._wait_s,
            open_s=self.open_s,
            failures_yielded=self._failures_seen,
            wave_rounded=self._rounded,
        )
        return s


def _is_power_of_ten(n: int) -> bool:
    """1, 10, 100, ...: when a running count of failures of one kind is warned about again."""
    while n % 10 == 0:
        n //= 10
    return n == 1


class _DebugLoader(Loader):
    """A Loader that also accepts the test-only transform="debug" (a deterministic hash of the
    bytes and the crop, `debug_delay_s` slower per sample). For tests and benchmarks only."""

    _TEST_TRANSFORMS = ("debug",)


def trial(shards, *, config: birdjepa.data.loader_config.LoaderConfig, mode: str, batch_size: int,
          n_classes: int = 0) -> dict:
    """Decode the first `config.failure_window` samples of `shards` as a run's `mode` loader
    does and judge them by `config.max_failure_fraction` (birdjepa.TooManyFailuresError, as the
    run would raise it); an eval pass ends sooner on a smaller split. What `launch --dry_run`
    runs so data that decodes too badly is found before a job is queued. Returns
    {"samples", "failures", "failures_by_kind"}."""
    n = max(1, config.failure_window)
    config = dataclasses.replace(config, n_workers=min(2, os.cpu_count() or 1))
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # counted below, not one line each
        with Loader(shards, config=config, mode=mode, batch_size=max(1, min(batch_size, n)),
                    n_classes=n_classes) as ld:
            for batch in ld:
                seen += len(batch["valid"]) if "valid" in batch else ld.batch_size
                if seen >= n:
                    break
            s = ld.stats()
    tried = int(s.get("decoded", 0)) + int(s.get("failures", 0))  # prefetched work included
    return {"samples": tried, "failures": int(s.get("failures", 0)),
            "failures_by_kind": dict(s.get("failures_by_kind", {}))}
