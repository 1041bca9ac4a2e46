"""`LoaderConfig`: every loader setting, declared here (name, default, docstring: what users
read) and in rust/src/loader/config.rs (the worker's types); tests/test_loader_config.py asserts
that both declare the same names and defaults.

Every rule of a setting is checked once, by Rust (`LoaderConfig::check_settings`: the values,
`LoaderConfig::from_json`: the types, each error naming the setting); `LoaderConfig.check` asks
it and `birdjepa.config.validate` reports its errors under `data.`. What Rust derives from the
settings (a local view's frames) comes back from the same call (`LoaderConfig.derived`). Python
keeps what only Python has: "auto" workers (`resolve_workers`), the resampler a saved state names
(`resolve_resampler`) and that a value can travel as JSON (`rust_json`).

The training config's `data` section is this class plus the keys only training needs
(birdjepa.config.DataConfig subclasses it), so a setting added here is a training key at once and
reaches the Rust worker unchanged: TOML -> DataConfig -> Loader(config=cfg.data) -> JSON ->
rust/src/loader/config.rs. What a run decides rather than the user (batch size, mode, seed, the
process's slice, the class count, the test-only transform) are the Loader's own arguments
(`RUN_ARGS`).
"""

import dataclasses
import json
import math
import os
import typing

import numpy as np

import birdjepa._rs
import birdjepa.common.errors as errors
import birdjepa.data.paths as paths

DEFAULT_MEAN = -7.2
DEFAULT_STD = 4.43
MAX_WINDOW_S: float = birdjepa._rs.MAX_WINDOW_S
"""The longest view_window_s, seconds (rust/src/loader/config.rs)."""

PADS: tuple[str, ...] = tuple(birdjepa._rs.PADS)
"""What fills the frames past a clip shorter than n_frames (LoaderConfig.pad; declared in
rust/src/loader/config.rs)."""
RESAMPLERS: tuple[str, ...] = tuple(birdjepa._rs.RESAMPLERS)
"""The resampling filters by name (rust/src/resample.rs `Filter`, their one declaration;
birdjepa.data.audio.RESAMPLERS describes them)."""
DEFAULT_RESAMPLER: str = birdjepa._rs.DEFAULT_RESAMPLER
"""What a new stream resamples with: soxr HQ's response (Hugging Face `datasets`, librosa)."""
LEGACY_RESAMPLER: str = birdjepa._rs.LEGACY_RESAMPLER
"""What a stream resamples with whose state or config names no filter: every one saved before
the `resampler` setting existed used it."""

RUN_ARGS = {"mode": "train", "batch_size": None, "seed": 0, "process_index": 0,
            "process_count": 1, "n_classes": 0, "transform": "audio", "debug_delay_s": 0.0,
            "batch_dtype": "float32", "wave_dtype": "float32"}
"""The Loader's own arguments (not settings) and their defaults (batch_size is required). With
the LoaderConfig fields they are the Rust LoaderConfig's fields. `batch_dtype` ("float32" or
"bfloat16": host features as bfloat16, half the bytes to the device; a trainer computing in
bfloat16 asks for it) is the caller's; `wave_dtype` the Loader decides (`features = "device"`
over a corpus packed as 16-bit at `sample_rate`: "int16")."""
BATCH_DTYPES = ("float32", "bfloat16")
RUN_SHAPING = ("mode", "seed", "batch_size", "transform")
"""Run arguments in `Loader.config` and the fingerprint (n_classes too, when it is not 0)."""


def _added(default, *, hashed_at_default: bool = False):
    """A stream-shaping setting added after the state format was fixed (how a new setting is
    declared): in `Loader.config` and the fingerprint only when it differs from `default`, so
    that states saved before it existed (which used the default) still resume; and in a run's
    config hash (birdjepa.config.identity.config_hash: its run id) only away from its default,
    so that run ids made before it existed stay. `hashed_at_default`: view_window_s and n_local,
    hashed since they were added."""
    return dataclasses.field(default=default, metadata={"omit_at_default": True,
                                                        "hash_at_default": hashed_at_default})


def _into_config(default):
    """A loader setting that became a training key after run ids existed (the one-schema
    change): in a run's config hash only away from its default."""
    return dataclasses.field(default=default, metadata={"hash_at_default": False})


