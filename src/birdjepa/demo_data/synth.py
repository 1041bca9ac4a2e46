"""Synthesis of one recording from its plan: species song phrases (FM syllables, trills, buzzes,
harmonic stacks) with pitch and tempo jitter, faint other species and coloured noise."""

import dataclasses
import math

import numpy as np

import birdjepa.demo_data.catalogue as catalogue

# ---------------------------------------------------------------------------------------------
# Synthesis


@dataclasses.dataclass
class _Events:
    """Syllables of one source, in time order and non-overlapping (columns are per syllable)."""

    start: list = dataclasses.field(default_factory=list)
    n: list = dataclasses.field(default_factory=list)
    chevron: list = dataclasses.field(default_factory=list)
    f0: list = dataclasses.field(default_factory=list)
    f1: list = dataclasses.field(default_factory=list)
    vib_hz: list = dataclasses.field(default_factory=list)
    vib_depth: list = dataclasses.field(default_factory=list)
    am_hz: list = dataclasses.field(default_factory=list)
    amp: list = dataclasses.field(default_factory=list)


def _phrase(
    ev: _Events,
    sp: catalogue.Species,
    t0: float,
    sr: int,
    pitch: float,
    tempo: float,
    amp: float,
    rng: np.random.Generator,
    max_repeats: int | None = None,
) -> float:
    """Append one phrase of `sp` starting at `t0` seconds; return its end time in seconds."""
    lo, hi = sp.repeats
    reps = int(rng.integers(lo, hi + 1)) if max_repeats is None else min(lo, max_repeats)
    n_syl = reps * len(sp.motif)
    pitch = pitch * rng.uniform(0.985, 1.015)
    t = t0
    for k in range(n_syl):
        syl = sp.motif[k % len(sp.motif)]
        frac = k / max(1, n_syl - 1)
        p = pitch * (1.0 + (sp.pitch_ramp - 1.0) * frac)
        g = 1.0 + (sp.tempo_ramp - 1.0) * frac
        dur = syl.dur_s * tempo * rng.uniform(0.95, 1.05)
        n = max(16, int(dur * sr))
        ev.start.append(int(t * sr))
        ev.n.append(n)
        ev.chevron.append(syl.shape == "chevron")
        ev.f0.append(syl.f0 * p)
        ev.f1.append(syl.f1 * p)
        ev.vib_hz.append(syl.vib_hz)
        ev.vib_depth.append(syl.vib_depth * p)
        ev.am_hz.append(syl.am_hz)
        ev.amp.append(syl.amp * amp * rng.uniform(0.85, 1.0))
        t += n / sr + syl.gap_s * tempo * g * rng.uniform(0.9, 1.1)
    return t


def _render(
    ev: _Events,
    harmonics: tuple[float, ...],
    n_frames: int,
    sr: int,
    out: np.ndarray,
    rng: np.random.Generator,
) -> tuple[float, int]:
    """Add the syllables of `ev` to `out`, vectorised; return (sum of squares, active samples).

    Syllables running past the end of the recording are dropped.
    """
    start = np.asarray(ev.start, np.int64)
    n = np.asarray(ev.n, np.int64)
    keep = start + n <= n_frames
    if not keep.any():
        return 0.0, 0
    cols = {
        k: np.asarray(v)[keep] for k, v in dataclasses.asdict(ev).items() if k not in ("n", "start")
    }
    start, n = start[keep], n[keep]
    total = int(n.sum())
    f32 = np.float32
    seg = np.repeat(np.arange(len(n)), n)
    offsets = np.cumsum(n) - n
    local = np.arange(total, dtype=np.int64)
    local -= offsets[seg]
    lf = local.astype(f32)
    nn = n.astype(f32)[seg]
    tl = lf * f32(1.0 / sr)

    u = lf / nn
    shape = np.where(cols["chevron"][seg], np.sin(f32(np.pi) * u), u)
    f0 = cols["f0"].astype(f32)[seg]
    freq = f0 + (cols["f1"].astype(f32)[seg] - f0) * shape
    if np.any(cols["vib_depth"]):
        vib = np.sin(f32(2 * np.pi) * cols["vib_hz"].astype(f32)[seg] * tl)
        freq += cols["vib_depth"].astype(f32)[seg] * vib
    # Phase accumulation (FM) in float64, restarted at each syllable (so float32 keeps
    # it to ~1e-3 rad) from a random start phase.
    phase = np.cumsum(freq, dtype=np.float64)
    phase -= phase[offsets][seg]
    phase = phase.astype(f32)
    phase *= f32(2 * np.pi / sr)
    phase += rng.uniform(0, 2 * np.pi, len(n)).astype(f32)[seg]

    att = np.minimum(f32(0.012 * sr), f32(0.3) * nn)
    edge = np.clip(np.minimum(lf, nn - 1 - lf) / att, 0.0, 1.0)
    env = (0.5 - 0.5 * np.cos(f32(np.pi) * edge)) * cols["amp"].astype(f32)[seg]
    am = cols["am_hz"].astype(f32)
    if np.any(am):
        mod = 0.55 + 0.45 * np.cos(f32(2 * np.pi) * am[seg] * tl)
        env *= np.where(am[seg] > 0, mod, f32(1.0))

    sig = np.zeros(total, f32)
    nyq = 0.45 * sr
    for h, a in enumerate(harmonics, start=1):
        part = np.sin(f32(h) * phase)
        part *= f32(a)
        if h * freq.max() >= nyq:
            part[h * freq >= nyq] = 0.0
        sig += part
    sig *= env
    out[start[seg] + local] += sig
    return float(np.dot(sig, sig)), total


_PHASORS = np.exp(2j * np.pi * np.arange(4096) / 4096).astype(np.complex64)


