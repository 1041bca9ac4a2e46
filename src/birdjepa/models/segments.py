"""`python -m birdjepa.predict ... --segments DIR`: every detection cut out of its recording as
an audio clip to review, BirdNET-Analyzer's `segments` layout: `DIR/<class>/<confidence>_
<recording>_<start>s.wav` (confidence to 3 decimals, start in seconds to 1), the recording's
own samples over the detection's [start_s, end_s] at its own sample rate (mono float WAV: what
the model heard before resampling, exactly). Recordings are decoded once each, one at a time.
DIR is new, empty, or holds only clips an earlier `--segments` wrote (its ledger): a user's
file there is never replaced."""

import os
import pathlib

import numpy as np
import pyarrow as pa
import soundfile

import birdjepa.common.outputs as outputs
import birdjepa.data.audio
import birdjepa.models.raven as raven


def check_dir(out_dir: str | os.PathLike) -> None:
    """Before any compute: DIR is a new or empty directory, or every file under it is a clip
    an earlier run wrote (recorded, unchanged)."""
    d = pathlib.Path(out_dir)
    if d.exists() and not d.is_dir():
        raise ValueError(f"--segments: expected a directory, got {str(d)!r}, a file")
    foreign = [p for p in d.rglob("*") if p.is_file() and p.name != outputs.LEDGER
               and not outputs.ours(p)] if d.is_dir() else []
    if foreign:
        raise ValueError(f"--segments: expected a new or empty directory (or one of earlier "
                         f"clips), got {str(d)!r}, which holds {len(foreign)} other file(s), "
                         f"first {str(foreign[0])!r}")


def class_dir(name: str) -> str:
    """A class name as one directory name (no separator, not empty, not a dot name)."""
    safe = "".join("_" if c in "/\\\0" else c for c in str(name)).strip()
    return safe if safe not in ("", ".", "..") else f"class_{safe or 'empty'}"


def write(det: dict[str, pa.Array], out_dir: str | os.PathLike, files: list[str]) -> int:
    """One clip per detection row of `det` (file, start_s, end_s, class, confidence) under
    `out_dir`; `files`: every SOURCE recording (their distinct names, `raven.names`). Returns
    the number of clips written."""
    out_dir = pathlib.Path(out_dir)
    names = raven.names(sorted(files))
    by_file: dict[str, list[int]] = {}
    for i, f in enumerate(det["file"].to_pylist()):
        by_file.setdefault(f, []).append(i)
    start, end = det["start_s"].to_pylist(), det["end_s"].to_pylist()
    cls, conf = det["class"].to_pylist(), det["confidence"].to_pylist()
    n = 0
    for f, idx in by_file.items():
        wave, sr = birdjepa.data.audio.decode(f)
        written = []
        for i in idx:
            a, b = int(round(start[i] * sr)), int(round(end[i] * sr))
            d = out_dir / class_dir(cls[i])
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"{conf[i]:.3f}_{names[f]}_{start[i]:.1f}s.wav"
            with outputs.replacing(path) as tmp:
                soundfile.write(tmp, np.asarray(wave[a:b], np.float32), sr, subtype="FLOAT",
                                format="WAV")
            written.append(path)
        outputs.record(*written)
        n += len(written)
    return n
