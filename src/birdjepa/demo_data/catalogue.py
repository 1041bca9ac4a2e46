"""The demo corpus's catalogue: made-up species (eBird-style codes, song patterns), the codecs,
rates and channel counts a corpus is dealt, and `plan_corpus`, which decides every recording
before any audio is made."""

import dataclasses
import math

import numpy as np

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


def with_noise(plans: list[Recording], n_noise: int, seed: int, min_s: float,
               max_s: float) -> list[Recording]:
    """`plans` and `n_noise` recordings of background noise alone (plan label -1), in a shuffled
    order. Each keeps its own plan (a bird recording its audio; a noise one its seed offset)."""
    extra = plan_corpus(n_noise, seed + 0x401CE, min_s, max_s)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x401CE]))
    noise = [dataclasses.replace(p, label=-1) for p in extra]
    both = [*plans, *noise]
    return [both[int(i)] for i in rng.permutation(len(both))]