def _resampler():
    """The `resampler` setting: None (unset) is resolved when a stream opens (the default for a
    new stream, a state's own for a resumed one); in `Loader.config` and the fingerprint unless
    it is the legacy filter, which states saved before the setting existed used without naming
    it."""
    return dataclasses.field(default=None, metadata={"legacy": LEGACY_RESAMPLER,
                                                     "hash_at_default": False})


def _local(default):
    """A local-crop setting: in `Loader.config` only with n_local > 0 (it has no effect without
    local crops, and states saved before local crops existed omit it)."""
    return dataclasses.field(default=default, metadata={"only_with_local": True})


def _speed(default):
    """A setting that only affects speed (or only when the loader gives up): not part of
    `Loader.config` or the fingerprint."""
    return dataclasses.field(default=default, metadata={"shapes_stream": False})


def resolve_workers(n_workers: int | str) -> int:
    """`n_workers` resolved: "auto" is every CPU this process may use (os.sched_getaffinity:
    Slurm's cpus-per-task, taskset, cgroups' cpusets), at least 2. The trainer's own threads
    mostly sleep on the device: on an H200 node with 16 CPUs, vit-s over the packed demo corpus ran
    at the step's own pace with 16 workers (4.59 steps/s, data wait 10 %) and 10 % below it with
    14 (4.15; docs/issues/022-gpu-kept-busy). Any other string is a BadArgumentError; a count is
    returned as it is (Rust checks it)."""
    if isinstance(n_workers, str) and n_workers != "auto":
        raise errors.BadArgumentError(f"bad argument n_workers: expected >= 1 or 'auto', got "
                                      f"{n_workers!r}")
    if n_workers != "auto":
        return n_workers
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
    block_size: int = _into_config(16)
    """Rows kept contiguous by the order (locality of reads)."""
    shuffle_window: int = _into_config(8192)
    """Rows over which blocks are shuffled."""
    prefetch: int = _speed(2)
    """Assembled batches queued ahead of the consumer."""
    mean: float = _into_config(DEFAULT_MEAN)
    """Normalisation: (x - mean) / (2 * std)."""
    std: float = _into_config(DEFAULT_STD)
    """Normalisation: (x - mean) / (2 * std)."""
    pad: str = _added("zero")
    """Frames past a clip's own: "zero" (0.0 after normalising), "min" (the clip's minimum
    log-mel before normalising: Bird-MAE) or "repeat" (the clip again from its first frame:
    nothing for a model to learn; best for short clips, docs/issues/024-soundscape-abstain)."""
    max_replacements: int = _into_config(16)
    """Train mode: later rows tried in place of a failed one before the slot is invalid."""
    clip_s: float = _into_config(5.0)
    """Clip (view) duration in seconds."""
    sample_rate: int = _into_config(32000)
    """Sample rate the audio is resampled to."""
    resampler: str | None = _resampler()
    """Filter for recordings not at sample_rate: "soxr-hq" (soxr HQ's response: Hugging Face
    `datasets`, librosa >= 0.10, BirdSet, Bird-MAE) or "rubato-bh2-1024" (before issue 36). Unset:
    soxr-hq for a new stream, a resumed one keeps its own (`resolve_resampler`)."""
    view_window_s: float = _added(0.0, hashed_at_default=True)
    """0: every view is its own random crop of the recording, one decode each. Otherwise one
    window of this many seconds (in [clip_s, 3600]) per sample is decoded, resampled and
    featurized once, and its views are clip_s crops cut from it at random 10 ms frame offsets
    (all inside the part of the window that the recording covers): views that overlap, at about
    1/n_views of the cost per view. Eval mode takes the centre window and centre views."""
    n_local: int = _added(0, hashed_at_default=True)
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
    ds.class_encode_column first), list<int> (multilabel: multi-hot targets; an empty list is
    no species, and -1 means "no label" there too: a null list or a list of nulls and -1 only
    is an unlabelled row, masked), or None (targets are then -1). Checked against n_classes at
    open."""
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
    features: str = _speed("host")
    """Where the log-mel features are made: "host" (the loader's workers: batches carry `data`
    and `local`) or "device" (batches carry each sample's decoded, resampled window, `wave`,
    int16 from a corpus packed as 16-bit at `sample_rate`, else float32, and where each view and
    local crop starts in it: `crop_start`, `crop_frames`, `local_crop_start`,
    `local_crop_frames`; `birdjepa.data.device_features.featurize` turns such a batch into the
    host's, and a training step does so on the accelerator). The same samples, crops and order
    either way (it does not shape the stream): features equal to the host's within float32
    round-off (1e-4 relative). Views without `view_window_s` need one view (n_views = 1)."""
    max_audio_mb: float = _speed(paths.MAX_AUDIO_MB)
    """Path-only audio: a file above this many MB (10^6 bytes) is a counted skip, never read
    (each read holds the whole file in memory). Only regular files are read at all: a FIFO, a
    device or a directory is a counted skip too. 1024 MB holds ~1.5 h of 16-bit 96 kHz mono WAV."""

    def __post_init__(self):
        # Plain int/float values (numpy scalars, 5 for 5.0), so that config and fingerprint are
        # the same however a value was spelled.
        hints = typing.get_type_hints(LoaderConfig)
        for f in dataclasses.fields(LoaderConfig):
            v, types = getattr(self, f.name), typing.get_args(hints[f.name]) or (hints[f.name],)
            if isinstance(v, bool | np.bool_):
                continue
            if int in types and isinstance(v, np.integer):
                object.__setattr__(self, f.name, int(v))
            elif float in types and isinstance(v, int | np.integer | np.floating):
                object.__setattr__(self, f.name, float(v))

    def check(self) -> "LoaderConfig":
        """Every rule of a setting and of a relation between settings, checked by Rust (their
        one home: rust/src/loader/config.rs `check_settings`): a birdjepa.BadArgumentError
        `bad argument NAME: expected ..., got VALUE`; returns self. birdjepa.config.validate
        reports the same errors under `data.NAME`."""
        self.derived()
        return self

    def derived(self) -> dict:
        """What Rust derives from these settings once it has checked them (`check`'s errors):
        {"local_frames": the frames of a local view: `local_frames`, or unset local_s's Kaldi
        frames (2 s: 198) at most n_frames}."""
        return birdjepa._rs.check_loader_settings(rust_json(self, {}))

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
            out[f.name] = self.derived()["local_frames"] if f.name == "local_frames" else v
        return out


def saved_resampler(explicit: str | None, saved: dict | None) -> str:
    """The one rule for the resampler of a stream that may continue a saved one: `explicit`
    when set; else the filter the saved form names (`saved`: a loader state's config, a run's
    data table, a pack's plan), and one that names none was saved before the setting existed
    and used LEGACY_RESAMPLER; with nothing saved (a new stream, run or pack) DEFAULT_RESAMPLER."""
    if explicit is not None:
        return explicit
    if saved is None:
        return DEFAULT_RESAMPLER
    return (saved.get("resampler") if isinstance(saved, dict) else None) or LEGACY_RESAMPLER


def resolve_resampler(cfg: LoaderConfig, state: dict | None = None) -> str:
    """`cfg.resampler` by `saved_resampler` against a saved loader state (`state`, from
    `state_dict()`), or none (a new stream)."""
    if state is None:
        return saved_resampler(cfg.resampler, None)
    saved = state.get("config") if isinstance(state, dict) else None
    return saved_resampler(cfg.resampler, saved if isinstance(saved, dict) else {})


def rust_json(cfg: LoaderConfig, run: dict) -> str:
    """The JSON the Rust LoaderConfig reads: the settings (n_workers and resampler resolved) and
    the run arguments `run` (those left out take Rust's defaults)."""
    d = cfg.settings() | run
    d["n_workers"] = resolve_workers(d["n_workers"])
    d["resampler"] = resolve_resampler(cfg)
    for name, v in d.items():
        d[name] = v = v.item() if isinstance(v, np.generic) else v
        if not _travels(v):  # JSON has no NaN or inf, and no other types
            raise errors.BadArgumentError(
                f"bad argument {name}: expected a finite number, a string, a bool, None, or a "
                f"list or str-keyed dict of them (what JSON carries), got {v!r}")
    return json.dumps(d)


def _travels(v) -> bool:
    """Whether `v` crosses to Rust as JSON exactly as it is."""
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _travels(x) for k, x in v.items())
    if isinstance(v, list | tuple):
        return all(_travels(x) for x in v)
    return v is None or isinstance(v, str | int)
