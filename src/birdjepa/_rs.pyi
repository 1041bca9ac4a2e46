"""Type stubs for the Rust extension `birdjepa._rs`. Keep in step with rust/src/python/."""

from typing import Any

import numpy as np

__version__: str

class AudioError(ValueError): ...
class UnsupportedCodecError(AudioError): ...
class CorruptAudioError(AudioError): ...
class EmptyAudioError(AudioError): ...
class BadArgumentError(ValueError): ...
class DatasetError(ValueError): ...
class StateMismatchError(ValueError): ...

# --- audio (rust/src/python/audio.rs) ---

FBANK_OPTIONS: list[str]

def decode(
    data: bytes, *, start_s: float | None = None, duration_s: float | None = None
) -> tuple[np.ndarray, int, bool]:
    """Mono float32 wave, native sample rate, and whether the window was decoded by seeking."""

def info(data: bytes) -> dict[str, Any]:
    """sample_rate: int, channels: int, n_frames: int | None, codec: str, container: str."""

def resample(wave: np.ndarray, src_sr: int, dst_sr: int) -> np.ndarray: ...
def fbank(wave: np.ndarray, *, sample_rate: float = 32000.0, **opts: Any) -> np.ndarray: ...
def clip(
    data: bytes,
    *,
    start_s: float = 0.0,
    duration_s: float = 5.0,
    sample_rate: int = 32000,
    **opts: Any,
) -> tuple[np.ndarray, bool]:
    """(frames, n_mels) float32 features and whether the window was decoded by seeking."""
