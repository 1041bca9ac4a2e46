"""Kaldi fbank parity with kaldi-native-fbank (an independent C++ implementation)."""

import numpy as np
import pytest

import benchmarks.transforms
import birdjepa
import birdjepa.audio

SR = 32000
# kaldi-native-fbank computes in float32: cells this far (in natural-log units, ~60 dB) below
# their frame's peak, or below the loudest cell of the signal (a frame whose energy lies outside
# the mel range), are dominated by its own round-off, so they are reported, not compared.
FLOOR_NATS = 13.8


knf_fbank = benchmarks.transforms.knf_fbank


def signals() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    n = 5 * SR
    t = np.arange(n) / SR
    square = np.sign(np.sin(2 * np.pi * 440 * t)) * 0.9
    return {
        "white_noise": rng.standard_normal(n).astype(np.float32) * 0.3,
        "sine": (0.5 * np.sin(2 * np.pi * 1234.5 * t)).astype(np.float32),
        "chirp": (0.5 * np.sin(2 * np.pi * (100 * t + 1500 * t**2))).astype(np.float32),
        "silence": np.zeros(n, np.float32),
        "clipped_square": np.clip(1.5 * square, -1, 1).astype(np.float32),
        "int16_scale_noise": (rng.standard_normal(n) * 3000).astype(np.float32),
        "odd_length_1": rng.standard_normal(12345).astype(np.float32),
        "odd_length_2": rng.standard_normal(801).astype(np.float32),
        "exact_one_frame": rng.standard_normal(800).astype(np.float32),
    }


def compare(ours: np.ndarray, ref: np.ndarray, name: str) -> float:
    assert ours.shape == ref.shape, (name, ours.shape, ref.shape)
    if ours.size == 0:
        return 0.0
    keep = (ref >= ref.max(axis=1, keepdims=True) - FLOOR_NATS) & (ref >= ref.max() - FLOOR_NATS)
    diff = np.abs(ours.astype(np.float64) - ref)
    print(
        f"{name:>18}: shape {ours.shape}, max |diff| {diff[keep].max():.2e} on {keep.mean():.1%} of"
        f" cells (all cells: {diff.max():.2e})"
    )
    return float(diff[keep].max())


@pytest.mark.parametrize("name", list(signals()))
def test_default_options_match_kaldi_native_fbank(name):
    x = signals()[name]
    ours = birdjepa.audio.fbank(x)
    assert ours.dtype == np.float32
    assert compare(ours, knf_fbank(x), name) <= 1e-3


def test_five_seconds_is_498_by_128():
    assert birdjepa.audio.fbank(np.zeros(5 * SR, np.float32)).shape == (498, 128)
    assert birdjepa.audio.fbank(np.zeros(799, np.float32)).shape == (0, 128)


@pytest.mark.parametrize(
    "opts",
    [
        dict(n_mels=80, low_freq=50.0, high_freq=-400.0),
        dict(window_type="hamming", preemph=0.0, remove_dc=False),
        dict(window_type="povey", frame_length_ms=20.0, frame_shift_ms=5.0),
        dict(snip_edges=False),
        dict(high_freq=8000.0, n_mels=64),
    ],
)
def test_other_options_match_kaldi_native_fbank(opts):
    x = signals()["chirp"][: 3 * SR + 77]
    ours = birdjepa.audio.fbank(x, **opts)
    assert compare(ours, knf_fbank(x, **opts), str(opts)) <= 1e-3


def test_other_sample_rate():
    x = signals()["white_noise"][:16000]
    ours = birdjepa.audio.fbank(x, sample_rate=16000, n_mels=40)
    assert compare(ours, knf_fbank(x, sr=16000, n_mels=40), "16 kHz") <= 1e-3


def test_dither_is_seedable_and_changes_output():
    x = signals()["sine"][:SR]
    a = birdjepa.audio.fbank(x, dither=1e-3, seed=1)
    b = birdjepa.audio.fbank(x, dither=1e-3, seed=1)
    c = birdjepa.audio.fbank(x, dither=1e-3, seed=2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    silent = birdjepa.audio.fbank(np.zeros(SR, np.float32), dither=1.0, seed=3)
    assert silent.min() > np.log(np.finfo(np.float32).eps)


def test_bad_options():
    x = np.zeros(SR, np.float32)
    with pytest.raises(TypeError, match="n_mel"):
        birdjepa.audio.fbank(x, n_mel=64)
    with pytest.raises(TypeError, match="bogus"):
        birdjepa._rs.fbank(x, bogus=1)
    with pytest.raises(birdjepa.BadArgumentError):
        birdjepa.audio.fbank(x, sample_rate=0)
    with pytest.raises(birdjepa.BadArgumentError):
        birdjepa.audio.fbank(x, window_type="triangle")
    with pytest.raises(birdjepa.BadArgumentError):
        birdjepa.audio.fbank(x, high_freq=20000.0)
    with pytest.raises(birdjepa.BadArgumentError):
        birdjepa.audio.fbank(np.array([0.0, np.nan] * 1000, np.float32))
    with pytest.raises(birdjepa.BadArgumentError):
        birdjepa.audio.fbank(np.zeros((2, 1000), np.float32))
