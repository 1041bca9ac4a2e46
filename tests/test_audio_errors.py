"""Malformed input gives a clear AudioError (never a panic, abort or hang), for every codec."""

import io
import struct

import numpy as np
import pytest
import soundfile as sf

import birdjepa
import birdjepa._rs
import birdjepa.audio

FORMATS = {
    "wav": ("WAV", "PCM_16"),
    "wav_float": ("WAV", "FLOAT"),
    "flac": ("FLAC", "PCM_16"),
    "ogg": ("OGG", "VORBIS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
}


def encode(kind: str, seconds: float = 3.0, sr: int = 44100) -> bytes:
    fmt, subtype = FORMATS[kind]
    t = np.arange(int(seconds * sr)) / sr
    x = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, x, sr, subtype=subtype, format=fmt)
    return buf.getvalue()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(FORMATS))
def test_truncated_inputs(kind):
    data = encode(kind)
    n = len(data)
    outcomes = []
    for cut in [1, 3, 4, 8, 12, 20, 36, 44, 45, 100, 500, n // 4, n // 2, n - 700, n - 1]:
        try:
            wave, _ = birdjepa.audio.decode(data[:cut])
            outcomes.append(f"{cut}:ok({len(wave)})")
            # Only MPEG streams have no declared length: a cut one is a shorter valid stream.
            assert kind == "mp3" and cut > n // 8, f"{kind} truncated at {cut}/{n} decoded"
            assert np.isfinite(wave).all()
        except birdjepa.AudioError as e:
            outcomes.append(f"{cut}:{type(e).__name__}")
    print(kind, " ".join(outcomes))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(FORMATS))
def test_header_then_garbage(kind):
    data = encode(kind)
    rng = np.random.default_rng(1)
    for keep in [64, 200, 4000]:
        bad = data[:keep] + rng.integers(0, 256, 20000, dtype=np.uint8).tobytes()
        with pytest.raises(birdjepa.AudioError):
            birdjepa.audio.decode(bad)
        with pytest.raises(birdjepa.AudioError):
            # A window inside the declared length but past the valid bytes.
            birdjepa.audio.clip(bad, start_s=1.5, duration_s=1.0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(FORMATS))
def test_corrupted_middle(kind):
    """Garbage overwriting the middle of a valid file: an AudioError or finite audio, never a crash."""
    data = bytearray(encode(kind))
    rng = np.random.default_rng(2)
    for _ in range(5):
        d = bytearray(data)
        at = int(rng.integers(len(d) // 4, 3 * len(d) // 4))
        d[at : at + 300] = rng.integers(0, 256, 300, dtype=np.uint8).tobytes()
        try:
            wave, _ = birdjepa.audio.decode(bytes(d))
            assert np.isfinite(wave).all()
        except birdjepa.AudioError:
            pass


@pytest.mark.timeout(60)
def test_random_bytes_and_empty():
    rng = np.random.default_rng(0)
    for n in [1, 2, 16, 1000, 100_000]:
        with pytest.raises(birdjepa.AudioError):
            birdjepa.audio.decode(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    with pytest.raises(birdjepa.EmptyAudioError):
        birdjepa.audio.decode(b"")
    with pytest.raises(birdjepa.AudioError):
        birdjepa.audio.info(b"")
    with pytest.raises(birdjepa.UnsupportedCodecError):
        birdjepa.audio.decode(b"\x00" * 4096)
    with pytest.raises(TypeError):
        birdjepa.audio.decode("not bytes")  # type: ignore[arg-type]


def wav_header(
    sr: int, channels: int = 1, bits: int = 16, n_bytes: int = 2000, fmt: int = 1
) -> bytes:
    block = channels * bits // 8
    return (
        b"RIFF"
        + struct.pack("<I", 36 + n_bytes)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, fmt, channels, sr, (sr * block) % 2**32, block, bits)
        + b"data"
        + struct.pack("<I", n_bytes)
    )


@pytest.mark.parametrize("sr", [0, 800_000, 2**31, 2**32 - 1])
def test_absurd_sample_rates(sr):
    data = wav_header(sr) + b"\x01\x00" * 1000
    with pytest.raises(birdjepa.AudioError):
        birdjepa.audio.decode(data)


def test_zero_channels_and_zero_length():
    with pytest.raises(birdjepa.AudioError):
        birdjepa.audio.decode(wav_header(16000, channels=0) + b"\x00" * 2000)
    with pytest.raises(birdjepa.AudioError):
        birdjepa.audio.decode(wav_header(16000, n_bytes=0))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_float_wav(bad):
    x = np.zeros(1000, np.float32)
    x[123] = bad
    buf = io.BytesIO()
    sf.write(buf, x, 16000, subtype="FLOAT", format="WAV")
    with pytest.raises(birdjepa.CorruptAudioError, match="non-finite"):
        birdjepa.audio.decode(buf.getvalue())
    with pytest.raises(birdjepa.CorruptAudioError):
        birdjepa.audio.clip(buf.getvalue(), duration_s=0.05)


def test_error_hierarchy():
    assert issubclass(birdjepa.AudioError, ValueError)
    for name in ("UnsupportedCodecError", "CorruptAudioError", "EmptyAudioError"):
        assert issubclass(getattr(birdjepa, name), birdjepa.AudioError)
