"""`LoaderConfig`: every loader setting, declared once (name, default, docstring) and checked once,
beside its declaration (`LoaderConfig.check`).

The training config's `data` section is this class plus the keys only training needs
(birdjepa.config.DataConfig subclasses it), so a setting added here is a training key at once and
reaches the Rust worker unchanged: TOML -> DataConfig -> Loader(config=cfg.data) -> JSON ->
rust/src/loader/config.rs. What a run decides rather than the user (batch size, mode, seed, the
process's slice, the class count, the test-only transform) are the Loader's own arguments
(`RUN_ARGS`). The Rust twin keeps its own checks as the boundary's guard;
tests/test_loader_config.py asserts that both sides have the same fields, defaults and error
messages.
"""

import dataclasses
import json
import math
import os
import typing

import numpy as np

import birdjepa._rs
import birdjepa.common.errors as errors

DEFAULT_MEAN = -7.2
DEFAULT_STD = 4.43
MAX_WINDOW_S = 3600.0

PADS: tuple[str, ...] = ("zero", "min", "repeat")
"""What fills the frames past a clip shorter than n_frames (LoaderConfig.pad)."""
RESAMPLERS: tuple[str, ...] = tuple(birdjepa._rs.RESAMPLERS)
"""The resampling filters by name (rust/src/resample.rs `Filter`, their one declaration;
birdjepa.data.audio.RESAMPLERS describes them)."""
DEFAULT_RESAMPLER: str = birdjepa._rs.DEFAULT_RESAMPLER
"""What a new stream resamples with: soxr HQ's response (Hugging Face `datasets`, librosa)."""
LEGACY_RESAMPLER: str = birdjepa._rs.LEGACY_RESAMPLER
"""What a stream resamples with whose state or config names no filter: every one saved before
the `resampler` setting existed used it."""

RUN_ARGS = {"mode": "train", "batch_size": None, "seed": 0, "process_index": 0,
            "process_count": 1, "n_classes": 0, "transform": "audio", "debug_delay_s": 0.0}
"""The Loader's own arguments (not settings) and their defaults (batch_size is required). With
the LoaderConfig fields they are the Rust LoaderConfig's fields."""
RUN_SHAPING = ("mode", "seed", "batch_size", "transform")
"""Run arguments in `Loader.config` and the fingerprint (n_classes too, when it is not 0)."""


def _added(default):
    """A stream-shaping setting added after the state format was fixed: in `Loader.config` and
    the fingerprint only when it differs from `default`, so that states saved before it existed
    (which used the default) still resume."""
    return dataclasses.field(default=default, metadata={"omit_at_default": True})


def _resampler():
    """The `resampler` setting: None (unset) is resolved when a stream opens (the default for a
    new stream, a state's own for a resumed one); in `Loader.config` and the fingerprint unless
    it is the legacy filter, which states saved before the setting existed used without naming
    it."""
    return dataclasses.field(default=None, metadata={"legacy": LEGACY_RESAMPLER})


def _local(default):
    """A local-crop setting: in `Loader.config` only with n_local > 0 (it has no effect without
    local crops, and states saved before local crops existed omit it)."""
    return dataclasses.field(default=default, metadata={"only_with_local": True})


def _speed(default):
    """A setting that only affects speed (or only when the loader gives up): not part of
    `Loader.config` or the fingerprint."""
    return dataclasses.field(default=default, metadata={"shapes_stream": False})


def fmt(v) -> str:
    """A value as the Rust side prints it in its messages (5.0 -> "5", 0.5 -> "0.5")."""
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return str(int(v))
    return str(v)


def bad_argument(name: str, expected: str, got) -> "birdjepa.BadArgumentError":
    """The error Rust raises for the same check, worded the same way."""
    return errors.BadArgumentError(f"bad argument {name}: expected {expected}, got "
                                         f"{fmt(got)}")


