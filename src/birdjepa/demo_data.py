"""Deterministic synthetic bird-song corpus in Hugging Face `datasets` on-disk format.

`write(out_dir)` (or `python -m birdjepa.demo_data OUT_DIR`) writes what
`datasets.Dataset.save_to_disk(out_dir, num_shards=K)` would write for an audio dataset:
`data-0000i-of-0000K.arrow` Arrow IPC stream shards whose schema metadata carries the
`huggingface` features JSON, plus `dataset_info.json` and `state.json`, so that both
`datasets.load_from_disk(out_dir)` and our own loader read it. Only numpy, soundfile and pyarrow
are used; `datasets` itself is not needed.

Each row is one recording of one of `SPECIES` (made-up species with eBird-style codes), encoded
as ogg/vorbis, mp3, flac or wav (PCM_16 or FLOAT) at 22.05, 44.1 or 48 kHz, mono or stereo. A
recording is a sequence of song phrases (frequency-modulated syllables, trills, buzzes, harmonic
stacks; the pattern is specific to the species) separated by silences, with per-recording
pitch and tempo jitter, coloured background noise at a random SNR and faint phrases of other
species. Labels are balanced and the row order is shuffled, so shards are not species-sorted.

Everything is a pure function of the arguments: the same call writes byte-identical files.
"""

import argparse
import concurrent.futures
import dataclasses
import hashlib
import io
import json
import math
import multiprocessing
import os
import pathlib
import shutil
import struct
import sys
import time
import zlib

import numpy as np
import pyarrow as pa
import soundfile as sf

# ---------------------------------------------------------------------------------------------
# Species


@dataclasses.dataclass(frozen=True)
class Syllable:
    """One note of a song: a frequency trajectory under a smooth amplitude envelope."""

    shape: str
    """"sweep": linear glide from `f0` to `f1`; "chevron": f0 -> f1 -> f0 along a half sine."""
    f0: float
    """Start (and end, for a chevron) frequency of the fundamental, Hz."""
    f1: float
    """End frequency (sweep) or turning-point frequency (chevron), Hz."""
    dur_s: float
    gap_s: float
    """Silence after the syllable, before the next one (scaled by the phrase's tempo)."""
    amp: float = 1.0
    vib_hz: float = 0.0
    """Rate of sinusoidal frequency modulation (warble/vibrato); 0 for none."""
    vib_depth: float = 0.0
    """Peak frequency deviation of that modulation, Hz."""
    am_hz: float = 0.0
    """Rate of deep amplitude modulation, which makes a buzz; 0 for a clean tone."""


@dataclasses.dataclass(frozen=True)
class Species:
    code: str
    """eBird-style code; also the ClassLabel name."""
    name: str
    motif: tuple[Syllable, ...]
    """Syllables of one motif; a phrase repeats the motif `repeats` times."""
    repeats: tuple[int, int]
    """Inclusive range of motif repetitions per phrase."""
    phrase_gap_s: tuple[float, float]
    """Range of the silence between phrases, seconds."""
    harmonics: tuple[float, ...] = (1.0,)
    """Relative amplitudes of the fundamental and its overtones."""
    pitch_ramp: float = 1.0
    """Pitch multiplier reached by the end of a phrase (< 1: the phrase descends)."""
    tempo_ramp: float = 1.0
    """Gap multiplier reached by the end of a phrase (< 1: the phrase accelerates)."""


def _sweep(f0, f1, dur, gap, **kw) -> Syllable:
    return Syllable("sweep", f0, f1, dur, gap, **kw)


def _chev(f0, f1, dur, gap, **kw) -> Syllable:
    return Syllable("chevron", f0, f1, dur, gap, **kw)


