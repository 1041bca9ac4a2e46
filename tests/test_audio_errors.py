"""Malformed input gives a clear AudioError (never a panic, abort or hang), for every codec; a
recording cut short gives what it holds (docs: issue 36 item 1)."""

import io
import struct
import time
import warnings

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
    """Cut inside the header or before the first whole frame: an AudioError. Cut after some
    audio: what it holds (PCM and FLAC: exactly the intact decode's first samples), with one
    warning saying where the data ends (MPEG has no declared length: a cut stream is a
    shorter valid one); half a file and more is never lost whole."""
    data = encode(kind, seconds=10.0)  # long enough for its codec headers to be a small part
    n = len(data)
    whole, _ = birdjepa.audio.decode(data)
    outcomes = []
    for cut in [1, 3, 4, 8, 12, 20, 36, 44, 45, 100, 500, n // 4, n // 2, n - 700, n - 1]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                wave, _ = birdjepa.audio.decode(data[:cut])
            except birdjepa.AudioError as e:
                outcomes.append(f"{cut}:{type(e).__name__}")
                assert cut < n // 2, f"{kind} cut at {cut}/{n}: lost whole ({e})"
                continue
        outcomes.append(f"{cut}:ok({len(wave)})")
        assert np.isfinite(wave).all() and 0 < len(wave) < len(whole)
        said = [str(w.message) for w in caught]
        assert kind == "mp3" or (len(said) == 1 and "the data ends at" in said[0]), said
        if kind in ("wav", "wav_float", "flac"):
            np.testing.assert_array_equal(wave, whole[:len(wave)])
    print(kind, " ".join(outcomes))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", list(FORMATS))
def test_header_then_garbage(kind):
    """A good start, then garbage: an AudioError, or the audio before the garbage (PCM garbage
    is just noise) with the place where the data stops; a window past it is an AudioError or
    finite, zero-padded features saying so."""
    data = encode(kind)
    rng = np.random.default_rng(1)
    for keep in [64, 200, 4000]:
        bad = data[:keep] + rng.integers(0, 256, 20000, dtype=np.uint8).tobytes()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                wave, _ = birdjepa.audio.decode(bad)
                assert np.isfinite(wave).all()
                assert any("the data ends at" in str(w.message) for w in caught) or \
                    kind.startswith("wav") or kind == "mp3", [str(w.message) for w in caught]
            except birdjepa.AudioError:
                pass
            try:
                # A window inside the declared length but past the valid bytes.
                feats, damage = birdjepa.audio.clip(bad, start_s=1.5, duration_s=1.0,
                                                    with_damage=True)
                assert np.isfinite(feats).all()
                assert damage is not None or kind.startswith("wav") or kind == "mp3"
            except birdjepa.AudioError:
                pass


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
    with pytest.raises(TypeError, match="bytes or a path"):
        birdjepa.audio.decode(123)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        birdjepa.audio.decode("no/such/file.ogg")  # a str is a path


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


def float_wav(x: np.ndarray, sr: int = 44100, subtype: str = "FLOAT") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, np.asarray(x), sr, subtype=subtype, format="WAV")
    return buf.getvalue()


@pytest.mark.parametrize("bad", [3e38, -3e38, 1e20, 1e10, 65537.0])
def test_huge_float_samples_are_corrupt_audio_naming_the_frame(bad):
    """One flipped exponent bit turns 0.3 into ~1e38. That made the resampler output NaN (then
    'BadArgumentError: ... wave', fatal to the loader), made rubato panic (a PanicException,
    which `except Exception` misses), or gave +inf features (1e20)."""
    x = (0.3 * np.random.default_rng(0).standard_normal(44100 * 3)).astype(np.float32)
    x[50_000] = bad
    data = float_wav(x)
    expected = r"expected samples with \|x\| <= 65536, got .* at frame 50000"
    with pytest.raises(birdjepa.CorruptAudioError, match=expected):
        birdjepa.audio.decode(data)
    with pytest.raises(birdjepa.CorruptAudioError, match=expected):
        birdjepa.audio.clip(data)
    x[1000:1100] = bad  # the run that made rubato panic
    with pytest.raises(birdjepa.CorruptAudioError, match="at frame 1000"):
        birdjepa.audio.clip(float_wav(x))
    with pytest.raises(birdjepa.CorruptAudioError, match="resampler input: .* at index 1000"):
        birdjepa.audio.resample(x, 48000, 32000)
    with pytest.raises(birdjepa.BadArgumentError, match=r"\|x\| <= 65536"):
        birdjepa.audio.fbank(x)
    # The resampler cached for this rate still works afterwards.
    y = birdjepa.audio.resample(np.ones(4800, np.float32), 48000, 32000)
    assert np.isfinite(y).all()


def test_float_wav_at_int16_scale_is_accepted_with_finite_features():
    x = (30000 * np.sin(np.arange(44100 * 2) * 0.05)).astype(np.float32)
    feats = birdjepa.audio.clip(float_wav(x), duration_s=2.0)
    assert np.isfinite(feats).all()
    x64 = x.astype(np.float64)
    x64[100] = 1e300  # float64 WAV: beyond float32
    with pytest.raises(birdjepa.CorruptAudioError, match="at frame 100"):
        birdjepa.audio.clip(float_wav(x64, subtype="DOUBLE"), duration_s=2.0)


@pytest.mark.parametrize("sr", [1, 2, 999])
def test_tiny_sample_rate_header_is_rejected_fast_without_memory(sr):
    """A 1-2 Hz header made clip() build a huge FFT resampler: 4.7 s and 1.5 GB, kept after."""
    data = wav_header(sr, n_bytes=20000) + b"\x01\x00" * 10000
    with open("/proc/self/status") as f:
        hwm0 = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    t = time.perf_counter()
    expected = rf"expected a sample rate in \[1000, 768000\] Hz, got {sr}$"
    with pytest.raises(birdjepa.CorruptAudioError, match=expected):
        birdjepa.audio.clip(data)
    with pytest.raises(birdjepa.CorruptAudioError, match=expected):
        birdjepa.audio.decode(data)
    assert time.perf_counter() - t < 0.5
    with open("/proc/self/status") as f:
        hwm1 = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    assert (hwm1 - hwm0) / 1024 < 100
    with pytest.raises(birdjepa.BadArgumentError, match=r"\[1000, 768000\] Hz, got 2"):
        birdjepa.audio.resample(np.zeros(100, np.float32), 2, 32000)
