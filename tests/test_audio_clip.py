"""Whole clips (decode window -> resample -> fbank) against a soundfile + soxr + kaldi-native-fbank
pipeline on the same bytes."""

import io

import numpy as np
import pytest
import soundfile as sf
import soxr

import benchmarks.transforms
import birdjepa
import birdjepa._rs
import birdjepa.audio

FORMATS = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "ogg": ("OGG", "VORBIS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
}


def encode(x: np.ndarray, sr: int, kind: str) -> bytes:
    fmt, subtype = FORMATS[kind]
    buf = io.BytesIO()
    x2 = x if x.ndim == 2 else x[:, None]
    with sf.SoundFile(buf, "w", sr, x2.shape[1], subtype, format=fmt) as f:
        for i in range(0, len(x2), 65536):
            f.write(x2[i : i + 65536])
    return buf.getvalue()


def birdsong(seconds: float, sr: int, channels: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    t = np.arange(int(seconds * sr)) / sr
    x = 0.02 * rng.standard_normal((len(t), channels))
    for k in range(int(seconds * 2)):
        t0 = k / 2 + 0.05
        m = (t > t0) & (t < t0 + 0.3)
        f = 2000 + 3000 * (k % 4) + 4000 * (t[m] - t0)
        x[m] += 0.3 * np.sin(2 * np.pi * np.cumsum(f) / sr)[:, None]
    return x.astype(np.float32)


knf_fbank = benchmarks.transforms.knf_fbank


def passband_bins(max_hz: float, n_mels: int = 128, sr: int = 32000) -> np.ndarray:
    mel = lambda f: 1127.0 * np.log1p(f / 700.0)  # noqa: E731
    lo, hi = mel(20.0), mel(sr / 2)
    right_edges = lo + (np.arange(n_mels) + 2) * (hi - lo) / (n_mels + 1)
    return right_edges <= mel(max_hz)


@pytest.mark.parametrize("kind", list(FORMATS))
@pytest.mark.parametrize("sr,channels", [(44100, 1), (48000, 2)])
def test_clip_matches_reference_pipeline(kind, sr, channels):
    data = encode(birdsong(30, sr, channels), sr, kind)
    start = 12.34
    feats, seeked, _damage = birdjepa._rs.clip(data, start_s=start, duration_s=5.0)
    assert feats.shape == (498, 128) and feats.dtype == np.float32
    assert seeked
    # Reference: soundfile seek + read, channel mean, soxr VHQ, kaldi-native-fbank.
    with sf.SoundFile(io.BytesIO(data)) as f:
        f.seek(round(start * sr))
        y = f.read(round(5.0 * sr), dtype="float32", always_2d=True).mean(axis=1)
    ref = knf_fbank(soxr.resample(y, sr, 32000, quality="VHQ").astype(np.float32))
    assert ref.shape == feats.shape
    # Cells within 30 dB of their frame's peak, in mel bins below 14 kHz: above that sit the
    # resamplers' transition bands (soxr HQ's, which ours follows, is wider than VHQ's).
    loud = (ref >= ref.max(axis=1, keepdims=True) - 6.9) & passband_bins(14000.0)[None, :]
    diff = np.abs(feats - ref)
    # Frames at the edges differ legitimately: we resample with real signal around the window.
    inner = diff[2:-2][loud[2:-2]]
    print(
        f"{kind} {sr} Hz x{channels}: |diff| on loud cells median {np.median(inner):.2e}, max {inner.max():.2e}"
    )
    assert inner.max() < 0.01


def test_clip_equals_composition_of_the_public_functions():
    sr = 44100
    data = encode(birdsong(10, sr, 1), sr, "flac")
    feats = birdjepa.audio.clip(data, start_s=0.0, duration_s=5.0)
    wave, wsr = birdjepa.audio.decode(data, start_s=0.0, duration_s=5.0)
    composed = birdjepa.audio.fbank(birdjepa.audio.resample(wave, wsr, 32000))
    # At start 0 no margin exists on the left, and the right margin only changes the last few
    # samples; all frames but the last match.
    np.testing.assert_allclose(feats[:-1], composed[:-1], atol=1e-3)


def test_short_recording_is_zero_padded_and_options_pass_through():
    sr = 32000
    data = encode(birdsong(2, sr, 1), sr, "wav")
    feats = birdjepa.audio.clip(data, duration_s=5.0)
    assert feats.shape == (498, 128)
    assert np.all(feats[-100:] == np.float32(np.log(np.finfo(np.float32).eps)))
    f64 = birdjepa.audio.clip(data, duration_s=1.0, n_mels=64, frame_shift_ms=20.0)
    assert f64.shape == (49, 64)
    with pytest.raises(TypeError, match="mels"):
        birdjepa.audio.clip(data, mels=64)
    with pytest.raises(birdjepa.EmptyAudioError):
        birdjepa.audio.clip(data, start_s=3.0)
    with pytest.raises(birdjepa.BadArgumentError):
        birdjepa.audio.clip(data, duration_s=0.0)
    with pytest.raises(birdjepa.BadArgumentError):
        birdjepa.audio.clip(data, sample_rate=0)