SPECIES: tuple[Species, ...] = (
    # Fast series of rising chirps, 2.8-4.8 kHz.
    Species(
        "rufchi1",
        "Rufous Chirper",
        (_sweep(2800, 4800, 0.07, 0.06),),
        repeats=(5, 9),
        phrase_gap_s=(0.5, 1.6),
        harmonics=(1.0, 0.25),
    ),
    # High trill: ~18 short falling notes per second around 6 kHz.
    Species(
        "slatri1",
        "Slate Triller",
        (_sweep(6400, 5600, 0.025, 0.03),),
        repeats=(25, 45),
        phrase_gap_s=(0.7, 1.8),
        pitch_ramp=0.97,
    ),
    # Slow arched and dipped syllables with overtones, 2-3.4 kHz.
    Species(
        "chevir1",
        "Chevron Vireo",
        (_chev(2000, 3200, 0.22, 0.14), _chev(3000, 2200, 0.18, 0.3)),
        repeats=(1, 3),
        phrase_gap_s=(0.8, 2.0),
        harmonics=(1.0, 0.4, 0.15),
    ),
    # Low "coo-COOO-coo" with a rich harmonic stack, ~0.9 kHz.
    Species(
        "lowcoo1",
        "Lowland Cooer",
        (
            _sweep(820, 900, 0.35, 0.15, amp=0.7),
            _sweep(920, 840, 0.6, 0.2, vib_hz=5, vib_depth=12),
            _sweep(860, 800, 0.3, 0.0, amp=0.6),
        ),
        repeats=(1, 2),
        phrase_gap_s=(0.8, 2.0),
        harmonics=(1.0, 0.7, 0.45, 0.25),
    ),
    # Long falling whistles, 8 -> 4.2 kHz.
    Species(
        "dessw1",
        "Descending Sweeper",
        (_sweep(8000, 4200, 0.35, 0.25),),
        repeats=(2, 4),
        phrase_gap_s=(0.6, 1.6),
    ),
    # Continuous warble: deep fast vibrato around 3.7 kHz.
    Species(
        "warfin1",
        "Warbling Finch",
        (
            _sweep(3600, 3900, 0.9, 0.05, vib_hz=28, vib_depth=700),
            _sweep(4200, 3400, 0.5, 0.0, vib_hz=22, vib_depth=500),
        ),
        repeats=(1, 2),
        phrase_gap_s=(0.6, 1.8),
        harmonics=(1.0, 0.3),
    ),
    # Buzzes (deep amplitude modulation) around 7 kHz.
    Species(
        "bursee1",
        "Burry Seedeater",
        (_sweep(7000, 7000, 0.45, 0.12, am_hz=140), _sweep(6600, 6800, 0.3, 0.25, am_hz=90)),
        repeats=(1, 3),
        phrase_gap_s=(0.7, 2.0),
    ),
    # Jumpy melody of short notes, 2.5-5 kHz.
    Species(
        "tinwre1",
        "Tinkling Wren",
        (
            _sweep(4400, 4300, 0.06, 0.04),
            _sweep(2600, 2500, 0.06, 0.04),
            _sweep(3800, 3700, 0.06, 0.04),
            _sweep(3000, 2900, 0.06, 0.04),
            _sweep(5000, 4800, 0.05, 0.04),
            _sweep(3300, 3200, 0.06, 0.06),
        ),
        repeats=(2, 4),
        phrase_gap_s=(0.7, 1.8),
        harmonics=(1.0, 0.2),
    ),
    # Two pure whistles, "fee-bee", 4.1 then 3.4 kHz.
    Species(
        "feechi1",
        "Fee-bee Chickadee",
        (_sweep(4100, 4000, 0.32, 0.08), _sweep(3450, 3350, 0.4, 0.0)),
        repeats=(1, 2),
        phrase_gap_s=(0.6, 1.5),
    ),
    # "Bouncing ball": accelerating, descending series of short notes, ~2.5 kHz.
    Species(
        "boutit1",
        "Bouncing Tit",
        (_sweep(3000, 2300, 0.05, 0.25),),
        repeats=(9, 15),
        phrase_gap_s=(0.8, 1.8),
        harmonics=(1.0, 0.3),
        pitch_ramp=0.8,
        tempo_ramp=0.15,
    ),
    # Very high thin seeps, 8.5-8.9 kHz (below the 22.05 kHz rate's Nyquist frequency).
    Species(
        "hisee1",
        "High Seeplet",
        (_sweep(8600, 8900, 0.18, 0.3), _sweep(8900, 8500, 0.15, 0.3)),
        repeats=(2, 4),
        phrase_gap_s=(0.5, 1.4),
    ),
    # Nasal notes: 1.25 kHz fundamental with six strong harmonics, ~5 per second.
    Species(
        "nasnut1",
        "Nasal Nuthatch",
        (_sweep(1250, 1300, 0.12, 0.09),),
        repeats=(4, 8),
        phrase_gap_s=(0.7, 1.8),
        harmonics=(1.0, 0.8, 0.6, 0.45, 0.3, 0.2),
    ),
)

