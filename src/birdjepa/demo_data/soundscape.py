"""A soundscape test split in BirdSet's shape: 5 s segments of long mixtures, multilabel.

Each soundscape is `n_segments * segment_s` seconds of coloured background noise under bouts of
song of a few demo species (0 to `max_species`, the same `catalogue.SPECIES` as the focal
corpus), each bout at a random offset and level (SNR drawn per bout), so segments hold zero, one
or several species. The soundscape is cut into consecutive `segment_s` segments, each encoded
separately (codec and rate dealt per soundscape from the corpus's balanced cycles, mono).

Columns, as BirdSet's `test_5s` split names them: `audio` (Audio, decode=False), the multilabel
`ebird_code_multilabel` (list<int64>, HF `Sequence(ClassLabel)`; empty for a segment without
birds), `start_time`/`end_time` (seconds within the soundscape), `filepath` (the soundscape's
file name), plus `soundscape_id`, `codec` and `sample_rate`. A species is labelled in a segment
when at least `min_overlap_s` of one of its syllables (or all of a shorter one) falls inside it.
"""

import dataclasses
import json
import os
import pathlib
import time
import zlib

import numpy as np
import pyarrow as pa

import birdjepa.common.outputs as outputs
import birdjepa.demo_data.catalogue as catalogue
import birdjepa.demo_data.codecs as codecs
import birdjepa.demo_data.synth as synth
import birdjepa.demo_data.writer as writer

LABEL_COLUMN = "ebird_code_multilabel"


@dataclasses.dataclass(frozen=True)
class SoundscapePlan:
    """Everything decided about one soundscape before synthesis."""

    index: int
    seed: int
    codec: str
    sample_rate: int
    n_segments: int
    segment_s: float
    species: tuple[int, ...]
    """Species singing somewhere in it (possibly none)."""


def _features() -> dict:
    names = [s.code for s in catalogue.SPECIES]
    return {
        "audio": {"decode": False, "_type": "Audio"},
        # What datasets (< 4) writes for Sequence(ClassLabel); datasets >= 4 reads it as List.
        LABEL_COLUMN: {"feature": {"names": names, "_type": "ClassLabel"}, "_type": "Sequence"},
        "start_time": {"dtype": "float64", "_type": "Value"},
        "end_time": {"dtype": "float64", "_type": "Value"},
        "filepath": {"dtype": "string", "_type": "Value"},
        "soundscape_id": {"dtype": "string", "_type": "Value"},
        "codec": {"dtype": "string", "_type": "Value"},
        "sample_rate": {"dtype": "int32", "_type": "Value"},
    }


SCHEMA = pa.schema([
    ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
    (LABEL_COLUMN, pa.list_(pa.int64())),
    ("start_time", pa.float64()),
    ("end_time", pa.float64()),
    ("filepath", pa.string()),
    ("soundscape_id", pa.string()),
    ("codec", pa.string()),
    ("sample_rate", pa.int32()),
])


def plan_soundscapes(n_soundscapes: int, seed: int, *, n_segments: int = 12,
                     segment_s: float = 5.0, max_species: int = 4) -> list[SoundscapePlan]:
    """One plan per soundscape; codecs and rates from balanced shuffled cycles."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x50DC]))

    def balanced(cycle) -> np.ndarray:
        reps = -(-n_soundscapes // len(cycle))
        return rng.permutation(np.tile(np.asarray(cycle), reps)[:n_soundscapes])

    codec_cycle, rates = balanced(catalogue.CODEC_CYCLE), balanced(catalogue.RATE_CYCLE)
    plans, used = [], np.zeros(len(catalogue.SPECIES))
    for i in range(n_soundscapes):
        # One soundscape in ten has no bird at all; species used less so far are likelier.
        n_sp = 0 if rng.random() < 0.1 else int(rng.integers(1, max_species + 1))
        p = 1.0 / (1.0 + used) ** 2
        sp = rng.choice(len(catalogue.SPECIES), size=n_sp, replace=False, p=p / p.sum())
        used[sp] += 1
        plans.append(SoundscapePlan(i, seed, str(codec_cycle[i]), int(rates[i]), n_segments,
                                    segment_s, tuple(sorted(int(s) for s in sp))))
    return plans


def _bouts(plan: SoundscapePlan, sp_index: int, n_frames: int, noise_rms: float,
           out: np.ndarray, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Render 2-4 bouts (1-3 phrases each) of one species into `out`; (start, n) samples of
    every syllable kept."""
    sp = catalogue.SPECIES[sp_index]
    sr, dur = plan.sample_rate, n_frames / plan.sample_rate
    extents = []
    for _ in range(int(rng.integers(2, 5))):
        ev = synth._Events()
        snr_db = rng.uniform(0.0, 18.0)
        amp = noise_rms * 10 ** (snr_db / 20) / 0.7  # a unit syllable's rms is ~0.7
        t = rng.uniform(0.0, dur - 1.0)
        pitch, tempo = rng.uniform(0.94, 1.06), rng.uniform(0.88, 1.12)
        for _ in range(int(rng.integers(1, 4))):
            t = synth._phrase(ev, sp, t, sr, pitch, tempo, amp, rng)
            t += rng.uniform(*sp.phrase_gap_s) * tempo
        synth._render(ev, sp.harmonics, n_frames, sr, out, rng)
        extents += [(s, n) for s, n in zip(ev.start, ev.n, strict=True) if s + n <= n_frames]
    return extents


