"""birdjepa: JAX pretraining for bioacoustics with a Rust audio loader.

The exception classes live in the Rust extension; they are loaded on first access so that
`import birdjepa.model` does not need the extension. `load_encoder` (birdjepa.encoder) is loaded
on first access too, so that `import birdjepa` does not import JAX.
"""

__version__ = "0.1.0"

_EXCEPTIONS = (
    "AudioError",
    "UnsupportedCodecError",
    "CorruptAudioError",
    "EmptyAudioError",
    "BadArgumentError",
    "DatasetError",
    "StateMismatchError",
)

__all__ = [*_EXCEPTIONS, "__version__", "load_encoder"]


def __getattr__(name: str):
    if name in _EXCEPTIONS:
        import birdjepa._rs

        return getattr(birdjepa._rs, name)
    if name == "load_encoder":
        import birdjepa.encoder

        return birdjepa.encoder.load_encoder
    raise AttributeError(f"module 'birdjepa' has no attribute {name!r}")