# ---------------------------------------------------------------------------------------------
# Corpus layout

CODECS: dict[str, tuple[str, str, str]] = {
    # name: (soundfile format, subtype, file extension)
    "ogg": ("OGG", "VORBIS", "ogg"),
    "mp3": ("MP3", "MPEG_LAYER_III", "mp3"),
    "flac": ("FLAC", "PCM_16", "flac"),
    "wav16": ("WAV", "PCM_16", "wav"),
    "wavf": ("WAV", "FLOAT", "wav"),
}
# Balanced cycles from which each corpus draws its codecs, sample rates and channel counts (a
# seeded shuffle of the cycle repeated to the corpus size), so that even a small corpus holds
# every value and the proportions are fixed. mp3 is the slowest to encode, hence its share.
CODEC_CYCLE = ("ogg", "ogg", "ogg", "ogg", "mp3", "flac", "flac", "wav16", "wav16", "wavf")
RATE_CYCLE = (22050, 44100, 44100, 48000, 48000)
CHANNEL_CYCLE = (1, 1, 1, 2)

BLOCK_FRAMES = 65536
"""Frames per soundfile write call (one large Vorbis write segfaulted)."""
BATCH_ROWS = 100
"""Rows per Arrow record batch, as `datasets` writes audio datasets."""

FEATURES: dict = {
    "audio": {"decode": False, "_type": "Audio"},
    "label": None,  # ClassLabel, filled in by _features()
    "species": {"dtype": "string", "_type": "Value"},
    "common_name": {"dtype": "string", "_type": "Value"},
    "recording_id": {"dtype": "string", "_type": "Value"},
    "codec": {"dtype": "string", "_type": "Value"},
    "subtype": {"dtype": "string", "_type": "Value"},
    "sample_rate": {"dtype": "int32", "_type": "Value"},
    "channels": {"dtype": "int32", "_type": "Value"},
    "duration_s": {"dtype": "float32", "_type": "Value"},
}

SCHEMA = pa.schema(
    [
        ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ("label", pa.int64()),
        ("species", pa.string()),
        ("common_name", pa.string()),
        ("recording_id", pa.string()),
        ("codec", pa.string()),
        ("subtype", pa.string()),
        ("sample_rate", pa.int32()),
        ("channels", pa.int32()),
        ("duration_s", pa.float32()),
    ]
)


def _features() -> dict:
    feats = dict(FEATURES)
    feats["label"] = {"names": [s.code for s in SPECIES], "_type": "ClassLabel"}
    return feats


@dataclasses.dataclass(frozen=True)
class Recording:
    """Everything decided about one recording before synthesis; its audio follows from it."""

    index: int
    label: int
    codec: str
    sample_rate: int
    channels: int
    n_frames: int
    seed: int