def _coloured_noise(rng: np.random.Generator, n_frames: int, sr: int, alpha: float) -> np.ndarray:
    """Noise with power spectrum ~ 1/f**alpha (1: pink, 2: brown), high-passed at ~60 Hz.

    Independent spectrally shaped blocks overlap-added under sqrt-Hann windows (constant
    power), so the cost is a batch of short FFTs whatever the length.
    """
    block = 16384
    hop = block // 2
    n_blocks = n_frames // hop + 2
    freqs = np.fft.rfftfreq(block, 1.0 / sr)
    shape = np.maximum(freqs, 60.0) ** (-alpha / 2)
    shape *= 1.0 / (1.0 + (60.0 / np.maximum(freqs, 1.0)) ** 4)
    # The spectrum of a block: the magnitude shape with uniformly random phases, drawn from a
    # table (cheaper than Gaussian draws; the blocks are still Gaussian-like by the CLT).
    n_bins = block // 2 + 1
    idx = np.frombuffer(rng.bytes(2 * n_blocks * n_bins), np.uint16) >> 4
    spec = _PHASORS[idx].reshape(n_blocks, n_bins)
    spec *= shape.astype(np.float32)
    y = np.fft.irfft(spec, n=block, axis=1)
    y *= np.sqrt(0.5 - 0.5 * np.cos(2 * np.pi * np.arange(block) / block)).astype(np.float32)
    out = y[:, :hop].copy()
    out[1:] += y[:-1, hop:]
    out = out.reshape(-1)[hop : hop + n_frames]
    return out * np.float32(1.0 / (np.std(out) + 1e-12))


def synthesize(plan: catalogue.Recording, *, stems: bool = False) -> np.ndarray | dict:
    """Audio of one recording, float32 (frames, channels), peak in [0.25, 0.9].

    With `stems`, return instead the mono parts before mixing and scaling: `song`,
    `background` (other species), `noise`, and the drawn `snr_db`.
    """
    rng = np.random.default_rng(np.random.SeedSequence([plan.seed, plan.index, 0xB12D]))
    sr, nf = plan.sample_rate, plan.n_frames
    if plan.label < 0:
        return _noise_only(rng, plan)
    dur = nf / sr
    sp = catalogue.SPECIES[plan.label]

    song = np.zeros(nf, np.float32)
    ev = _Events()
    pitch = rng.uniform(0.94, 1.06)
    tempo = rng.uniform(0.88, 1.12)
    t = rng.uniform(0.0, 1.0)
    while t < dur:
        t = _phrase(ev, sp, t, sr, pitch, tempo, rng.uniform(0.6, 1.0), rng)
        lo, hi = sp.phrase_gap_s
        # Now and then a longer pause, so not every window holds song.
        t += rng.uniform(4.0, 8.0) if rng.random() < 0.04 else rng.uniform(lo, hi) * tempo
    ss, active = _render(ev, sp.harmonics, nf, sr, song, rng)
    song_power = ss / max(active, 1)

    # Faint phrases of one or two other species.
    others = [i for i in range(len(catalogue.SPECIES)) if i != plan.label]
    background = np.zeros(nf, np.float32)
    for j in rng.choice(others, size=int(rng.integers(1, 3)), replace=False):
        bsp = catalogue.SPECIES[int(j)]
        bev = _Events()
        t = rng.uniform(0.0, 8.0)
        gain = 10 ** (-rng.uniform(14, 26) / 20)
        bp = rng.uniform(0.94, 1.06)
        while t < dur:
            t = _phrase(bev, bsp, t, sr, bp, 1.0, gain, rng, max_repeats=2)
            t += rng.uniform(5.0, 15.0)
        _render(bev, bsp.harmonics, nf, sr, background, rng)
    # Background phrases were rendered at unit level: scale them relative to the song.
    background *= math.sqrt(song_power) * math.sqrt(2)

    snr_db = rng.uniform(3.0, 20.0)
    noise_rms = math.sqrt(song_power) * 10 ** (-snr_db / 20) if song_power > 0 else 0.01
    alpha = rng.uniform(1.0, 2.0)
    noise = _coloured_noise(rng, nf, sr, alpha) * noise_rms
    if stems:
        return {"song": song, "background": background, "noise": noise, "snr_db": snr_db}
    mono = song + background

    if plan.channels == 1:
        x = (mono + noise)[:, None]
    else:
        # Two microphones: different gains, a small delay and partly correlated noise.
        delay = int(rng.integers(0, 24))
        rho = rng.uniform(0.3, 0.9)
        noise2 = (
            rho * noise + math.sqrt(1 - rho * rho) * _coloured_noise(rng, nf, sr, alpha) * noise_rms
        )
        right = np.concatenate([np.zeros(delay, np.float32), mono[: nf - delay]]) * rng.uniform(
            0.6, 1.0
        )
        x = np.stack([mono * rng.uniform(0.6, 1.0) + noise, right + noise2], axis=1)
    peak = float(np.max(np.abs(x))) or 1.0
    x *= rng.uniform(0.25, 0.9) / peak
    return x.astype(np.float32)


def _noise_only(rng: np.random.Generator, plan: catalogue.Recording) -> np.ndarray:
    """A recording without a bird (label -1): coloured noise as under the soundscapes' song, at
    a level log-uniform over 40 dB around theirs (rms 0.001-0.1), on every channel."""
    rms = 10 ** rng.uniform(-3.0, -1.0)
    alpha = rng.uniform(1.0, 2.0)
    x = np.stack([_coloured_noise(rng, plan.n_frames, plan.sample_rate, alpha) * rms
                  for _ in range(plan.channels)], axis=1)
    return np.clip(x, -1.0, 1.0).astype(np.float32)
