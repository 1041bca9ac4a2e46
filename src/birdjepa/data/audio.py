"""Audio decode, resample and Kaldi log-mel features, backed by the Rust core (`birdjepa._rs`).

All functions release the GIL while they work, so a thread pool scales across cores. Errors are
`birdjepa.AudioError` subclasses (ValueErrors) for bad audio and `birdjepa.BadArgumentError` for
arguments outside their domain; unknown fbank options raise TypeError naming the key.

fbank options (Kaldi / kaldi-native-fbank names, Bird-MAE defaults): n_mels=128,
frame_length_ms=25.0, frame_shift_ms=10.0, round_to_power_of_two=True, preemph=0.97,
remove_dc=True, dither=0.0, seed=0, window_type="hanning" (or hamming, povey, rectangular,
blackman, sine), blackman_coeff=0.42, snip_edges=True, low_freq=20.0, high_freq=0.0 (0 means
Nyquist, negative means that far below it), use_power=True, use_log_fbank=True.
"""

import dataclasses
import io
import math
import numbers
import os
import warnings
from typing import Any

import numpy as np
import soundfile

import birdjepa._rs as _rs
import birdjepa.data.paths

FBANK_OPTIONS: tuple[str, ...] = tuple(_rs.FBANK_OPTIONS)
RESAMPLERS: dict[str, str] = {
    "soxr-hq": "soxr HQ (libsoxr's 'HQ' quality, as Hugging Face `datasets` and librosa >= 0.10 "
               "resample: soxr.resample(x, src, dst, quality=\"HQ\")); birdjepa computes it as a "
               "zero-phase Kaiser-windowed sinc to the same specification (flat to 0.9136 of the "
               "lower Nyquist frequency, 130 dB down from the Nyquist frequency on)",
    "rubato-bh2-1024": "rubato's FFT resampler with a Blackman-Harris^2 windowed sinc of about "
                       "1024 taps (birdjepa before issue 36; its cut-off lies higher than soxr "
                       "HQ's)",
}
"""The resampling filters by name (`resampler=`, the loader's `resampler` setting, an export's
input settings), each in words a user of another framework can follow."""
DEFAULT_RESAMPLER = _rs.DEFAULT_RESAMPLER
"""soxr HQ's response: what the field resamples with (as birdjepa.data.loader_config's)."""
LEGACY_RESAMPLER = _rs.LEGACY_RESAMPLER
"""The filter of runs, loader states and exports saved before the name was recorded."""
FBANK_DEFAULTS = {"frame_length_ms": 25.0, "frame_shift_ms": 10.0, "round_to_power_of_two": True,
                  "preemph": 0.97, "remove_dc": True, "dither": 0.0, "window_type": "hanning",
                  "snip_edges": True, "low_freq": 20.0, "high_freq": 0.0, "use_power": True,
                  "use_log_fbank": True, "use_energy": False}
"""The fbank the loader, `clip` and `embed` compute (n_mels aside): recorded in exports as the
model's input, in Kaldi's terms."""