def plan_corpus(n_recordings: int, seed: int, min_s: float, max_s: float) -> list[Recording]:
    """Rows in their final (shuffled) order; shard k is a contiguous slice, as in datasets."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))

    def balanced(cycle) -> np.ndarray:
        reps = -(-n_recordings // len(cycle))
        return rng.permutation(np.tile(np.asarray(cycle), reps)[:n_recordings])

    labels = balanced(np.arange(len(SPECIES)))
    codecs = balanced(CODEC_CYCLE)
    rates = balanced(RATE_CYCLE)
    channels = balanced(CHANNEL_CYCLE)
    # Log-uniform durations: more short recordings than long ones, as in real archives.
    durs = np.exp(rng.uniform(math.log(min_s), math.log(max_s), n_recordings))
    return [
        Recording(
            index=i,
            label=int(labels[i]),
            codec=str(codecs[i]),
            sample_rate=int(rates[i]),
            channels=int(channels[i]),
            n_frames=int(
                np.clip(round(durs[i] * rates[i]), math.ceil(min_s * rates[i]), max_s * rates[i])
            ),
            seed=seed,
        )
        for i in range(n_recordings)
    ]


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
    sp: Species,
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


def synthesize(plan: Recording, *, stems: bool = False) -> np.ndarray | dict:
    """Audio of one recording, float32 (frames, channels), peak in [0.25, 0.9].

    With `stems`, return instead the mono parts before mixing and scaling: `song`,
    `background` (other species), `noise`, and the drawn `snr_db`.
    """
    rng = np.random.default_rng(np.random.SeedSequence([plan.seed, plan.index, 0xB12D]))
    sr, nf = plan.sample_rate, plan.n_frames
    dur = nf / sr
    sp = SPECIES[plan.label]

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
    others = [i for i in range(len(SPECIES)) if i != plan.label]
    background = np.zeros(nf, np.float32)
    for j in rng.choice(others, size=int(rng.integers(1, 3)), replace=False):
        bsp = SPECIES[int(j)]
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


# ---------------------------------------------------------------------------------------------
# Encoding (with the two non-deterministic fields libsndfile writes pinned down)

_REVERSE_BITS = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def _ogg_crc(data: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04c11db7, MSB first, no init or final xor), via zlib.

    Ogg's CRC is zlib's with bits reflected and without the 0xffffffff pre/post conditioning;
    the conditioning's contribution is the CRC of as many zero bytes.
    """
    r = data.translate(_REVERSE_BITS)
    reflected = zlib.crc32(r) ^ zlib.crc32(bytes(len(r)))
    return int(f"{reflected:032b}"[::-1], 2)


def _fix_ogg_serial(data: bytes, serial: int) -> bytes:
    """Set every page's stream serial number (libsndfile draws a time-seeded one)."""
    buf = bytearray(data)
    pos = 0
    while pos < len(buf):
        if buf[pos : pos + 4] != b"OggS":
            raise ValueError(f"not an Ogg page at byte {pos}")
        n_segs = buf[pos + 26]
        body = sum(buf[pos + 27 : pos + 27 + n_segs])
        end = pos + 27 + n_segs + body
        struct.pack_into("<I", buf, pos + 14, serial)
        struct.pack_into("<I", buf, pos + 22, 0)
        struct.pack_into("<I", buf, pos + 22, _ogg_crc(bytes(buf[pos:end])))
        pos = end
    return bytes(buf)


def _fix_wav_peak(data: bytes) -> bytes:
    """Zero the timestamp of a WAV PEAK chunk (libsndfile writes the wall clock there)."""
    buf = bytearray(data)
    pos = 12
    while pos + 8 <= len(buf):
        cid = bytes(buf[pos : pos + 4])
        size = struct.unpack_from("<I", buf, pos + 4)[0]
        if cid == b"PEAK":
            struct.pack_into("<I", buf, pos + 12, 0)  # after the 4-byte version
        pos += 8 + size + (size & 1)
    return bytes(buf)


