"""birdjepa: JAX pretraining for bioacoustics with a Rust audio loader.

The exception classes (birdjepa.common.errors, defined by the Rust extension, all beneath
`birdjepa.Error`) are loaded on first access so that `import birdjepa.model` does not need the
extension; the package's own modules import them from birdjepa.common.errors. `load_encoder`
(birdjepa.models: a run directory, an export directory or "bird-mae-base:WEIGHTS") and `embed`
(birdjepa.models.inference) are loaded on first access too, so that `import birdjepa` does not
import JAX. `import birdjepa.embed` (the command line's module) rebinds `birdjepa.embed` to that
module, as Python does for every submodule: see birdjepa/embed.py.
"""

__version__ = "0.1.0"

_EXCEPTIONS = (
    "Error",
    "AudioError",
    "UnsupportedCodecError",
    "CorruptAudioError",
    "EmptyAudioError",
    "BadArgumentError",
    "DatasetError",
    "TooManyFailuresError",
    "StateMismatchError",
    "LoaderError",
)

__all__ = [*_EXCEPTIONS, "__version__", "embed", "load_encoder", "predict"]


def __getattr__(name: str):
    if name in _EXCEPTIONS:
        import birdjepa.common.errors

        return getattr(birdjepa.common.errors, name)
    if name == "load_encoder":
        import birdjepa.models

        return birdjepa.models.load_encoder
    if name == "embed":
        import birdjepa.models.inference

        return birdjepa.models.inference.embed
    if name == "predict":  # the detection rows `python -m birdjepa.predict` writes
        import birdjepa.models.detect

        return birdjepa.models.detect.predict
    raise AttributeError(f"module 'birdjepa' has no attribute {name!r}")
