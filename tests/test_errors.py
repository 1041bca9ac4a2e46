"""One exception root: every birdjepa exception is a birdjepa.Error; core variants map to classes."""

import birdjepa
import birdjepa._rs
import birdjepa.audio


def test_every_exception_is_a_birdjepa_error():
    assert issubclass(birdjepa.Error, Exception)
    for name in birdjepa._EXCEPTIONS:
        cls = getattr(birdjepa, name)
        assert issubclass(cls, birdjepa.Error), name
        assert cls.__module__ == "birdjepa" and cls.__name__ == name
        assert getattr(birdjepa._rs, name) is cls
    # The ancestry users rely on (README: an AudioError is a ValueError).
    for name in ("AudioError", "BadArgumentError", "DatasetError", "StateMismatchError"):
        assert issubclass(getattr(birdjepa, name), ValueError), name
    for name in ("UnsupportedCodecError", "CorruptAudioError", "EmptyAudioError"):
        assert issubclass(getattr(birdjepa, name), birdjepa.AudioError), name
    assert issubclass(birdjepa.LoaderError, RuntimeError)
    assert not issubclass(birdjepa.LoaderError, ValueError)


def test_core_variants_map_to_their_class():
    assert birdjepa._rs._error_classes() == {
        "UnsupportedCodec": birdjepa.UnsupportedCodecError,
        "CorruptData": birdjepa.CorruptAudioError,
        "EmptyAudio": birdjepa.EmptyAudioError,
        "BadArgument": birdjepa.BadArgumentError,
        "Dataset": birdjepa.DatasetError,
        "ShardChanged": birdjepa.DatasetError,
        "AudioFile": birdjepa.DatasetError,
        "TooManyFailures": birdjepa.TooManyFailuresError,
        "StateMismatch": birdjepa.StateMismatchError,
        "Pipeline": birdjepa.LoaderError,
        "Thread": birdjepa.LoaderError,
        "Io": OSError,
    }


def test_errors_can_be_caught_by_the_root():
    try:
        birdjepa.audio.decode(b"not audio at all")
    except birdjepa.Error as e:
        assert isinstance(e, birdjepa.AudioError)
    else:
        raise AssertionError("decode of garbage did not raise")