def encode(x: np.ndarray, sample_rate: int, codec: str, serial: int = 0) -> bytes:
    """Encode float32 (frames, channels) audio; the bytes depend only on the arguments."""
    fmt, subtype, _ = CODECS[codec]
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", sample_rate, x.shape[1], format=fmt, subtype=subtype) as f:
        for i in range(0, len(x), BLOCK_FRAMES):
            f.write(x[i : i + BLOCK_FRAMES])
    data = buf.getvalue()
    if fmt == "OGG":
        data = _fix_ogg_serial(data, serial)
    elif fmt == "WAV":
        data = _fix_wav_peak(data)
    return data


def _make_row(plan: Recording) -> dict:
    x = synthesize(plan)
    sp = SPECIES[plan.label]
    rec_id = f"demo-{plan.seed}-{plan.index:06d}"
    _, subtype, ext = CODECS[plan.codec]
    serial = zlib.crc32(rec_id.encode())
    return {
        "audio": {
            "bytes": encode(x, plan.sample_rate, plan.codec, serial),
            "path": f"{rec_id}.{ext}",
        },
        "label": plan.label,
        "species": sp.code,
        "common_name": sp.name,
        "recording_id": rec_id,
        "codec": ext,
        "subtype": subtype,
        "sample_rate": plan.sample_rate,
        "channels": plan.channels,
        "duration_s": plan.n_frames / plan.sample_rate,
    }


# ---------------------------------------------------------------------------------------------
# Writing


def _shard_sizes(n: int, k: int) -> list[int]:
    """Contiguous shard sizes as `Dataset.shard(k, i, contiguous=True)` makes them."""
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def _rows(plans: list[Recording], workers: int):
    if workers <= 1:
        yield from map(_make_row, plans)
        return
    # spawn, not fork: the caller may hold threads (JAX, pytest plugins).
    ctx = multiprocessing.get_context("spawn")
    ex = concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx)
    try:
        yield from ex.map(_make_row, plans)
    finally:
        # On an error or early close, do not wait for the rest of the corpus.
        ex.shutdown(wait=True, cancel_futures=True)


