"""The exceptions of birdjepa, in one module that every layer imports (the package root
re-exports them lazily for users: `birdjepa.DatasetError`). They are defined by the Rust core
(birdjepa._rs), all beneath `Error`; the Python layers raise the same classes."""

import birdjepa._rs

Error = birdjepa._rs.Error
AudioError = birdjepa._rs.AudioError
UnsupportedCodecError = birdjepa._rs.UnsupportedCodecError
CorruptAudioError = birdjepa._rs.CorruptAudioError
EmptyAudioError = birdjepa._rs.EmptyAudioError
BadArgumentError = birdjepa._rs.BadArgumentError
DatasetError = birdjepa._rs.DatasetError
TooManyFailuresError = birdjepa._rs.TooManyFailuresError
StateMismatchError = birdjepa._rs.StateMismatchError
LoaderError = birdjepa._rs.LoaderError

NAMES = ("Error", "AudioError", "UnsupportedCodecError", "CorruptAudioError", "EmptyAudioError",
         "BadArgumentError", "DatasetError", "TooManyFailuresError", "StateMismatchError",
         "LoaderError")
"""The names above, which `birdjepa.<name>` also gives."""
