"""Log-mel features on the accelerator, inside a jitted train step.

`kaldi_fbank` is Kaldi's log-mel filterbank (`compute-fbank-feats`, kaldi-native-fbank) with the
project's fixed options: those of the Rust fbank (rust/src/fbank/, `birdjepa.audio.fbank`), batched,
jittable and float32. `views` cuts each view of a window's features as the Rust loader does on the
host (rust/src/loader/sample.rs `cut`, `clip_frames` and `put`).

Kaldi's definition, with the options fixed here (`sr` the sample rate in Hz):

- frame length L = int(sr * 0.001 * 25) samples, shift S = int(sr * 0.001 * 10) (truncated, in
  double); FFT size N = L rounded up to a power of two;
- snip_edges: frames = 1 + (n - L) // S for n >= L samples, else 0; frame f is x[f S : f S + L];
- per frame: dither (+ dither * N(0, 1) per sample, 0 = off), DC removal (minus the frame's mean),
  pre-emphasis 0.97 (y[j] = x[j] - 0.97 x[j-1] for j > 0, y[0] = x[0] - 0.97 x[0]), the "hanning"
  window w[j] = 0.5 - 0.5 cos(2 pi j / (L - 1)), zero-padding to N;
- power spectrum |X[k]|^2 of the real FFT, bins k < N / 2 (the Nyquist bin is in no triangle);
- mel(f) = 1127 ln(1 + f / 700); n_mels triangles with edges equally spaced in mel from 20 Hz to
  Nyquist: bin b spans (l, r) = (m_lo + b d, m_lo + (b + 2) d), centre c = m_lo + (b + 1) d,
  d = (m_hi - m_lo) / (n_mels + 1); FFT bin k (at mel m = mel(k sr / N)) weighs (m - l) / (c - l)
  for l < m <= c, (r - m) / (r - c) for c < m < r;
- natural log floored at float32 epsilon: ln(max(e, eps)); no energy coefficient.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

import birdjepa.data.loader_config

FRAME_LENGTH_MS = 25.0
FRAME_SHIFT_MS = 10.0
PREEMPH = 0.97
LOW_FREQ_HZ = 20.0
MIN_SAMPLE_RATE = 1000
MAX_SAMPLE_RATE = 768_000
MIN_N_MELS, MAX_N_MELS = 3, 4096

_EPS = np.finfo(np.float32).eps
# ln(eps) rounded once to float32: the value every floored cell takes (Rust: f32::EPSILON.ln()).
_LOG_EPS = np.float32(math.log(float(_EPS)))
_INT16_SCALE = np.float32(1.0 / 32768.0)  # a power of two: int16 / 32768 is exact in float32
_HIGHEST = jax.lax.Precision.HIGHEST


@dataclasses.dataclass(frozen=True, eq=False)
class FbankGeometry:
    """The constants of one (sample_rate, n_mels): frame sizes, FFT size, window, mel matrix."""

    sample_rate: float
    n_mels: int
    frame_len: int
    shift: int
    n_fft: int
    window_l: np.ndarray  # (frame_len,) float32, Kaldi's "hanning"
    mel_km: np.ndarray  # (n_fft // 2, n_mels) float32, Kaldi's triangles

    def n_frames(self, n_samples: int) -> int:
        """Kaldi's frame count with snip_edges: 1 + (n - L) // S, 0 when n < L."""
        if n_samples < self.frame_len:
            return 0
        return 1 + (n_samples - self.frame_len) // self.shift


def _sample_rate(sample_rate) -> float:
    """The rate as the Rust fbank holds it (float32), checked to lie in the supported range."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, numbers.Real):
        raise TypeError(f"sample_rate: expected a Python number (Hz, static under jit), got "
                        f"{type(sample_rate).__name__}")
    sr = float(sample_rate)
    if not (math.isfinite(sr) and MIN_SAMPLE_RATE <= sr <= MAX_SAMPLE_RATE):
        raise ValueError(f"sample_rate: expected {MIN_SAMPLE_RATE} <= rate <= {MAX_SAMPLE_RATE} "
                         f"Hz, got {sample_rate!r}")
    return float(np.float32(sr))


def _mel_scale_f32(f_hz: np.ndarray) -> np.ndarray:
    """1127 ln(1 + f / 700) in kaldi-native-fbank's float32 arithmetic (the log rounded once)."""
    f_hz = np.asarray(f_hz, np.float32)
    t = np.float32(1.0) + f_hz / np.float32(700.0)
    return np.float32(1127.0) * np.log(t.astype(np.float64)).astype(np.float32)