def write(
    out_dir: str | os.PathLike,
    *,
    n_recordings: int = 192,
    n_shards: int = 4,
    seed: int = 0,
    min_s: float = 5.0,
    max_s: float = 60.0,
    workers: int | None = None,
    overwrite: bool = False,
    verbose: bool = False,
) -> dict:
    """Write the corpus to `out_dir` atomically and return a summary.

    The summary has `out_dir`, `shards` (paths), `rows_per_shard`, `n_recordings`, `species`
    (codes, the ClassLabel names), `species_names`, `label_counts`, `codec_counts`,
    `total_bytes` (of the shard files) and `seconds`. `workers` (default: up to 2 processes)
    changes only the speed, never the bytes. An existing non-empty `out_dir` is an error unless
    `overwrite`.
    """
    if n_recordings < 1 or not 1 <= n_shards <= n_recordings:
        raise ValueError(f"need 1 <= n_shards <= n_recordings, got {n_shards}, {n_recordings}")
    if not 0 < min_s <= max_s:
        raise ValueError(f"need 0 < min_s <= max_s, got {min_s}, {max_s}")
    out = pathlib.Path(out_dir)
    if out.exists() and not overwrite and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not empty (pass overwrite=True)")
    if workers is None:
        workers = min(2, os.cpu_count() or 1)

    t_start = time.perf_counter()
    plans = plan_corpus(n_recordings, seed, min_s, max_s)
    sizes = _shard_sizes(n_recordings, n_shards)
    names = [f"data-{i:05d}-of-{n_shards:05d}.arrow" for i in range(n_shards)]
    features = _features()
    schema = SCHEMA.with_metadata({"huggingface": json.dumps({"info": {"features": features}})})

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    codec_counts: dict[str, int] = {}
    label_counts = [0] * len(SPECIES)
    rows = _rows(plans, workers)
    try:
        done = 0
        for name, size in zip(names, sizes, strict=True):
            with pa.OSFile(str(tmp / name), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
                batch: list[dict] = []
                for _ in range(size):
                    row = next(rows)
                    batch.append(row)
                    key = row["codec"] if row["codec"] != "wav" else f"wav/{row['subtype']}"
                    codec_counts[key] = codec_counts.get(key, 0) + 1
                    label_counts[row["label"]] += 1
                    done += 1
                    if len(batch) == BATCH_ROWS:
                        w.write_batch(pa.RecordBatch.from_pylist(batch, schema=schema))
                        batch = []
                if batch:
                    w.write_batch(pa.RecordBatch.from_pylist(batch, schema=schema))
            if verbose:
                print(f"  {name}: {size} rows ({done}/{n_recordings})", flush=True)

        fingerprint = hashlib.sha256(
            json.dumps([n_recordings, n_shards, seed, min_s, max_s, features]).encode()
        ).hexdigest()[:16]
        state = {
            "_data_files": [{"filename": n} for n in names],
            "_fingerprint": fingerprint,
            "_format_columns": None,
            "_format_kwargs": {},
            "_format_type": None,
            "_output_all_columns": False,
            "_split": None,
        }
        info = {
            "citation": "",
            "description": (
                f"birdjepa synthetic bird-song demo corpus: {n_recordings} recordings of "
                f"{len(SPECIES)} species, seed {seed}"
            ),
            "features": features,
            "homepage": "",
            "license": "",
        }
        (tmp / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
        (tmp / "dataset_info.json").write_text(json.dumps(info, indent=2))

        if out.exists():
            if out.is_dir() and not any(out.iterdir()):
                out.rmdir()
            else:
                trash = out.parent / f".{out.name}.old-{os.getpid()}"
                os.rename(out, trash)
                os.rename(tmp, out)
                shutil.rmtree(trash) if trash.is_dir() else trash.unlink()
        if not out.exists():
            os.rename(tmp, out)
    finally:
        rows.close()
        if tmp.exists():
            shutil.rmtree(tmp)

    shards = [out / n for n in names]
    return {
        "out_dir": str(out),
        "shards": [str(p) for p in shards],
        "rows_per_shard": sizes,
        "n_recordings": n_recordings,
        "species": [s.code for s in SPECIES],
        "species_names": [s.name for s in SPECIES],
        "label_counts": label_counts,
        "codec_counts": dict(sorted(codec_counts.items())),
        "total_bytes": sum(p.stat().st_size for p in shards),
        "seconds": time.perf_counter() - t_start,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m birdjepa.demo_data", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("out_dir")
    p.add_argument("--n-recordings", type=int, default=192)
    p.add_argument("--n-shards", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-s", type=float, default=5.0, help="shortest recording, seconds")
    p.add_argument("--max-s", type=float, default=60.0, help="longest recording, seconds")
    p.add_argument("--workers", type=int, default=None, help="processes (default: up to 2)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    a = p.parse_args(argv)
    print(
        f"writing {a.n_recordings} recordings of {len(SPECIES)} species in {a.n_shards} shards "
        f"to {a.out_dir}",
        flush=True,
    )
    try:
        s = write(
            a.out_dir,
            n_recordings=a.n_recordings,
            n_shards=a.n_shards,
            seed=a.seed,
            min_s=a.min_s,
            max_s=a.max_s,
            workers=a.workers,
            overwrite=a.overwrite,
            verbose=True,
        )
    except (FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    codecs = ", ".join(f"{k} {v}" for k, v in s["codec_counts"].items())
    print(
        f"wrote {s['n_recordings']} recordings ({codecs}), {s['total_bytes'] / 1e6:.1f} MB "
        f"in {len(s['shards'])} shards, in {s['seconds']:.1f} s\n"
        f"species: {', '.join(s['species'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
