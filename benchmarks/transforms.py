"""Benchmark the per-clip audio transforms: `python -m benchmarks transforms [--quick]`.

For each codec (ogg, mp3, flac, wav), layout (44.1 kHz mono, 48 kHz stereo) and recording length,
prints the median CPU ms per 5 s clip (random start) of our stages (windowed decode, full decode,
resample, fbank, whole clip) and of three plain-Python peers on the same bytes:

- naive: soundfile whole decode + soxr + kaldi-native-fbank
- careful: soundfile seek to the window + soxr + kaldi-native-fbank
- best: soundfile seek + soxr + a vectorised numpy Kaldi fbank (below)

CPU time is the calling thread's (`time.thread_time`): all work here runs on it.
"""

import io
import statistics
import time

import numpy as np

import birdjepa._rs as _rs
import birdjepa.audio
import birdjepa.common.cli_args as cli_args

SR_OUT = 32000
CLIP_S = 5.0
FORMATS = {
    "ogg": ("OGG", "VORBIS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
    "flac": ("FLAC", "PCM_16"),
    "wav": ("WAV", "PCM_16"),
}
LAYOUTS = {"44.1k mono": (44100, 1), "48k stereo": (48000, 2)}


def make_audio(codec: str, sr: int, channels: int, seconds: float, seed: int = 0) -> bytes:
    """Noise plus chirps, encoded in memory in 64k-frame blocks (one big Vorbis write segfaults)."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    n = int(seconds * sr)
    fmt, subtype = FORMATS[codec]
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", sr, channels, subtype, format=fmt) as f:
        for i in range(0, n, 65536):
            m = min(65536, n - i)
            t = (i + np.arange(m)) / sr
            tone = 0.3 * np.sin(2 * np.pi * (1500 + 1000 * np.sin(t)) * t)
            block = 0.05 * rng.standard_normal((m, channels)) + tone[:, None]
            f.write(block.astype(np.float32))
    return buf.getvalue()


class NumpyFbank:
    """Vectorised Kaldi fbank (Bird-MAE options): one batched rfft and one matmul, reused buffers."""

    def __init__(self, sr: int = SR_OUT, n_mels: int = 128, frame: int = 800, shift: int = 320):
        self.frame, self.shift, self.nfft = frame, shift, 1024
        i = np.arange(frame)
        self.window = (0.5 - 0.5 * np.cos(2 * np.pi * i / (frame - 1))).astype(np.float32)
        mel = lambda f: 1127.0 * np.log1p(np.asarray(f) / 700.0)  # noqa: E731
        lo, hi = mel(20.0), mel(sr / 2)
        centers = lo + np.arange(n_mels + 2) * (hi - lo) / (n_mels + 1)
        m = mel(np.arange(self.nfft // 2) * sr / self.nfft)[:, None]
        left, center, right = centers[:-2], centers[1:-1], centers[2:]
        up = (m - left) / (center - left)
        down = (right - m) / (right - center)
        w = np.where((m > left) & (m < right), np.where(m <= center, up, down), 0.0)
        self.mel = np.zeros((self.nfft // 2 + 1, n_mels), np.float32)
        self.mel[: self.nfft // 2] = w
        self.buf: np.ndarray | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        n = 1 + (len(x) - self.frame) // self.shift
        frames = np.lib.stride_tricks.sliding_window_view(x, self.frame)[:: self.shift][:n]
        if self.buf is None or self.buf.shape[0] != n:
            self.buf = np.zeros((n, self.nfft), np.float32)
        b = self.buf
        b[:, : self.frame] = frames
        b[:, : self.frame] -= b[:, : self.frame].mean(axis=1, keepdims=True)
        b[:, 1 : self.frame] -= 0.97 * b[:, : self.frame - 1].copy()
        b[:, 0] *= 0.03
        b[:, : self.frame] *= self.window
        spec = np.fft.rfft(b, axis=1)
        power = (spec.real**2 + spec.imag**2).astype(np.float32)
        return np.log(np.maximum(power @ self.mel, np.finfo(np.float32).eps))


def knf_fbank(x: np.ndarray, sr: float = SR_OUT, **kw) -> np.ndarray:
    """kaldi-native-fbank's log-mel filterbank (an independent C++ implementation of Kaldi's) of
    `x` with our defaults; `kw` overrides frame_length_ms, frame_shift_ms, window_type, preemph,
    remove_dc, snip_edges, n_mels, low_freq, high_freq. The peer of the benchmarks and the
    reference of the fbank tests."""
    import kaldi_native_fbank as knf

    o = knf.FbankOptions()
    fo, mo = o.frame_opts, o.mel_opts
    fo.samp_freq = sr
    fo.frame_length_ms = kw.get("frame_length_ms", 25.0)
    fo.frame_shift_ms = kw.get("frame_shift_ms", 10.0)
    fo.dither = 0.0
    fo.window_type = kw.get("window_type", "hanning")
    fo.preemph_coeff = kw.get("preemph", 0.97)
    fo.remove_dc_offset = kw.get("remove_dc", True)
    fo.round_to_power_of_two = True
    fo.snip_edges = kw.get("snip_edges", True)
    mo.num_bins = kw.get("n_mels", 128)
    mo.low_freq = kw.get("low_freq", 20.0)
    mo.high_freq = kw.get("high_freq", 0.0)
    o.use_energy = False
    o.use_log_fbank = True
    o.use_power = True
    f = knf.OnlineFbank(o)
    f.accept_waveform(sr, x.astype(np.float32).tolist())
    f.input_finished()
    frames = [f.get_frame(i) for i in range(f.num_frames_ready)]
    return np.array(frames, dtype=np.float32).reshape(-1, mo.num_bins)


def sf_window(data: bytes, start: float) -> tuple[np.ndarray, int]:
    import soundfile as sf

    with sf.SoundFile(io.BytesIO(data)) as f:
        f.seek(round(start * f.samplerate))
        y = f.read(round(CLIP_S * f.samplerate), dtype="float32", always_2d=True)
        return y.mean(axis=1), f.samplerate


def peer_naive(data: bytes, start: float) -> np.ndarray:
    import soundfile as sf
    import soxr

    y, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    a = round(start * sr)
    y = y[a : a + round(CLIP_S * sr)].mean(axis=1)
    return knf_fbank(soxr.resample(y, sr, SR_OUT).astype(np.float32))


def peer_careful(data: bytes, start: float) -> np.ndarray:
    import soxr

    y, sr = sf_window(data, start)
    return knf_fbank(soxr.resample(y, sr, SR_OUT).astype(np.float32))


def make_peer_best():
    import soxr

    fb = NumpyFbank()

    def best(data: bytes, start: float) -> np.ndarray:
        y, sr = sf_window(data, start)
        return fb(soxr.resample(y, sr, SR_OUT).astype(np.float32))

    return best


def cpu_ms(fn, args_list) -> float:
    times = []
    for args in args_list:
        t = time.thread_time()
        fn(*args)
        times.append(time.thread_time() - t)
    return 1e3 * statistics.median(times)


def main(argv: list[str]) -> int:
    p = cli_args.Parser("python -m benchmarks transforms", __doc__)
    p.add_flag("quick", "two lengths, few repetitions")
    p.add_argument("--reps", type=cli_args.converter(int), default=None,
                   help="clips per measurement")
    p.add_argument("--codecs", default=",".join(FORMATS), help="comma-separated subset")
    args = p.parse_args(argv)
    lengths = [10, 60] if args.quick else [10, 30, 60, 120]
    reps = args.reps or (5 if args.quick else 21)
    best_peer = make_peer_best()
    rng = np.random.default_rng(0)

    cols = ["win_dec", "full_dec", "resample", "fbank", "clip", "naive", "careful", "best"]
    print(f"median CPU ms per {CLIP_S:.0f} s clip ({reps} random starts); ratios = peer / our clip")
    head = f"{'codec':<5} {'layout':<11} {'len':>4} " + " ".join(f"{c:>8}" for c in cols)
    print(head + f" {'x naive':>8} {'x best':>7}")
    clip_ms: dict[tuple[str, str, int], float] = {}
    for codec in args.codecs.split(","):
        for layout, (sr, ch) in LAYOUTS.items():
            for length in lengths:
                data = make_audio(codec, sr, ch, length)
                starts = [(data, float(rng.uniform(0, length - CLIP_S))) for _ in range(reps)]
                win = [birdjepa.audio.decode(d, start_s=s, duration_s=CLIP_S)[0] for d, s in starts]
                up = [birdjepa.audio.resample(w, sr, SR_OUT) for w in win]
                r = {
                    "win_dec": cpu_ms(
                        lambda d, s: _rs.decode(d, start_s=s, duration_s=CLIP_S), starts
                    ),
                    "full_dec": cpu_ms(lambda d, s: _rs.decode(d), starts[: max(3, reps // 4)]),
                    "resample": cpu_ms(_rs.resample, [(w, sr, SR_OUT) for w in win]),
                    "fbank": cpu_ms(lambda u: _rs.fbank(u), [(u,) for u in up]),
                    "clip": cpu_ms(lambda d, s: _rs.clip(d, start_s=s, duration_s=CLIP_S), starts),
                    "naive": cpu_ms(peer_naive, starts[: max(3, reps // 3)]),
                    "careful": cpu_ms(peer_careful, starts),
                    "best": cpu_ms(best_peer, starts),
                }
                clip_ms[(codec, layout, length)] = r["clip"]
                print(
                    f"{codec:<5} {layout:<11} {length:>4} "
                    + " ".join(f"{r[c]:>8.2f}" for c in cols)
                    + f" {r['naive'] / r['clip']:>8.1f} {r['best'] / r['clip']:>7.2f}",
                    flush=True,
                )
    print(
        f"\nclip cost of the longest vs the shortest recording ({lengths[-1]} s / {lengths[0]} s):"
    )
    for codec in args.codecs.split(","):
        for layout in LAYOUTS:
            a, b = clip_ms[(codec, layout, lengths[0])], clip_ms[(codec, layout, lengths[-1])]
            print(f"  {codec:<5} {layout:<11} {b / a:.2f}x")
    return 0