def synthesize(plan: SoundscapePlan, *, min_overlap_s: float = 0.05):
    """(mono float32 audio, per-segment label lists) of one soundscape."""
    rng = np.random.default_rng(np.random.SeedSequence([plan.seed, plan.index, 0x55C9]))
    sr, seg = plan.sample_rate, int(round(plan.segment_s * plan.sample_rate))
    n_frames = seg * plan.n_segments
    noise_rms = rng.uniform(0.02, 0.05)
    x = synth._coloured_noise(rng, n_frames, sr, rng.uniform(1.0, 2.0)) * np.float32(noise_rms)
    labels: list[set[int]] = [set() for _ in range(plan.n_segments)]
    min_overlap = int(min_overlap_s * sr)
    for c in plan.species:
        for start, n in _bouts(plan, c, n_frames, noise_rms, x, rng):
            for j in range(start // seg, min((start + n - 1) // seg, plan.n_segments - 1) + 1):
                if min(start + n, (j + 1) * seg) - max(start, j * seg) >= min(n, min_overlap):
                    labels[j].add(c)
    x *= np.float32(rng.uniform(0.25, 0.9) / (float(np.abs(x).max()) or 1.0))
    return x.astype(np.float32), [sorted(s) for s in labels]


def _rows(plan: SoundscapePlan):
    x, labels = synthesize(plan)
    sid = f"demo-soundscape-{plan.seed}-{plan.index:04d}"
    _, _, ext = catalogue.CODECS[plan.codec]
    seg = int(round(plan.segment_s * plan.sample_rate))
    for j, lab in enumerate(labels):
        piece = x[j * seg : (j + 1) * seg, None]
        start = j * plan.segment_s
        yield {
            "audio": {"bytes": codecs.encode(piece, plan.sample_rate, plan.codec,
                                             zlib.crc32(f"{sid}-{j}".encode())),
                      "path": f"{sid}_{start:g}_{start + plan.segment_s:g}.{ext}"},
            LABEL_COLUMN: lab,
            "start_time": start,
            "end_time": start + plan.segment_s,
            "filepath": f"{sid}.{ext}",
            "soundscape_id": sid,
            "codec": ext,
            "sample_rate": plan.sample_rate,
        }


def write(out_dir: str | os.PathLike, *, n_soundscapes: int = 24, n_segments: int = 12,
          segment_s: float = 5.0, max_species: int = 4, n_shards: int = 1, seed: int = 2,
          overwrite: bool = False) -> dict:
    """Write the soundscape split (HF `save_to_disk` format) atomically; return a summary with
    `out_dir`, `shards`, `n_segments`, `n_empty` (segments without birds), `label_counts`
    (segments per species), `species` and `seconds`."""
    if n_soundscapes < 1 or n_segments < 1 or not 1 <= n_shards <= n_soundscapes:
        raise ValueError(f"need n_soundscapes >= 1, n_segments >= 1 and 1 <= n_shards <= "
                         f"n_soundscapes, got {n_soundscapes}, {n_segments}, {n_shards}")
    out = pathlib.Path(out_dir)
    writer.check_out_dir(out, overwrite)
    t0 = time.perf_counter()
    plans = plan_soundscapes(n_soundscapes, seed, n_segments=n_segments, segment_s=segment_s,
                             max_species=max_species)
    features = _features()
    schema = SCHEMA.with_metadata(
        {"huggingface": json.dumps({"info": {"features": features}})})
    per_shard = writer._shard_sizes(n_soundscapes, n_shards)
    names = [f"data-{i:05d}-of-{n_shards:05d}.arrow" for i in range(n_shards)]
    out.parent.mkdir(parents=True, exist_ok=True)
    counts, n_rows, n_empty, it = [0] * len(catalogue.SPECIES), 0, 0, iter(plans)
    with outputs.replacing_dir(out, last="state.json") as tmp:
        for name, k in zip(names, per_shard, strict=True):
            with pa.OSFile(str(tmp / name), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
                for _ in range(k):
                    rows = list(_rows(next(it)))
                    w.write_batch(pa.RecordBatch.from_pylist(rows, schema=schema))
                    for r in rows:
                        n_rows, n_empty = n_rows + 1, n_empty + (not r[LABEL_COLUMN])
                        for c in r[LABEL_COLUMN]:
                            counts[c] += 1
        writer._write_metadata(
            tmp, names, features,
            fingerprint_of=["soundscapes", n_soundscapes, n_segments, segment_s, max_species,
                            n_shards, seed, features],
            description=f"birdjepa synthetic soundscapes: {n_rows} segments of {segment_s:g} s "
                        f"from {n_soundscapes} soundscapes, seed {seed}")
        writer.record_all(tmp)
    return {"out_dir": str(out), "shards": [str(out / n) for n in names], "n_segments": n_rows,
            "n_empty": n_empty, "label_counts": counts,
            "species": [s.code for s in catalogue.SPECIES],
            "mean_labels": sum(counts) / n_rows, "seconds": time.perf_counter() - t0}