@functools.lru_cache(maxsize=64)
def _geometry(sr: float, n_mels: int) -> FbankGeometry:
    # Kaldi truncates samp_freq * 0.001 * ms, computed in double (setup.rs `frame_sizes`).
    frame_len = int(sr * 0.001 * FRAME_LENGTH_MS)
    shift = int(sr * 0.001 * FRAME_SHIFT_MS)
    n_fft = 1 << (frame_len - 1).bit_length()

    # Kaldi's "hanning" window, computed in double and stored as float32 (setup.rs `window`).
    j = np.arange(frame_len, dtype=np.float64)
    window_l = (0.5 - 0.5 * np.cos(2.0 * np.pi / (frame_len - 1) * j)).astype(np.float32)

    # The mel triangles in float32, operation for operation as kaldi-native-fbank's MelBanks and
    # setup.rs `mel_banks` compute them (float64 would move edges by ~1e-7 mel, for nothing).
    f32 = np.float32
    bin_width = f32(sr) / f32(n_fft)
    mel_k = _mel_scale_f32(bin_width * np.arange(n_fft // 2, dtype=np.float32))[:, None]
    mel_lo, mel_hi = _mel_scale_f32(f32(LOW_FREQ_HZ)), _mel_scale_f32(f32(0.5) * f32(sr))
    delta = (mel_hi - mel_lo) / f32(n_mels + 1)
    b = np.arange(n_mels, dtype=np.float32)[None, :]
    left, centre, right = mel_lo + b * delta, mel_lo + (b + 1) * delta, mel_lo + (b + 2) * delta
    inside = (mel_k > left) & (mel_k < right)
    with np.errstate(invalid="ignore", divide="ignore"):
        up, down = (mel_k - left) / (centre - left), (right - mel_k) / (right - centre)
    mel_km = np.where(inside, np.where(mel_k <= centre, up, down), f32(0.0)).astype(np.float32)
    empty = np.flatnonzero(~inside.any(axis=0))
    if empty.size:
        raise ValueError(
            f"n_mels: expected few enough bins that each covers an FFT bin (FFT size {n_fft} at "
            f"{sr:g} Hz; mel bin {int(empty[0])} covers none), got {n_mels}")
    window_l.setflags(write=False)
    mel_km.setflags(write=False)
    return FbankGeometry(sr, n_mels, frame_len, shift, n_fft, window_l, mel_km)


def fbank_geometry(sample_rate: float, n_mels: int = 128) -> FbankGeometry:
    """Frame sizes, FFT size, window and mel matrix of `kaldi_fbank` (cached per argument)."""
    if isinstance(n_mels, bool) or not isinstance(n_mels, numbers.Integral):
        raise TypeError(f"n_mels: expected an int, got {type(n_mels).__name__}")
    if not MIN_N_MELS <= n_mels <= MAX_N_MELS:
        raise ValueError(f"n_mels: expected {MIN_N_MELS} to {MAX_N_MELS}, got {n_mels}")
    return _geometry(_sample_rate(sample_rate), int(n_mels))


def _frames(x_bs: jax.Array, frame_len: int, shift: int, n_frames: int) -> jax.Array:
    """(b, n_frames, frame_len): frame f is x[f shift : f shift + frame_len].

    Without an index matrix: the wave cut into chunks of `shift` samples, frame f is chunks f,
    f + 1, ... side by side, cut to frame_len; slices and a concatenate that XLA fuses into
    whatever reads the frames.
    """
    b, n = x_bs.shape
    per_frame = -(-frame_len // shift)
    n_chunks = n_frames + per_frame - 1
    need = n_chunks * shift
    x_bs = x_bs[:, :need] if n >= need else jnp.pad(x_bs, ((0, 0), (0, need - n)))
    chunks_bcs = x_bs.reshape(b, n_chunks, shift)
    frames = jnp.concatenate([chunks_bcs[:, i:i + n_frames] for i in range(per_frame)], axis=-1)
    return frames[:, :, :frame_len]


@functools.partial(jax.jit, static_argnames=("sample_rate", "n_mels", "dither"))
def _fbank(wave_bs, key, *, sample_rate: float, n_mels: int, dither: float):
    g = _geometry(sample_rate, n_mels)
    if wave_bs.dtype == jnp.int16:
        x_bs = wave_bs.astype(jnp.float32) * _INT16_SCALE
    else:
        x_bs = wave_bs.astype(jnp.float32)
    frames_bfl = _frames(x_bs, g.frame_len, g.shift, g.n_frames(wave_bs.shape[1]))
    if dither > 0.0:
        noise_bfl = jax.random.normal(key, frames_bfl.shape, jnp.float32)
        frames_bfl = frames_bfl + np.float32(dither) * noise_bfl
    frames_bfl = frames_bfl - jnp.mean(frames_bfl, axis=-1, keepdims=True)
    prev_bfl = jnp.concatenate([frames_bfl[..., :1], frames_bfl[..., :-1]], axis=-1)
    frames_bfl = (frames_bfl - np.float32(PREEMPH) * prev_bfl) * g.window_l
    spec_bfk = jnp.fft.rfft(frames_bfl, n=g.n_fft, axis=-1)[..., : g.n_fft // 2]
    power_bfk = spec_bfk.real * spec_bfk.real + spec_bfk.imag * spec_bfk.imag
    energy_bfm = jnp.matmul(power_bfk, g.mel_km, precision=_HIGHEST)
    return jnp.where(energy_bfm > _EPS, jnp.log(jnp.maximum(energy_bfm, _EPS)), _LOG_EPS)


def kaldi_fbank(wave_bs, *, sample_rate: float, n_mels: int = 128, dither: float = 0.0,
                key: jax.Array | None = None) -> jax.Array:
    """Kaldi log-mel filterbank of each row of `wave_bs`: (b, frames, n_mels) float32.

    Equal (to float32 round-off) to the Rust fbank, `birdjepa.audio.fbank(x, sample_rate=sr,
    n_mels=n_mels)`, and to kaldi-native-fbank with the same options; see the module docstring
    for the definition. Jittable; `sample_rate`, `n_mels` and `dither` are static.

    wave_bs: (batch, samples), float32 (full scale +-1), or int16 meaning x / 32768 (how the
        Rust decoder maps 16-bit PCM), converted on the device. Fewer samples than one frame
        give (b, 0, n_mels).
    sample_rate: Hz, in [1000, 768000].
    dither: standard deviation of the Gaussian noise Kaldi adds to every sample of each frame
        before DC removal (0: none); its noise is drawn from `key` (a jax PRNG key, required when
        dither > 0, ignored otherwise), so the same key gives the same features.
    """
    g = fbank_geometry(sample_rate, n_mels)
    if not hasattr(wave_bs, "dtype"):
        wave_bs = np.asarray(wave_bs)
    if wave_bs.dtype not in (np.float32, np.int16):
        raise TypeError(f"wave_bs: expected float32 or int16 samples, got dtype {wave_bs.dtype}")
    if wave_bs.ndim != 2:
        raise ValueError(f"wave_bs: expected shape (batch, samples), got {wave_bs.shape}")
    if isinstance(dither, bool) or not isinstance(dither, numbers.Real):
        raise TypeError(f"dither: expected a Python number (static under jit), got "
                        f"{type(dither).__name__}")
    if not (math.isfinite(dither) and dither >= 0.0):
        raise ValueError(f"dither: expected a finite value >= 0, got {dither!r}")
    if dither > 0.0 and key is None:
        raise ValueError(f"dither={dither!r} needs key: expected a jax PRNG key for the dither "
                         f"noise, got key=None")
    b, n = wave_bs.shape
    if g.n_frames(n) == 0:
        return jnp.zeros((b, 0, g.n_mels), jnp.float32)
    return _fbank(wave_bs, key if dither > 0.0 else None, sample_rate=g.sample_rate,
                  n_mels=g.n_mels, dither=float(dither))


@functools.partial(jax.jit, static_argnames=("n_frames", "mean", "scale", "pad"))
def _views(feats_bfm, offset_vb, keep_vb, *, n_frames: int, mean: float, scale: float, pad: str):
    b, f, _ = feats_bfm.shape
    r_t = jnp.arange(n_frames, dtype=jnp.int32)
    keep_vbt = keep_vb.astype(jnp.int32)[:, :, None]
    # Row r is frame offset + r of the clip, or past keep offset + r % keep: the clip again
    # (pad = "repeat"; the other pads overwrite those rows).
    idx_vbt = offset_vb.astype(jnp.int32)[:, :, None] + r_t % jnp.maximum(keep_vbt, 1)
    idx_vbt = jnp.clip(idx_vbt, 0, f - 1)
    rows_vbtm = feats_bfm[jnp.arange(b)[None, :, None], idx_vbt]
    x_vbtm = (rows_vbtm - np.float32(mean)) * np.float32(scale)
    kept_vbt1 = (r_t < keep_vbt)[..., None]
    if pad == "zero":
        x_vbtm = jnp.where(kept_vbt1, x_vbtm, np.float32(0.0))
    elif pad == "min":
        lo_vb11 = jnp.min(jnp.where(kept_vbt1, x_vbtm, np.float32(np.inf)), axis=(2, 3),
                          keepdims=True)
        x_vbtm = jnp.where(kept_vbt1, x_vbtm, lo_vb11)
    return jnp.where((keep_vbt > 0)[..., None], x_vbtm, np.float32(0.0))


def views(feats_bfm, offset_vb, keep_vb, *, n_frames: int, mean: float, std: float,
          pad: str) -> jax.Array:
    """Each view of each window's features, as the Rust loader cuts them: (v, b, n_frames, m).

    For view v of row b, with o = offset_vb[v, b] and k = keep_vb[v, b] (int32, from the
    loader; the caller guarantees o + k <= frames), row r < k is feats[b, o + r] normalised,
    (x - mean) * (1 / (2 std)) in float32 exactly as sample.rs `put` computes it; rows r >= k
    are the padding: pad="zero": 0.0 (the dataset mean after normalisation), pad="min": the
    minimum of the kept normalised rows over all mel bins, pad="repeat": row o + (r % k)
    normalised (the clip again from its first frame). k == 0 gives all zeros. `feats_bfm` may
    have fewer frames than n_frames. Jittable with traced offsets and keeps; n_frames, mean,
    std and pad are static.
    """
    if not hasattr(feats_bfm, "dtype"):
        feats_bfm = np.asarray(feats_bfm, np.float32)
    if feats_bfm.ndim != 3 or not jnp.issubdtype(feats_bfm.dtype, jnp.floating):
        raise ValueError(f"feats_bfm: expected float (batch, frames, n_mels), got "
                         f"{feats_bfm.dtype} {feats_bfm.shape}")
    offset_vb, keep_vb = jnp.asarray(offset_vb), jnp.asarray(keep_vb)
    b, f, m = feats_bfm.shape
    for name, a in (("offset_vb", offset_vb), ("keep_vb", keep_vb)):
        if a.ndim != 2 or a.shape[1] != b or not jnp.issubdtype(a.dtype, jnp.integer):
            raise ValueError(f"{name}: expected integer (n_views, {b}), got {a.dtype} {a.shape}")
    if offset_vb.shape != keep_vb.shape:
        raise ValueError(f"keep_vb: expected the shape of offset_vb, {offset_vb.shape}, got "
                         f"{keep_vb.shape}")
    if isinstance(n_frames, bool) or not isinstance(n_frames, numbers.Integral) or n_frames < 1:
        raise ValueError(f"n_frames: expected a positive int, got {n_frames!r}")
    if pad not in birdjepa.data.loader_config.PADS:
        raise ValueError(f"pad: expected one of {', '.join(birdjepa.data.loader_config.PADS)}, "
                         f"got {pad!r}")
    if not (isinstance(mean, numbers.Real) and math.isfinite(mean)):
        raise ValueError(f"mean: expected a finite number, got {mean!r}")
    if not (isinstance(std, numbers.Real) and math.isfinite(std) and std > 0):
        raise ValueError(f"std: expected a finite number > 0, got {std!r}")
    if f == 0:  # no frame to cut: the caller's keeps are all 0
        return jnp.zeros((offset_vb.shape[0], b, n_frames, m), jnp.float32)
    # The loader's float32 arithmetic: mean and std as f32, scale = 1 / (2 std) rounded once.
    scale = np.float32(1.0) / (np.float32(2.0) * np.float32(std))
    return _views(feats_bfm.astype(jnp.float32), offset_vb, keep_vb, n_frames=int(n_frames),
                  mean=float(np.float32(mean)), scale=float(scale), pad=pad)


WAVE_KEYS = ("wave", "crop_start", "crop_frames", "local_crop_start", "local_crop_frames")
"""What a `features = "device"` batch carries in place of `data` and `local`."""


def featurize(batch: dict, cfg) -> dict:
    """A `features = "device"` batch (`birdjepa.data.Loader`) as the host-features batch of the
    same loader settings `cfg` (a `birdjepa.data.LoaderConfig`): `wave` turned into `data`
    ((B, T, M), or (V, B, T, M) with more than one view) and, with local crops, `local`
    ((L, B, local_frames, M)) by `kaldi_fbank`, then `views` of the loader's own crops; every
    other key as it is. Jittable (a training step calls it on each micro-batch); numpy or jax
    arrays in, jax arrays out. Equal to the host's features within float32 round-off."""
    out = {k: v for k, v in batch.items() if k not in WAVE_KEYS}
    feats_bfm = kaldi_fbank(batch["wave"], sample_rate=cfg.sample_rate, n_mels=cfg.n_mels)
    common = dict(mean=cfg.mean, std=cfg.std, pad=cfg.pad)
    data = views(feats_bfm, batch["crop_start"], batch["crop_frames"], n_frames=cfg.n_frames,
                 **common)
    out["data"] = data[0] if data.shape[0] == 1 else data  # the host's layout for one view
    if "local_crop_start" in batch:
        frames = cfg.local_frames or cfg.derived()["local_frames"]
        out["local"] = views(feats_bfm, batch["local_crop_start"], batch["local_crop_frames"],
                             n_frames=frames, **common)
    return out
