"""birdjepa: JAX pretraining for bioacoustics with a Rust audio loader.

The exception classes (birdjepa.common.errors, defined by the Rust extension, all beneath
`birdjepa.Error`) are loaded on first access so that `import birdjepa.model` does not need the
extension; the package's own modules import them from birdjepa.common.errors. `load_encoder`
(birdjepa.models: a run directory, an export directory or "bird-mae-base:WEIGHTS"),
`embeddings` (birdjepa.models.inference) and `detections` (birdjepa.models.detect) are loaded on
first access too, so that `import birdjepa` does not import JAX. No public name here is also the
name of a submodule (`birdjepa.embed` and `birdjepa.predict` are the command lines' modules), so
importing a submodule never changes what a name means (tests/test_public_api.py checks).
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

__all__ = [*_EXCEPTIONS, "__version__", "detections", "embeddings", "load_encoder"]


def __getattr__(name: str):
    if name in _EXCEPTIONS:
        import birdjepa.common.errors

        return getattr(birdjepa.common.errors, name)
    if name == "load_encoder":
        import birdjepa.models

        return birdjepa.models.load_encoder
    if name == "embeddings":
        import birdjepa.models.inference

        return birdjepa.models.inference.embeddings
    if name == "detections":  # the detection rows `python -m birdjepa.predict` writes
        import birdjepa.models.detect

        return birdjepa.models.detect.detections
    raise AttributeError(f"module 'birdjepa' has no attribute {name!r}")
