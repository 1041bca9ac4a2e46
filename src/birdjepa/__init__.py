"""birdjepa: JAX pretraining for bioacoustics with a Rust audio loader."""

import birdjepa._rs as _rs

AudioError = _rs.AudioError
UnsupportedCodecError = _rs.UnsupportedCodecError
CorruptAudioError = _rs.CorruptAudioError
EmptyAudioError = _rs.EmptyAudioError
BadArgumentError = _rs.BadArgumentError
DatasetError = _rs.DatasetError
StateMismatchError = _rs.StateMismatchError
__version__ = _rs.__version__

__all__ = [
    "AudioError",
    "BadArgumentError",
    "CorruptAudioError",
    "DatasetError",
    "EmptyAudioError",
    "StateMismatchError",
    "UnsupportedCodecError",
    "__version__",
]