def _bytes(data: bytes | bytearray | memoryview | str | os.PathLike) -> bytes:
    """The encoded bytes of `data`: bytes-like as is, a path (str or PathLike) read from disk if
    it is a regular file within the default max_audio_mb (`birdjepa.data.paths.read_file`: a
    FIFO or a device is a DatasetError at once, never a hang)."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str | os.PathLike):
        return birdjepa.data.paths.read_file(data)
    raise TypeError(f"data must be bytes or a path, got {type(data).__name__}")


def as_mono(wave: Any, *, channels_first: bool = False) -> np.ndarray:
    """A waveform as contiguous mono float32, by one explicit convention:

    - shape (n,) or (n, channels); (channels, n) only with `channels_first=True` (a 2-D array
      with more channels than samples and no flag is refused: it is surely channels-first);
      channels are averaged;
    - float arrays as they are (full scale +-1); signed integers divided by 2**(bits - 1)
      (int16 / 32768), unsigned ones centred first ((x - 128) / 128 for uint8, as WAV stores it);
      other dtypes (bool, complex, objects) refused;
    - an empty array is an error (not a window of silence).
    Errors are one-line BadArgumentErrors naming the shape or dtype."""
    x = np.asarray(wave)
    if x.size == 0:
        raise _rs.BadArgumentError(f"bad argument wave: expected at least one sample, got an "
                                   f"empty array of shape {x.shape}")
    if x.dtype.kind in "iu":
        bits = 8 * x.dtype.itemsize
        offset = 2.0 ** (bits - 1) if x.dtype.kind == "u" else 0.0
        x = (x.astype(np.float64) - offset) / 2.0 ** (bits - 1)
    elif x.dtype.kind != "f":
        raise _rs.BadArgumentError(f"bad argument wave: expected a float or integer array, got "
                                   f"dtype {x.dtype}")
    if x.ndim == 2:
        if not channels_first and x.shape[1] > x.shape[0]:
            raise _rs.BadArgumentError(
                f"bad argument wave: expected (n, channels), got shape {x.shape}, more channels "
                f"than samples; pass channels_first=True for a (channels, n) array")
        x = x.mean(axis=1 if not channels_first else 0)
    elif x.ndim != 1:
        raise _rs.BadArgumentError(f"bad argument wave: expected shape (n,), (n, channels) or "
                                   f"(channels, n) with channels_first=True, got {x.shape}")
    return np.ascontiguousarray(x, dtype=np.float32)


def _wave(wave: Any, channels_first: bool = False) -> np.ndarray:
    return as_mono(wave, channels_first=channels_first)


def _check_opts(opts: dict[str, Any]) -> None:
    for key in opts:
        if key not in FBANK_OPTIONS:
            raise TypeError(
                f"unknown fbank option {key!r} (known: sample_rate, {', '.join(FBANK_OPTIONS)})"
            )


def decode(
    data: bytes | str | os.PathLike, *, start_s: float | None = None, duration_s: float | None = None
) -> tuple[np.ndarray, int]:
    """Decode ogg/vorbis, mp3, flac or wav bytes (or the file at a path) to mono float32 at the native sample rate.

    With `start_s`/`duration_s`, only that window is decoded (by seeking where the container
    allows it); the result is shorter than `duration_s` when the recording ends first.
    """
    wave, sr, _seeked, damage = _rs.decode(_bytes(data), start_s=start_s, duration_s=duration_s)
    if damage is not None:
        warn_damage(data, damage)
    return wave, sr


def warn_damage(data, damage: dict, what: str = "") -> None:
    """One RuntimeWarning for a recording whose data stops early (a truncated file): which one,
    where its data ends and why; the caller goes on with what it holds."""
    name = os.fspath(data) if isinstance(data, str | os.PathLike) else "a recording"
    warnings.warn(f"birdjepa: {name}{what}: {damage['message']}; using what it holds",
                  RuntimeWarning, stacklevel=3)


def info(data: bytes | str | os.PathLike) -> dict[str, Any]:
    """Header facts: sample_rate, channels, n_frames (None when unknown), codec, container."""
    return _rs.info(_bytes(data))


def resample(wave: Any, src_sr: int, dst_sr: int, *, channels_first: bool = False,
             resampler: str = DEFAULT_RESAMPLER) -> np.ndarray:
    """Resample audio from `src_sr` to `dst_sr` Hz; `round(n * dst / src)` mono float32 samples,
    output sample m at input time m * src / dst (soxr's convention). `resampler` names the filter
    (`RESAMPLERS`): "soxr-hq" matches soxr's HQ quality (what `datasets` and librosa use) to
    < 1e-3 relative L2 in log-mel terms at 44.1 and 48 kHz (1.2e-3 at 22.05 kHz);
    "rubato-bh2-1024" is the filter before issue 36. `wave` follows `as_mono`'s convention
    (shapes, integer scaling, no empty input)."""
    for name, sr in (("src_sr", src_sr), ("dst_sr", dst_sr)):
        if isinstance(sr, bool) or not isinstance(sr, numbers.Real) or not (
                math.isfinite(sr) and MIN_RATE <= sr <= MAX_RATE):
            raise _rs.BadArgumentError(f"bad argument {name}: expected a rate in [{MIN_RATE}, "
                                       f"{MAX_RATE}] Hz, got {sr:g}" if isinstance(
                                           sr, numbers.Real) else f"bad argument {name}: "
                                       f"expected a rate in Hz, got {sr!r}")
    return _rs.resample(_wave(wave, channels_first), int(src_sr), int(dst_sr),
                        resampler=resampler)


MIN_RATE, MAX_RATE = 1000, 768_000
"""The sample rates audio is decoded and resampled at (rust/src/decode.rs)."""


def fbank(wave: Any, *, sample_rate: float = 32000, channels_first: bool = False,
          **opts: Any) -> np.ndarray:
    """Kaldi log-mel filterbank, float32 (frames, n_mels). 5 s at 32 kHz gives (498, 128).
    `wave` follows `as_mono`'s convention."""
    _check_opts(opts)
    return _rs.fbank(_wave(wave, channels_first), sample_rate=float(sample_rate), **opts)


ENCODINGS = {"wav": "WAV", "flac": "FLAC"}
"""Codecs `encode` writes, 16-bit PCM each: WAV (no decoding work at all) and FLAC (lossless,
about half the size for field recordings; decoding costs ~0.3 ms per second of 32 kHz audio)."""


def encode(wave: Any, sample_rate: int, codec: str) -> bytes:
    """Mono `wave` (as_mono's convention) as 16-bit `codec` ("wav" or "flac") bytes at
    `sample_rate`: samples rounded to the nearest of 65,536 levels, clipped at full scale."""
    if codec not in ENCODINGS:
        raise _rs.BadArgumentError(f"bad argument codec: expected one of "
                                   f"{', '.join(ENCODINGS)}, got {codec!r}")
    x = np.round(np.clip(as_mono(wave), -1.0, 1.0) * 32767.0).astype(np.int16)
    buf = io.BytesIO()
    with soundfile.SoundFile(buf, "w", int(sample_rate), 1, format=ENCODINGS[codec],
                             subtype="PCM_16") as f:
        for i in range(0, len(x), 1 << 16):  # blocks: one huge write call is a known crash
            f.write(x[i:i + (1 << 16)])
    return buf.getvalue()


def recode(data: bytes | str | os.PathLike, codec: str, sample_rate: int | None = None, *,
           resampler: str = DEFAULT_RESAMPLER, with_damage: bool = False):
    """A recording (bytes or a path) decoded to mono, resampled to `sample_rate` (None: its
    own rate) with `resampler` and encoded as 16-bit `codec` (`encode`): what `sources pack
    --codec` stores. A recording whose data stops early gives what it holds, with a warning
    naming where, or with `with_damage` (bytes, damage: None or {"end_s", "message"})."""
    wave, sr, _seeked, damage = _rs.decode(_bytes(data))
    if damage is not None and not with_damage:
        warn_damage(data, damage)
    if sample_rate is not None and sr != sample_rate:
        wave, sr = resample(wave, sr, sample_rate, resampler=resampler), sample_rate
    out = encode(wave, sr, codec)
    return (out, damage) if with_damage else out


@dataclasses.dataclass
class Recoder:
    """`recode` each recording; one that cannot be decoded is kept as it was and listed in
    `kept` ((where, error) pairs); one whose data stops early is re-encoded with what it holds
    and listed in `damaged` ((row, where, message): `row` the caller's)."""

    codec: str
    sample_rate: int | None = None
    kept: list = dataclasses.field(default_factory=list)
    resampler: str = DEFAULT_RESAMPLER
    damaged: list = dataclasses.field(default_factory=list)

    def __call__(self, data: bytes, where: str, row: int | None = None) -> bytes:
        try:
            out, damage = recode(data, self.codec, self.sample_rate, resampler=self.resampler,
                                 with_damage=True)
        except _rs.AudioError as e:
            self.kept.append((where, f"{type(e).__name__}: {e}"))  # list.append is atomic
            return data
        if damage is not None:
            self.damaged.append((row, where, damage["message"]))
        return out


def clip(
    data: bytes | str | os.PathLike,
    *,
    start_s: float = 0.0,
    duration_s: float = 5.0,
    sample_rate: int = 32000,
    resampler: str = DEFAULT_RESAMPLER,
    with_damage: bool = False,
    **fbank_opts: Any,
) -> np.ndarray:
    """Features of one clip of `data` (bytes or a path): decode [start_s, start_s + duration_s), resample to `sample_rate`
    (with `resampler`, as `resample`), Kaldi fbank. A recording that ends early is zero-padded,
    so the shape is always fixed. A recording whose data stops early (a truncated file) gives
    what it holds, zero-padded, with a warning naming where it stops, or with `with_damage`
    (features, damage): None, or {"end_s": where the data ends, "message"}; a window past that
    end is EmptyAudioError."""
    _check_opts(fbank_opts)
    feats, _seeked, damage = _rs.clip(
        _bytes(data),
        start_s=float(start_s),
        duration_s=float(duration_s),
        sample_rate=int(sample_rate),
        resampler=resampler,
        **fbank_opts,
    )
    if with_damage:
        return feats, damage
    if damage is not None:
        warn_damage(data, damage)
    return feats


FRAME_S = 0.025
"""The Kaldi fbank's frame length, seconds: a window shorter holds no frame."""


def check_window(window_s: float | None, clip_s: float) -> float:
    """`clip_s` (a model's clip, seconds) if a window of `window_s` seconds can feed it (None:
    the clip), else ValueError: longer than the clip (the input is cut there; the rest of the
    window would never be seen) or shorter than one fbank frame."""
    if window_s is not None and window_s > clip_s + 1e-9:
        raise ValueError(f"--window_s: expected at most the model's clip, {clip_s:g} s (a longer "
                         f"window is cut to its first {clip_s:g} s), got {window_s:g}; cut more "
                         "windows with --hop_s instead")
    if window_s is not None and window_s < FRAME_S:
        raise ValueError(f"--window_s: expected at least one fbank frame, {FRAME_S} s, got "
                         f"{window_s:g}")
    return clip_s


def model_input(feats_tm: np.ndarray, n_frames: int, n_mels: int, mean: float, std: float,
                pad: str, valid_s: float | None = None) -> np.ndarray:
    """(n_frames, n_mels) float32 from a window's fbank, as the loader makes a view (rust/src/
    loader/sample.rs `put`): normalised as (x - mean) / (2 * std), cut to n_frames, frames past
    the features padded by `pad` (birdjepa.data.LoaderConfig.pad). `valid_s`: seconds of the
    window that come from the recording; with pad = "repeat" only their frames are the clip
    (the rest of the fbank is the zero-padded wave's) and fill the window again from the first."""
    if feats_tm.shape[1] != n_mels:
        raise ValueError(f"expected {n_mels} mel bins, got {feats_tm.shape[1]}")
    out = np.zeros((n_frames, n_mels), np.float32)
    t = min(n_frames, len(feats_tm))
    if pad == "repeat" and valid_s is not None:
        t = min(t, _rs.kaldi_frames(valid_s) if valid_s >= 0.025 else 0)
    scale = np.float32(1.0 / (2.0 * std))
    out[:t] = (feats_tm[:t] - np.float32(mean)) * scale
    if pad == "min" and 0 < t < n_frames:
        out[t:] = (feats_tm[:t].min() - np.float32(mean)) * scale
    if pad == "repeat" and 0 < t < n_frames:
        out[t:] = np.resize(out[:t], (n_frames - t, n_mels))
    return out
