"""birdjepa.data.device_features: the jitted Kaldi fbank against kaldi-native-fbank and the Rust
fbank, and the on-device view cut against the Rust loader's rule (rust/src/loader/sample.rs)."""

import dataclasses
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import soundfile

import benchmarks.transforms
import birdjepa.audio
from birdjepa.data import device_features, loader_config
from birdjepa.data.device_features import kaldi_fbank, views
from birdjepa.demo_data import catalogue, codecs, synth

RATES = (1000, 8000, 16000, 22050, 32000, 44100, 48000, 96000, 192000, 768000)
"""From the lowest rate the loader resamples to to the highest (1 kHz to 768 kHz)."""
# 128 mel triangles do not each cover an FFT bin below 22.05 kHz: Kaldi (and the Rust fbank)
# refuse them there, so those rates take the most the test can use (1 kHz: a 32-point FFT).
N_MELS = {1000: 10, 8000: 80, 16000: 96}
# Cells this far (natural-log units) below their frame's peak or the signal's loudest cell are
# float32 round-off in the references (tests/test_audio_fbank.py `compare`): not compared.
FLOOR_NATS = 13.8
MAX_REL_L2 = 1e-4


def rel_err(ours: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(||ours - ref|| / ||ref||, max |ours - ref|) over the cells of `ref` above round-off."""
    assert ours.shape == ref.shape, (ours.shape, ref.shape)
    if ref.size == 0:
        return 0.0, 0.0
    keep = (ref >= ref.max(axis=1, keepdims=True) - FLOOR_NATS) & (ref >= ref.max() - FLOOR_NATS)
    ref_k = ref[keep].astype(np.float64)
    d = ours[keep].astype(np.float64) - ref_k
    return float(np.linalg.norm(d) / np.linalg.norm(ref_k)), float(np.abs(d).max())


def check_parity(x: np.ndarray, ours: np.ndarray, sr: int, n_mels: int, name: str) -> tuple:
    """`ours` against both references; returns the relative errors (knf, rust)."""
    knf = benchmarks.transforms.knf_fbank(x, sr, n_mels=n_mels)
    rust = birdjepa.audio.fbank(x, sample_rate=sr, n_mels=n_mels)
    (rk, ak), (rr, ar) = rel_err(ours, knf), rel_err(ours, rust)
    print(f"{sr:>6} Hz {name:>18} {ours.shape}: rel L2 vs knf {rk:.2e} (max |d| {ak:.2e}), "
          f"vs rust {rr:.2e} (max |d| {ar:.2e})")
    assert rk <= MAX_REL_L2 and rr <= MAX_REL_L2, (name, sr, rk, rr)
    return rk, rr


def batch_signals(sr: int, n: int) -> dict[str, np.ndarray]:
    """Equal-length synthetic signals (float32, n samples at sr)."""
    rng = np.random.default_rng(sr)
    t = np.arange(n) / sr
    square = np.sign(np.sin(2 * np.pi * 440 * t)) * 0.9
    return {
        "white_noise": rng.standard_normal(n) * 0.3,
        "sine": 0.5 * np.sin(2 * np.pi * 1234.5 * t),
        "chirp": 0.5 * np.sin(2 * np.pi * (100 * t + 1500 * t**2)),  # 100 Hz to ~3.5 kHz
        "silence": np.zeros(n),
        "clipped_square": np.clip(1.5 * square, -1, 1),
        "int16_scale_noise": rng.standard_normal(n) * 3000,
    }


def as_f32(d: dict) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, np.float32) for k, v in d.items()}


@pytest.mark.parametrize("sr", RATES)
def test_parity_on_synthetic_signals(sr):
    n_mels = N_MELS.get(sr, 128)
    g = device_features.fbank_geometry(sr, n_mels)
    rng = np.random.default_rng(sr + 1)
    sigs = as_f32(batch_signals(sr, sr + 123))
    ours = np.asarray(kaldi_fbank(np.stack(list(sigs.values())), sample_rate=sr, n_mels=n_mels))
    errs = [check_parity(x, ours[i], sr, n_mels, name) for i, (name, x) in enumerate(sigs.items())]
    assert np.all(ours[list(sigs).index("silence")] == np.log(np.float32(np.finfo(np.float32).eps)))
    # Lengths of their own: odd, exactly one frame, one sample short of one frame.
    for name, n in (("odd_length", int(0.45 * sr) | 1), ("exactly_one_frame", g.frame_len),
                    ("short_of_one_frame", g.frame_len - 1)):
        x = rng.standard_normal(n).astype(np.float32)
        ours_1 = np.asarray(kaldi_fbank(x[None], sample_rate=sr, n_mels=n_mels))
        assert ours_1.shape == (1, g.n_frames(n), n_mels) and ours_1.dtype == np.float32
        errs.append(check_parity(x, ours_1[0], sr, n_mels, name))
    print(f"{sr:>6} Hz: max rel L2 vs knf {max(e[0] for e in errs):.2e}, "
          f"vs rust {max(e[1] for e in errs):.2e}")


@pytest.fixture(scope="module")
def recordings() -> list[tuple[str, bytes]]:
    """Demo-corpus recordings (birdjepa.demo_data's synthesis), encoded in memory: (codec,
    bytes) at several rates, a stereo one among them."""
    plans = catalogue.plan_corpus(4, 3, 1.0, 1.5)
    out = []
    for plan, (codec, sr, ch) in zip(plans, [("ogg", 22050, 1), ("mp3", 44100, 2),
                                             ("flac", 48000, 1), ("wav16", 32000, 1)],
                                     strict=True):
        plan = dataclasses.replace(plan, codec=codec, sample_rate=sr, channels=ch,
                                   n_frames=int(1.3 * sr))
        out.append((codec, codecs.encode(synth.synthesize(plan), sr, codec, plan.index)))
    return out


def test_parity_on_decoded_recordings(recordings):
    for codec, data in recordings:
        x, sr = birdjepa.audio.decode(data)
        ours = np.asarray(kaldi_fbank(x[None], sample_rate=sr))[0]
        check_parity(x, ours, sr, 128, f"demo {codec}")


def test_int16_is_float_over_32768(recordings):
    rng = np.random.default_rng(5)
    pcm = rng.integers(-32768, 32768, size=(2, 4000), dtype=np.int16)
    pcm[0, :4] = [-32768, 32767, 0, -1]
    a = np.asarray(kaldi_fbank(pcm, sample_rate=16000, n_mels=64))
    b = np.asarray(kaldi_fbank(pcm.astype(np.float32) / 32768.0, sample_rate=16000, n_mels=64))
    np.testing.assert_array_equal(a, b)
    # The Rust decoder maps 16-bit PCM to x / 32768: int16 on the device gives its features.
    for codec, data in recordings:
        if codec not in ("flac", "wav16"):
            continue
        x, sr = birdjepa.audio.decode(data)
        pcm = soundfile.read(io.BytesIO(data), dtype="int16")[0]
        np.testing.assert_array_equal(x, pcm.astype(np.float32) / 32768.0)
        np.testing.assert_array_equal(np.asarray(kaldi_fbank(pcm[None], sample_rate=sr)),
                                      np.asarray(kaldi_fbank(x[None], sample_rate=sr)))


def test_batch_equals_each_row_alone():
    sigs = as_f32(batch_signals(32000, 9000))
    batch = np.asarray(kaldi_fbank(np.stack(list(sigs.values())), sample_rate=32000))
    for i, x in enumerate(sigs.values()):
        alone = np.asarray(kaldi_fbank(x[None], sample_rate=32000))[0]
        # Bitwise equal on CPU; 1e-5 nats leaves room for a GPU's batch-size-dependent kernels.
        np.testing.assert_allclose(batch[i], alone, rtol=0, atol=1e-5)
    assert np.abs(batch[0] - batch[1]).max() > 1.0, "different signals, different features"


def test_jit_and_dither():
    x = as_f32(batch_signals(16000, 4000))["sine"][None].repeat(2, axis=0)
    eager = np.asarray(kaldi_fbank(x, sample_rate=16000, n_mels=64))
    step = jax.jit(lambda w, k: kaldi_fbank(w, sample_rate=16000, n_mels=64, dither=0.1, key=k))
    jitted = jax.jit(lambda w: kaldi_fbank(w, sample_rate=16000, n_mels=64))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(jitted), eager, rtol=0, atol=1e-6)
    k1, k2 = jax.random.key(1), jax.random.key(2)
    a, b, c = (np.asarray(step(x, k)) for k in (k1, k1, k2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a[0], a[1]), "each row draws its own noise"
    assert np.abs(a - eager).max() > 1e-3, "dither changes the features"
    ignored = np.asarray(kaldi_fbank(x, sample_rate=16000, n_mels=64, dither=0.0, key=k1))
    np.testing.assert_array_equal(ignored, eager)
    silent = kaldi_fbank(np.zeros((1, 4000), np.float32), sample_rate=16000, n_mels=64,
                         dither=1.0, key=jax.random.PRNGKey(0))
    assert float(silent.min()) > np.log(np.finfo(np.float32).eps), "dither lifts the floor"
    with pytest.raises(ValueError, match="dither=0.1.*key=None"):
        kaldi_fbank(x, sample_rate=16000, n_mels=64, dither=0.1)


def test_bad_arguments():
    x = np.zeros((1, 4000), np.float32)
    for sr in (999, 768001, float("nan")):
        with pytest.raises(ValueError, match=rf"1000 <= rate <= 768000 Hz, got {sr}"):
            kaldi_fbank(x, sample_rate=sr)
    with pytest.raises(ValueError, match=r"\(batch, samples\), got \(4000,\)"):
        kaldi_fbank(x[0], sample_rate=32000)
    with pytest.raises(TypeError, match="float32 or int16 samples, got dtype int32"):
        kaldi_fbank(x.astype(np.int32), sample_rate=32000)
    with pytest.raises(ValueError, match="FFT size 256 at 8000 Hz.*got 128"):
        kaldi_fbank(x, sample_rate=8000)
    with pytest.raises(ValueError, match="n_mels: expected 3 to 4096, got 2"):
        kaldi_fbank(x, sample_rate=32000, n_mels=2)
    with pytest.raises(ValueError, match="dither: expected a finite value >= 0, got -1"):
        kaldi_fbank(x, sample_rate=32000, dither=-1.0)
    assert kaldi_fbank(np.zeros((3, 799), np.int16), sample_rate=32000).shape == (3, 0, 128)
    f = np.zeros((2, 10, 4), np.float32)
    ok = np.zeros((1, 2), np.int32)
    with pytest.raises(ValueError, match="pad: expected one of zero, min, repeat, got 'edge'"):
        views(f, ok, ok, n_frames=8, mean=0.0, std=1.0, pad="edge")
    with pytest.raises(ValueError, match=r"keep_vb: expected integer \(n_views, 2\), got"):
        views(f, ok, np.zeros((1, 3), np.int32), n_frames=8, mean=0.0, std=1.0, pad="zero")
    with pytest.raises(ValueError, match="std: expected a finite number > 0, got 0"):
        views(f, ok, ok, n_frames=8, mean=0.0, std=0.0, pad="zero")


def views_reference(feats, offset, keep, n_frames, mean, std, pad):
    """The loader's rule (sample.rs `cut` and `put`), one view at a time in numpy."""
    v, b = offset.shape
    out = np.zeros((v, b, n_frames, feats.shape[2]), np.float32)
    scale = np.float32(1.0) / (np.float32(2.0) * np.float32(std))
    for i in range(v):
        for j in range(b):
            o, k = int(offset[i, j]), int(keep[i, j])
            clip = feats[j, o:o + k]
            dst = out[i, j]
            dst[:k] = (clip - np.float32(mean)) * scale
            if k == 0 or k >= n_frames:
                continue
            if pad == "min":
                dst[k:] = (clip.min() - np.float32(mean)) * scale
            elif pad == "repeat":
                for r in range(k, n_frames):
                    dst[r] = dst[r % k]
    return out


@pytest.mark.parametrize("pad", loader_config.PADS)
def test_views_match_the_loader_rule(pad):
    rng = np.random.default_rng(11)
    b, f, m, v = 5, 40, 6, 4
    feats = (rng.standard_normal((b, f, m)) * 4 - 7).astype(np.float32)
    mean, std = -4.268, 4.569
    cut = jax.jit(lambda x, o, k, n: views(x, o, k, n_frames=n, mean=mean, std=std, pad=pad),
                  static_argnums=3)
    for n_frames in (16, 48):  # shorter than the window's frames, and longer (498 vs 512)
        keep = rng.integers(1, min(n_frames, f) + 1, size=(v, b)).astype(np.int32)
        keep[0, 0], keep[1, 1], keep[2, 2] = 0, min(n_frames, f), 1
        offset = (rng.random((v, b)) * (f - keep + 1)).astype(np.int32)
        want = views_reference(feats, offset, keep, n_frames, mean, std, pad)
        got = np.asarray(cut(feats, offset, keep, n_frames))
        assert got.shape == (v, b, n_frames, m) and got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.asarray(views(feats, offset, keep, n_frames=n_frames,
                                                       mean=mean, std=std, pad=pad)), want)
        assert np.all(got[0, 0] == 0.0), "keep 0 is all zeros"
        # The brief's form of the normalisation, (x - mean) / (2 std), to float32 round-off.
        kept = np.arange(n_frames)[None, None, :] < keep[:, :, None]
        rows = feats[np.arange(b)[None, :, None], np.minimum(offset[..., None] + np.arange(
            n_frames), f - 1)]
        np.testing.assert_allclose(got[kept], ((rows - mean) / (2 * std))[kept], atol=1e-6)
