"""Raven Pro selection tables from `python -m birdjepa.predict ... --format raven`: one
tab-separated row per detection, with the columns Raven opens (`Selection`, `View`, `Channel`,
`Begin Time (s)`, `End Time (s)`, `Low Freq (Hz)`, `High Freq (Hz)`) plus `Species`,
`Confidence` and `Class Index`. Times are within the recording. The band is the model's: the
fbank's lowest frequency (Kaldi's low_freq, 20 Hz, which `birdjepa.data.audio.clip` uses) to the
Nyquist frequency of the model's sample rate. One combined table (`write_combined`, with
`Begin Path` and `File Offset (s)` so Raven finds each recording) or one
`<recording>.selections.txt` per recording (`write_per_recording`, header only when a recording
has no detection)."""

import os
import pathlib

import pyarrow as pa

LOW_FREQ_HZ = 20.0
"""The fbank's lowest mel edge (Kaldi's low_freq default; the transform passes no other)."""
COLUMNS = ("Selection", "View", "Channel", "Begin Time (s)", "End Time (s)", "Low Freq (Hz)",
           "High Freq (Hz)")
DETECTION = ("Species", "Confidence", "Class Index")
COMBINED = ("Begin Path", "File Offset (s)")


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.6f}".rstrip("0").rstrip(".") if v == v else "nan"
    return " ".join(str(v).split())  # no tab or newline inside a cell


def _lines(det: dict[str, pa.Array], idx: list[int], sample_rate: int,
           combined: bool) -> list[str]:
    cols = COLUMNS + DETECTION + (COMBINED if combined else ())
    out = ["\t".join(cols)]
    start, end = det["start_s"].to_pylist(), det["end_s"].to_pylist()
    cls, conf = det["class"].to_pylist(), det["confidence"].to_pylist()
    k, files = det["class_index"].to_pylist(), det["file"].to_pylist()
    for n, i in enumerate(idx, 1):
        row = [n, "Spectrogram 1", 1, float(start[i]), float(end[i]), LOW_FREQ_HZ,
               sample_rate / 2.0, cls[i], float(conf[i]), k[i]]
        if combined:
            row += [os.path.abspath(files[i]), float(start[i])]
        out.append("\t".join(map(_cell, row)))
    return out


def write_combined(det: dict[str, pa.Array], path: str | os.PathLike, sample_rate: int
                   ) -> pathlib.Path:
    """Every detection in one table, ordered by file then time."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    files, start = det["file"].to_pylist(), det["start_s"].to_pylist()
    idx = sorted(range(len(files)), key=lambda i: (files[i], start[i]))
    path.write_text("\n".join(_lines(det, idx, sample_rate, True)) + "\n")
    return path


def names(files: list[str]) -> dict[str, str]:
    """A distinct table name per recording: its stem, with its parent folders when two
    recordings share a stem."""
    stems = [pathlib.Path(f).stem for f in files]
    out = {}
    for f, s in zip(files, stems, strict=True):
        if stems.count(s) > 1:
            s = "_".join(pathlib.Path(os.path.abspath(f)).with_suffix("").parts[-3:])
        out[f] = s
    return out


def write_per_recording(det: dict[str, pa.Array], out_dir: str | os.PathLike,
                        recordings: list[str], sample_rate: int) -> list[pathlib.Path]:
    """One `<recording>.selections.txt` per recording in `recordings` (all that were read)."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files, start = det["file"].to_pylist(), det["start_s"].to_pylist()
    groups: dict[str, list[int]] = {}
    for i, f in enumerate(files):
        groups.setdefault(f, []).append(i)
    written = []
    for f, name in names(list(dict.fromkeys(recordings))).items():
        idx = sorted(groups.get(f, []), key=lambda i: start[i])
        path = out_dir / f"{name}.selections.txt"
        path.write_text("\n".join(_lines(det, idx, sample_rate, False)) + "\n")
        written.append(path)
    return written
