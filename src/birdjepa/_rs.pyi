"""Type stubs for the Rust extension `birdjepa._rs`. Keep in step with rust/src/python/."""

import os
from typing import Any

import numpy as np
import numpy.typing as npt

__version__: str

# --- exceptions (rust/src/python/exceptions.rs); the core's variants map in python/mod.rs ---

class Error(Exception): ...
class AudioError(Error, ValueError): ...
class UnsupportedCodecError(AudioError): ...
class CorruptAudioError(AudioError): ...
class EmptyAudioError(AudioError): ...
class BadArgumentError(Error, ValueError): ...
class DatasetError(Error, ValueError): ...
class TooManyFailuresError(DatasetError): ...
class StateMismatchError(Error, ValueError): ...
class LoaderError(Error, RuntimeError): ...

def _error_classes() -> dict[str, type[Exception]]:
    """The exception class each core error variant maps to, by variant name (for the tests)."""

def _resolve_audio_path(stored: str, shard_dir: str, audio_root: str = "",
                        path_map: dict[str, str] | None = None) -> str:
    """The file a stored audio path resolves to by the loader's rule (for the parity test with
    birdjepa.data.paths.resolve)."""

def file_kind(st_mode: int) -> str | None:
    """The rule "only a regular file is read": None for a regular file, else what a file of
    `st_mode` is, in words ("a FIFO (named pipe)", "a character device", "a directory", ...)."""

def check_audio_file(path: str | os.PathLike, st_mode: int, st_size: int,
                     max_audio_mb: float) -> None:
    """A DatasetError naming `path` unless a file of `st_mode` and `st_size` bytes is a regular
    file of at most `max_audio_mb` MB (<= 0: no bound): which audio files the loader reads."""

def check_shard_file(path: str | os.PathLike, st_mode: int) -> None:
    """A DatasetError naming `path` unless a file of `st_mode` is a regular file (a shard)."""

# --- audio (rust/src/python/audio.rs) ---

FBANK_OPTIONS: list[str]
RESAMPLERS: list[str]
"""The resampling filters by name (rust/src/resample.rs Filter): "soxr-hq", "rubato-bh2-1024"."""
DEFAULT_RESAMPLER: str
LEGACY_RESAMPLER: str
"""The filter of runs, loader states and exports saved before the name was recorded."""

def decode(
    data: bytes, *, start_s: float | None = None, duration_s: float | None = None
) -> tuple[np.ndarray, int, bool, dict[str, Any] | None]:
    """Mono float32 wave, native sample rate, whether the window was decoded by seeking, and
    None or {"end_s", "message"} where the recording's data stops early (the wave is what it
    holds; a window that starts after that end is an EmptyAudioError)."""

def info(data: bytes) -> dict[str, Any]:
    """sample_rate: int, channels: int, n_frames: int | None, codec: str, container: str."""

def resample(wave: np.ndarray, src_sr: int, dst_sr: int, *,
             resampler: str = "soxr-hq") -> np.ndarray: ...
def fbank(wave: np.ndarray, *, sample_rate: float = 32000.0, **opts: Any) -> np.ndarray: ...
def clip(
    data: bytes,
    *,
    start_s: float = 0.0,
    duration_s: float = 5.0,
    sample_rate: int = 32000,
    resampler: str = "soxr-hq",
    **opts: Any,
) -> tuple[np.ndarray, bool, dict[str, Any] | None]:
    """(frames, n_mels) float32 features, whether the window was decoded by seeking, and None
    or {"end_s", "message"} where the recording's data stops early (zero padding after it)."""

# -- loader (rust/src/python/loader.rs); the user-facing API is birdjepa.data.Loader -------------

class Dataset:
    """Opened, indexed Arrow shards (metadata only; no audio bodies are read)."""

    def __init__(
        self, paths: list[str], audio_column: str = "audio", label_column: str | None = "label"
    ) -> None: ...
    @property
    def n_rows(self) -> int: ...
    @property
    def multilabel(self) -> bool:
        """True when the label column is list<int> (multi-hot targets)."""
    def shards(self) -> list[tuple[str, int, str]]:
        """(path, rows, "stream" | "file") per shard."""
    def label_range(self) -> dict[str, Any] | None:
        """{"min": (label, path, row) | None, "max": ..., "nulls": n}; None without labels."""
    def labels(self) -> npt.NDArray[np.int64]: ...
    def shard_ids(self) -> npt.NDArray[np.int32]: ...
    def check_paths(
        self, n: int
    ) -> tuple[int, int, tuple[int, str, str] | None, int, tuple[int, str] | None]:
        """Path-only audio of n rows spread evenly: (checked, missing, (row, stored, resolved)
        of the first missing, unusable (not a regular file, or above max_audio_mb), (row, why)
        of the first unusable)."""

class Loader:
    """The running Rust pipeline; yields this process's slice of each global batch."""

    def __init__(self, dataset: Dataset, config: str, *, start_step: int) -> None:
        """`config`: JSON of birdjepa.data.LoaderConfig plus the run arguments
        (birdjepa.data.loader_config.rust_json; unknown names are a BadArgumentError)."""
    def next(
        self,
    ) -> tuple[int, dict[str, np.ndarray], list[tuple[int, int, int, str, str]],
               list[tuple[int, int, int, str, str]]] | None:
        """(global step, batch, failures as (index, shard, row, error, kind), samples from
        recordings whose data stops early as (index, shard, row, where and why, "damaged
        recording")); None ends an eval pass."""
    def stats(self) -> dict: ...
    def close(self) -> None: ...

def loader_config_defaults() -> str:
    """JSON of the Rust LoaderConfig::default(): the names and defaults of every setting."""

def check_loader_settings(config: str) -> dict[str, Any]:
    """Parse `config` (JSON of birdjepa.data.LoaderConfig, run arguments optional) and check every
    setting: the one check of each (a BadArgumentError `bad argument NAME: expected ..., got
    VALUE`, also for a wrong type or an unknown name). Returns what is derived from them:
    {"local_frames": the frames of a local view (`local_frames`, or local_s's, at most
    n_frames)}."""

def physical_memory() -> int:
    """Bytes of RAM of this machine (what the loader bounds its batches in flight by)."""

def kaldi_frames(seconds: float) -> int:
    """Kaldi's frame count of `seconds` of audio (25 ms frames every 10 ms, snip edges): 498 for
    5 s, 198 for 2 s; at least 1. The loader's count."""

MAX_WINDOW_S: float
"""The longest view_window_s, seconds."""
PADS: list[str]
"""What fills the frames past a clip shorter than n_frames (`pad`), by name."""

def train_indices(
    n_rows: int, seed: int, block_size: int, shuffle_window: int, start: int, count: int
) -> npt.NDArray[np.int64]: ...
