"""Raven Pro selection tables from `python -m birdjepa.predict ... --format raven`: one
tab-separated row per detection, with the columns Raven opens (`Selection`, `View`, `Channel`,
`Begin Time (s)`, `End Time (s)`, `Low Freq (Hz)`, `High Freq (Hz)`) plus `Species`,
`Confidence`, `Class Index` and `Padded (s)` (seconds of zero padding past the recording's end
in the detection's window: the last window of a recording is padded, and says so). The band is
what the model heard of the recording: the fbank's lowest frequency (Kaldi's low_freq, 20 Hz,
which `birdjepa.data.audio.clip` uses) to the lower of the model's and the recording's Nyquist
frequency (an 8 kHz recording resampled to a 32 kHz model holds nothing above 4 kHz).

One `<recording>.selections.txt` per recording (`write_per_recording`, header only when a
recording has no detection): times within the recording. Or one combined table over every
recording read (`write_combined`), as BirdNET-Analyzer writes it: Raven opens a table of
several files as one file sequence, so `Begin Time (s)` / `End Time (s)` are times on that
sequence (the recordings in path order, each starting where the one before ended: its offset is
the sum of the durations, from their headers, of the recordings before it), `File Offset (s)`
the start within the recording and `Begin Path` the recording. Beside it, `<table>.list.txt`
lists the recordings in sequence order, one absolute path per line (BirdNET's list file: open
it in Raven as the file sequence the table is placed on); recordings without detections are in
it and take their place in the sequence."""

import hashlib
import os
import pathlib

import pyarrow as pa

import birdjepa.common.outputs as outputs

LOW_FREQ_HZ = 20.0
"""The fbank's lowest mel edge (Kaldi's low_freq default; the transform passes no other)."""
COLUMNS = ("Selection", "View", "Channel", "Begin Time (s)", "End Time (s)", "Low Freq (Hz)",
           "High Freq (Hz)")
DETECTION = ("Species", "Confidence", "Class Index", "Padded (s)")
COMBINED = ("Begin Path", "File Offset (s)")
LIST_SUFFIX = ".list.txt"
"""What replaces the combined table's suffix in the name of its file list."""


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.6f}".rstrip("0").rstrip(".") if v == v else "nan"
    return " ".join(str(v).split())  # no tab or newline inside a cell


def band_top(model_rate: int, rates: dict[str, int]) -> dict[str, float]:
    """{recording: its selections' High Freq (Hz)}: the lower of the model's and the
    recording's own Nyquist frequency (`rates`: recording -> its sample rate)."""
    return {f: min(float(model_rate), float(r)) / 2.0 for f, r in rates.items()}


def _lines(det: dict[str, pa.Array], idx: list[int], high_hz: dict[str, float],
           offsets: dict[str, float] | None) -> list[str]:
    """Header and rows `idx`; `high_hz` (file -> the band's top, `band_top`); with `offsets`
    (file -> sequence offset) the combined layout."""
    cols = COLUMNS + DETECTION + (COMBINED if offsets is not None else ())
    out = ["\t".join(cols)]
    start, end = det["start_s"].to_pylist(), det["end_s"].to_pylist()
    cls, conf = det["class"].to_pylist(), det["confidence"].to_pylist()
    k, files = det["class_index"].to_pylist(), det["file"].to_pylist()
    padded = det["padded_s"].to_pylist()
    for n, i in enumerate(idx, 1):
        at = 0.0 if offsets is None else offsets[files[i]]
        row = [n, "Spectrogram 1", 1, at + float(start[i]), at + float(end[i]), LOW_FREQ_HZ,
               high_hz[files[i]], cls[i], float(conf[i]), k[i], float(padded[i])]
        cells = list(map(_cell, row))
        if offsets is not None:  # the path as it is: whitespace runs are part of a name
            cells += [os.path.abspath(files[i]), _cell(float(start[i]))]
        out.append("\t".join(cells))
    return out