def kaldi_frames(seconds: float) -> int:
    """Kaldi's frame count of `seconds` of audio (25 ms frames every 10 ms, snip_edges): 498 for
    5 s, 198 for 2 s; the loader's count (rust/src/loader/config.rs kaldi_frames)."""
    ms = round(seconds * 1000)  # half to even, as Rust's round_ties_even
    return max(1, 1 + (ms - 25) // 10)


def resolve_workers(n_workers: int | str) -> int:
    """`n_workers` resolved: "auto" is every CPU this process may use (os.sched_getaffinity:
    Slurm's cpus-per-task, taskset, cgroups' cpusets), at least 2. The trainer's own threads
    mostly sleep on the device: on an H200 node with 16 CPUs, vit-s over the packed demo corpus ran
    at the step's own pace with 16 workers (4.59 steps/s, data wait 10 %) and 10 % below it with
    14 (4.15; docs/issues/022-gpu-kept-busy)."""
    if n_workers != "auto":
        return int(n_workers)
    return max(2, len(os.sched_getaffinity(0)))


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    """Every loader setting; see the module docstring. Settings made with `_speed` do not shape
    the stream; every other one is in `Loader.config` and the fingerprint."""

    n_workers: int | typing.Literal["auto"] = _speed("auto")
    """Transform threads; "auto": the CPUs this process may use (its affinity mask, which
    Slurm's --cpus-per-task sets), at least 2 (see `resolve_workers`)."""
    n_views: int = 1
    """Crops per row; batches are then (V, B, T, M) when > 1 (lejepa needs >= 2)."""
    n_frames: int = 512
    """Frames per clip (T of (B, T, M)): shorter padded (`pad`), longer cut; to train, a
    multiple of model.patch[0]."""
    n_mels: int = 128
    """Mel bins (the M of (B, T, M)); a training encoder needs a multiple of model.patch[1]."""
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
    pad: str = _added("zero")
    """Frames past a clip's own: "zero" (0.0 after normalising), "min" (the clip's minimum
    log-mel before normalising: Bird-MAE) or "repeat" (the clip again from its first frame:
    nothing for a model to learn; best for short clips, docs/issues/024-soundscape-abstain)."""
    max_replacements: int = 16
    """Train mode: later rows tried in place of a failed one before the slot is invalid."""
    clip_s: float = 5.0
    """Clip (view) duration in seconds."""
    sample_rate: int = 32000
    """Sample rate the audio is resampled to."""
    resampler: str | None = _resampler()
    """Filter for recordings not at sample_rate: "soxr-hq" (soxr HQ's response: Hugging Face
    `datasets`, librosa >= 0.10, BirdSet, Bird-MAE) or "rubato-bh2-1024" (before issue 36). Unset:
    soxr-hq for a new stream, a resumed one keeps its own (`resolve_resampler`)."""
    view_window_s: float = _added(0.0)
    """0: every view is its own random crop of the recording, one decode each. Otherwise one
    window of this many seconds (in [clip_s, 3600]) per sample is decoded, resampled and
    featurized once, and its views are clip_s crops cut from it at random 10 ms frame offsets
    (all inside the part of the window that the recording covers): views that overlap, at about
    1/n_views of the cost per view. Eval mode takes the centre window and centre views."""
    n_local: int = _added(0)
    """Local crops per sample (multi-crop, as in DINO and LeJEPA): `local_s`-second views cut,
    like the global views, from the one decoded `view_window_s` window (required), at their own
    random frame offsets; batches then carry `local` (n_local, B, local_frames, n_mels) and
    `local_start_s` (n_local, B). Training: objective lejepa only. Eval mode takes centre crops."""
    local_s: float = _local(2.0)
    """Duration of a local crop, seconds, in (0, clip_s]."""
    local_frames: int | None = _local(None)
    """Frames of a local crop; unset: local_s's Kaldi frames (2 s: 198) at most n_frames (a
    training config cuts them to whole model.patch[0] rows, 2 s at 16: 192; more is an error)."""
    audio_column: str = "audio"
    """Column with the encoded audio (HF Audio struct or binary)."""
    label_column: str | None = "label"
    """Label column: int (one class per row; -1 or null: no label; string labels need
    ds.class_encode_column first), list<int> (multilabel: multi-hot targets), or None (targets
    are then -1). Checked against n_classes at open."""
    max_failure_fraction: float = _speed(0.1)
    """Raise birdjepa.TooManyFailuresError once more than this fraction of the last
    `failure_window` samples (each failed attempt and each success, in stream order) failed,
    naming the most common error and example (file, row)s; 1.0 never raises. A dataset smaller
    than the window is judged once all its rows were tried."""
    failure_window: int = _speed(512)
    """Samples over which max_failure_fraction is judged (512: one or two batches)."""
    crop: str = _added("random")
    """Train crops: "random" (uniform) or "events": covering one of the row's events
    (`events_column`, drawn by the seed, jittered over its slack; none: random; with
    view_window_s the window covers it). Eval ignores it."""
    events_column: str = _added("detected_events")
    """list<[start, end]> seconds column read with crop="events" (BirdSet's detected_events)."""
    segment: str = _added("centre")
    """Eval crops: "centre" (a file no longer than the clip, such as BirdSet's pre-cut test_5s,
    is taken whole and padded) or "columns": each row's [start, end] seconds inside its file,
    from `segment_start_column` / `segment_end_column`, cut exactly there (a start past the end
    of the file is an error naming the row). Train ignores it."""
    segment_start_column: str = _added("start_time")
    """Column of segment starts, seconds (segment="columns")."""
    segment_end_column: str = _added("end_time")
    """Column of segment ends, seconds (segment="columns")."""
    audio_root: str = _speed("")
    """Path-only audio (HF Audio with bytes null and a path, or a string column of paths):
    relative paths resolve against this directory ("": the shard's own); absolute ones as stored."""
    path_map: dict[str, str] | None = _speed(None)
    """Path-only audio: {stored prefix: local prefix} over whole path components, applied before
    `audio_root` (the longest matching key wins; "/old/run1" never maps "/old/run10/x.wav"),
    e.g. {"/home/me/.cache/huggingface": "/scratch/hf"} for a cache copied to a cluster's
    scratch. The rule: birdjepa.data.paths."""
    max_audio_mb: float = _speed(1024.0)
    """Path-only audio: a file above this many MB (10^6 bytes) is a counted skip, never read
    (each read holds the whole file in memory). Only regular files are read at all: a FIFO, a
    device or a directory is a counted skip too. 1024 MB holds ~1.5 h of 16-bit 96 kHz mono WAV."""

    def __post_init__(self):
        # Plain int/float values (numpy scalars, 5 for 5.0), so that config and fingerprint are
        # the same however a value was spelled.
        hints = typing.get_type_hints(LoaderConfig)
        for f in dataclasses.fields(LoaderConfig):
            v, t = getattr(self, f.name), hints[f.name]
            if isinstance(v, bool):
                continue
            if t is int and isinstance(v, np.integer):
                object.__setattr__(self, f.name, int(v))
            elif t is float and isinstance(v, (int, np.integer, np.floating)):
                object.__setattr__(self, f.name, float(v))

    def check(self) -> "LoaderConfig":
        """Every check of a setting and of a relation between settings, in Rust's words
        (`bad argument NAME: expected ..., got ...`, a birdjepa.BadArgumentError); returns
        self. birdjepa.config.validate reports the same checks under `data.NAME`."""
        for f in dataclasses.fields(LoaderConfig):  # JSON has no NaN or inf
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise bad_argument(f.name, "a finite number", v)
        if not (self.n_workers == "auto" or _is_int(self.n_workers) and self.n_workers >= 1):
            raise bad_argument("n_workers", ">= 1 or 'auto'", self.n_workers)
        for name in ("n_views", "n_frames", "n_mels", "block_size", "shuffle_window",
                     "prefetch", "failure_window", "max_replacements", "sample_rate"):
            v = getattr(self, name)
            if not _is_int(v) or v < (0 if name == "max_replacements" else 1):
                raise bad_argument(name, ">= 0" if name == "max_replacements" else ">= 1", v)
        if not 0.0 <= self.max_failure_fraction <= 1.0:
            raise bad_argument("max_failure_fraction", "a number in [0, 1]",
                               self.max_failure_fraction)
        if not self.std > 0.0:
            raise bad_argument("std", "a finite value > 0", self.std)
        if not self.clip_s > 0.0:
            raise bad_argument("clip_s", "seconds > 0", self.clip_s)
        self._check_window()
        for name, allowed in (("crop", ("random", "events")), ("segment", ("centre", "columns")),
                              ("pad", PADS), ("resampler", (None, *RESAMPLERS))):
            if getattr(self, name) not in allowed:
                allowed = tuple(a for a in allowed if a is not None)
                raise bad_argument(name, f"one of {', '.join(allowed)}",
                                   json.dumps(getattr(self, name)))
        if not self.max_audio_mb > 0.0:
            raise bad_argument("max_audio_mb", "a finite number of MB > 0", self.max_audio_mb)
        if self.path_map is not None and not (isinstance(self.path_map, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.path_map.items())):
            raise bad_argument("path_map", "a table of stored prefix = local prefix strings",
                               repr(self.path_map))
        return self

    def _check_window(self) -> None:
        w, clip = self.view_window_s, fmt(self.clip_s)
        if not (w == 0.0 or self.clip_s <= w <= MAX_WINDOW_S):
            raise bad_argument("view_window_s",
                               f"0 (one decode per view) or seconds in [clip_s={clip}, 3600]", w)
        if not _is_int(self.n_local) or self.n_local < 0:
            raise bad_argument("n_local", ">= 0", self.n_local)
        if self.n_local == 0:
            return
        if w == 0.0:
            raise bad_argument("view_window_s", f"seconds in [clip_s={clip}, 3600] with "
                               f"n_local={self.n_local} (local crops are cut from the one "
                               "decoded window)", w)
        if not 0.0 < self.local_s <= self.clip_s:
            raise bad_argument("local_s", f"seconds in (0, clip_s={clip}] with n_local > 0",
                               self.local_s)
        if self.local_frames is not None and (not _is_int(self.local_frames)
                                              or self.local_frames < 1):
            raise bad_argument("local_frames", ">= 1", self.local_frames)
        real = kaldi_frames(self.local_s)
        if self.local_frames is not None and self.local_frames > real:
            raise bad_argument("local_frames", f"at most {real} (the frames of a local_s="
                               f"{fmt(self.local_s)} s crop; more would be zero-padding; leave "
                               "it unset to derive it)", self.local_frames)

    def local_frames_or_derived(self) -> int:
        """`local_frames`, or when unset the Kaldi frames of local_s, at most n_frames."""
        if self.local_frames is not None:
            return int(self.local_frames)
        return min(kaldi_frames(self.local_s), self.n_frames)

    def for_eval(self) -> "LoaderConfig":
        """These settings for an evaluation pass: one centre view per row, no window, no local
        crops (the crop's transform is the training one)."""
        return dataclasses.replace(self, n_views=1, view_window_s=0.0, n_local=0)

    def settings(self) -> dict:
        """The LoaderConfig fields by name (a subclass's extra fields left out)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(LoaderConfig)}

    def shaping_values(self) -> dict:
        """The settings that shape the stream, by name, as `Loader.config` holds them."""
        out = {}
        for f in dataclasses.fields(LoaderConfig):
            v = getattr(self, f.name)
            if not f.metadata.get("shapes_stream", True):
                continue
            if f.metadata.get("omit_at_default") and v == f.default:
                continue
            if f.metadata.get("only_with_local") and self.n_local == 0:
                continue
            if "legacy" in f.metadata and (v := resolve_resampler(self)) == f.metadata["legacy"]:
                continue
            out[f.name] = self.local_frames_or_derived() if f.name == "local_frames" else v
        return out


def resolve_resampler(cfg: LoaderConfig, state: dict | None = None) -> str:
    """`cfg.resampler`, or when unset: a saved loader state's (`state`, from `state_dict()`: one
    that names none is LEGACY_RESAMPLER's), or for a new stream DEFAULT_RESAMPLER."""
    if cfg.resampler is not None:
        return cfg.resampler
    if state is None:
        return DEFAULT_RESAMPLER
    saved = state.get("config") if isinstance(state, dict) else None
    return (saved.get("resampler") if isinstance(saved, dict) else None) or LEGACY_RESAMPLER


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def rust_json(cfg: LoaderConfig, run: dict) -> str:
    """The JSON the Rust LoaderConfig reads: the settings (n_workers resolved) and the run
    arguments."""
    d = cfg.settings() | run
    d["n_workers"] = resolve_workers(d["n_workers"])
    d["resampler"] = resolve_resampler(cfg)
    d["local_frames"] = cfg.local_frames_or_derived() if cfg.n_local else 0
    return json.dumps(d)