def list_path(path: str | os.PathLike) -> pathlib.Path:
    """The file list beside combined table `path` (`detections.txt` -> `detections.list.txt`)."""
    path = pathlib.Path(path)
    return path.with_name(path.name.rsplit(".", 1)[0] + LIST_SUFFIX)


def sequence(durations: dict[str, float]) -> dict[str, float]:
    """{recording: its offset on the file sequence}: recordings in absolute-path order, each
    offset the sum of the durations of the recordings before it."""
    offsets, at = {}, 0.0
    for f in sorted(durations, key=os.path.abspath):
        offsets[f] = at
        at += float(durations[f])
    return offsets


def write_combined(det: dict[str, pa.Array], path: str | os.PathLike,
                   high_hz: dict[str, float], durations: dict[str, float]
                   ) -> tuple[pathlib.Path, pathlib.Path]:
    """Every detection in one table on the file sequence of `durations` (recording -> seconds,
    every recording read), ordered by sequence time; and its file list. Returns both paths.
    `high_hz`: recording -> its High Freq (`band_top`)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    offsets = sequence(durations)
    files, start = det["file"].to_pylist(), det["start_s"].to_pylist()
    missing = sorted(set(files) - set(offsets))
    if missing:
        raise ValueError(f"raven: detections of {missing[0]!r}, a recording without a duration")
    idx = sorted(range(len(files)), key=lambda i: (offsets[files[i]] + start[i], files[i]))
    outputs.write_text(path, "\n".join(_lines(det, idx, high_hz, offsets)) + "\n")
    listed = list_path(path)
    outputs.write_text(listed, "".join(os.path.abspath(f) + "\n" for f in offsets))
    outputs.record(path, listed)
    return path, listed


def check_paths(files: list[str]) -> None:
    """Before any compute: every recording's path can stand in a tab-separated cell (`Begin
    Path`, the file list): no tab, newline or carriage return in it."""
    for f in files:
        path = os.path.abspath(f)
        if any(c in path for c in "\t\n\r"):
            raise ValueError(f"--format raven: expected recording paths without tabs or line "
                             f"breaks (Raven reads a tab-separated table), got {path!r}; "
                             "rename the file")


def names(files: list[str]) -> dict[str, str]:
    """A distinct table name per recording: its stem; where recordings share a stem, their
    last folders, stem and suffix; where names still coincide (`a/b_c/x.wav`, `a_b/c/x.wav`;
    a stem equal to another recording's name), a hash of the absolute path appended."""
    stems = [pathlib.Path(f).stem for f in files]
    out = {}
    for f, s in zip(files, stems, strict=True):
        if stems.count(s) > 1:
            s = "_".join(pathlib.Path(os.path.abspath(f)).parts[-3:])
        out[f] = s
    taken = list(out.values())
    for f, s in out.items():
        if taken.count(s) > 1:
            out[f] = f"{s}-{hashlib.sha1(os.path.abspath(f).encode()).hexdigest()[:10]}"
    assert len(set(out.values())) == len(out), out  # distinct absolute paths, distinct hashes
    return out


def write_per_recording(det: dict[str, pa.Array], out_dir: str | os.PathLike,
                        recordings: list[str], high_hz: dict[str, float],
                        table_names: dict[str, str]) -> list[pathlib.Path]:
    """One `<name>.selections.txt` per recording in `recordings` (all that were read), named by
    `table_names` (`names` of every SOURCE recording, as checked before any compute: the names
    of those read never depend on which others failed)."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files, start = det["file"].to_pylist(), det["start_s"].to_pylist()
    groups: dict[str, list[int]] = {}
    for i, f in enumerate(files):
        groups.setdefault(f, []).append(i)
    written = []
    for f in dict.fromkeys(recordings):
        idx = sorted(groups.get(f, []), key=lambda i: start[i])
        path = out_dir / f"{table_names[f]}.selections.txt"
        outputs.write_text(path, "\n".join(_lines(det, idx, high_hz, None)) + "\n")
        outputs.record(path)
        written.append(path)
    return written
