"""Path-only Arrow shards from audio files: `python -m birdjepa.sources from_files SRC... --out_dir DST`.

`datasets` 5.x embeds the audio bytes on `save_to_disk` (even with `Audio(decode=False)`), so it
no longer writes path-only data. This writes what the loader reads as path-only: one Arrow IPC
stream file `DST/data-00000-of-00001.arrow` whose `audio` column is the Hugging Face Audio struct
`{"bytes": null, "path": PATH}` (absolute paths, or relative to DST with `relative=True`, which
resolve against the shard's directory), a `file` column (the path as stored, so a relative
dataset carries no stale absolute path into `embed` / `predict` output), and with
`label_from="parent"` a `label` column (`ClassLabel`: the sorted names of the files' parent directories, the usual
one-folder-per-species layout), with the HF features metadata so `class_names` finds them, and `state.json` /
`dataset_info.json` beside it, so that `datasets.load_from_disk` opens DST too. `--label_from
FILE.csv` takes multilabel rows from a CSV, `--negatives DIR` adds rows without a class, and
every labelled dataset has a `labels` list column (`write`).

The command line reads every file's header first (`readable`): a file that is not audio (a
text file named `.wav`), is empty or holds no audio frames is skipped, and the skips are one
warning line naming them; none readable is an error (exit status 2). It prints the rows and,
with `--label_from parent`, the rows per class.
"""

import collections
import csv
import json
import os
import pathlib
import sys

import pyarrow as pa

import birdjepa.common.cli_args as cli_args
import birdjepa.common.errors as errors
import birdjepa.common.outputs as outputs
import birdjepa.data.audio
import birdjepa.data.from_annotations
import birdjepa.data.paths as paths

AUDIO = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff")
HEAD_BYTES = 1 << 20
"""Bytes of a file read to check its header (the whole file only when its header lies beyond
them, e.g. behind a large cover-art block)."""
SHOWN = 5
"""Skipped files named in the warning (the rest are counted)."""


def audio_files(sources: list[str]) -> list[pathlib.Path]:
    """Audio files named or found (recursively, regular files only) under directories."""
    out, odd = [], []
    for s in map(pathlib.Path, sources):
        if s.is_dir():
            named = sorted(p for p in s.rglob("*") if p.suffix.lower() in SUFFIXES)
            out += [p for p in named if p.is_file()]
            odd += [p for p in named if not p.is_file()]
        elif s.is_file():
            out.append(s)
        else:
            raise FileNotFoundError(f"SRC: expected an audio file or a directory, got {str(s)!r}")
    if odd:  # a FIFO, a dangling link, a directory named like audio: never opened
        print(f"warning: skipped {len(odd)} entries named like audio that are not regular "
              f"files: {', '.join(map(str, odd[:SHOWN]))}"
              + (f" and {len(odd) - SHOWN} more" if len(odd) > SHOWN else ""), file=sys.stderr)
    if not out:
        raise FileNotFoundError(f"SRC: expected audio files ({' '.join(SUFFIXES)}), found none "
                                f"in {sources}")
    return out


def problem(path: pathlib.Path) -> str | None:
    """Why `path` is not a readable recording (its header, `birdjepa.audio.info`), or None."""
    try:
        size = path.stat().st_size
        if size == 0:
            return "an empty file"
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
        try:
            info = birdjepa.data.audio.info(head)
        except errors.AudioError:
            if size <= HEAD_BYTES:
                raise
            info = birdjepa.data.audio.info(path)
    except (OSError, errors.AudioError) as e:
        return " ".join(str(e).split())[:120]
    if info["n_frames"] == 0:
        return "no audio frames"
    return None


def readable(files: list[pathlib.Path]) -> tuple[list[pathlib.Path], list[tuple[str, str]]]:
    """(the files whose header reads as audio with frames, [(file, why) of the others])."""
    good, bad = [], []
    for f in files:
        why = problem(pathlib.Path(f))
        if why is None:
            good.append(f)
        else:
            bad.append((str(f), why))
    return good, bad


def labels_csv(path: str | os.PathLike) -> dict[str, list[str]]:
    """{absolute file: its labels} of a CSV with columns `file` (relative to the CSV's
    directory, or absolute) and `labels` (names separated by ';', empty: a negative)."""
    path = pathlib.Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ValueError(f"--label_from {str(path)!r}: expected a CSV of file,labels, got "
                         f"{type(e).__name__}: {e}") from None
    if not rows or not {"file", "labels"} <= set(rows[0]):
        raise ValueError(f"--label_from {str(path)!r}: expected columns file and labels, got "
                         f"{list(rows[0]) if rows else 'no rows'}")
    out = {}
    for r in rows:
        f = pathlib.Path(r["file"])
        f = (f if f.is_absolute() else path.parent / f).absolute()
        out[os.path.normpath(f)] = [x.strip() for x in (r["labels"] or "").split(";")
                                    if x.strip()]
    return out


def labels_of(files: list[pathlib.Path], label_from: str | None,
              negatives: list[pathlib.Path]) -> list[list[str]] | None:
    """Each file's label names: its folder (`label_from` "parent"), its CSV row (`label_from`
    a .csv file, `labels_csv`), none for `negatives`; None without `label_from`. A file the
    CSV does not list is a ValueError naming it."""
    if label_from is None:
        if negatives:
            raise ValueError("--negatives: expected --label_from (the classes the negatives "
                             "are negatives of), got none")
        return None
    neg = {os.path.normpath(pathlib.Path(f).absolute()) for f in negatives}
    if label_from == "parent":
        return [[] if os.path.normpath(f) in neg else [f.parent.name] for f in files]
    if not str(label_from).lower().endswith(".csv"):
        raise ValueError(f"--label_from: expected parent or a CSV file of file,labels, got "
                         f"{label_from!r}")
    table = labels_csv(label_from)
    out, unlisted = [], []
    for f in files:
        key = os.path.normpath(f)
        if key in neg:
            out.append([])
        elif key in table:
            out.append(table[key])
        else:
            unlisted.append(str(f))
    if unlisted:
        raise ValueError(f"--label_from {label_from!r}: expected a row for every audio file, "
                         f"got none for {len(unlisted)} of {len(files)} audio files: "
                         + ", ".join(unlisted[:SHOWN]))
    return out


def write(files, out_dir: str | os.PathLike, *, label_from: str | None = None,
          relative: bool = False, negatives=()) -> pathlib.Path:
    """Write path-only shards for `files` (then `negatives`) into `out_dir`; returns the .arrow
    file. With `label_from` (module docstring) a `labels` list column (ClassLabel names: the
    sorted label names; a negative's list is empty) and, when every row has exactly one label,
    a `label` column too. A relative dataset's `audio` is a plain {bytes, path} struct, not a
    `datasets` Audio feature: `datasets` would resolve its paths against the current directory
    (save_to_disk then fails); the loader resolves them against the shard's directory."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    negatives = [pathlib.Path(f).absolute() for f in negatives]
    files = [pathlib.Path(f).absolute() for f in files] + negatives
    paths = [os.path.relpath(f, out_dir.absolute()) if relative else str(f) for f in files]
    cols = {"audio": pa.array([{"bytes": None, "path": p} for p in paths], AUDIO),
            "file": pa.array(paths, pa.string())}  # as stored: relative stays relative
    features = {"audio": {"bytes": {"dtype": "binary", "_type": "Value"},
                          "path": {"dtype": "string", "_type": "Value"}} if relative else
                {"_type": "Audio", "decode": True},
                "file": {"dtype": "string", "_type": "Value"}}
    labels = labels_of(files, label_from, negatives)
    if labels is not None:
        names = sorted({c for y in labels for c in y})
        at = {c: i for i, c in enumerate(names)}
        if all(len(y) == 1 for y in labels):
            cols["label"] = pa.array([at[y[0]] for y in labels], pa.int64())
            features["label"] = {"names": names, "_type": "ClassLabel"}
        cols["labels"] = pa.array([sorted(at[c] for c in set(y)) for y in labels],
                                  pa.list_(pa.int64()))
        features["labels"] = {"feature": {"names": names, "_type": "ClassLabel"},
                              "_type": "Sequence"}
    table = pa.table(cols).replace_schema_metadata(
        {"huggingface": json.dumps({"info": {"features": features}})})
    path = out_dir / "data-00000-of-00001.arrow"
    with outputs.replacing(path) as tmp, pa.OSFile(str(tmp), "wb") as f, \
            pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    birdjepa.data.from_annotations.write_state(
        out_dir, table, f"birdjepa from_files: {len(files)} recordings, path-only")
    return path


def add_options(p: cli_args.Parser) -> cli_args.Parser:
    """Every option of `python -m birdjepa.sources from_files`, in one place."""
    p.add_argument("src", nargs="+", metavar="SRC",
                   help="audio files or directories searched recursively for them")
    p.add_argument("--out_dir", required=True,
                   help="output directory (one .arrow file of path-only audio)")
    p.add_argument("--label_from", default=None, metavar="parent|FILE.csv",
                   help="parent: each file's folder name is its class; FILE.csv: columns "
                   "file (relative to the CSV) and labels (names separated by ';', empty: "
                   "none). Writes a `labels` list column (and `label` when every row has "
                   "exactly one class)")
    p.add_list("negatives", default=None, metavar="DIR",
               help="audio under DIR are rows without any class (an empty `labels` list: "
               "site noise, 'nothing here'); repeat for more folders")
    p.add_flag("relative", "store paths relative to --out_dir (move it and the audio together)")
    return p


def run(a) -> int:
    """Write the shard as the command line `a` says: unreadable files skipped (one warning
    naming them), the rows and rows per class printed; nothing readable: exit status 2."""
    try:
        files, not_utf8 = paths.utf8_named(audio_files(a.src))
        if not_utf8:
            print(f"warning: {paths.not_utf8_words(not_utf8)}", file=sys.stderr)
        if not files:
            raise ValueError(f"SRC: no audio file with a UTF-8 name in {a.src}")
        good, bad = readable(files)
        if not good:
            raise ValueError(f"SRC: none of the {len(files)} audio files is readable audio: "
                             + _named(bad))
        neg, neg_bad = readable(audio_files(a.negatives)) if a.negatives else ([], [])
        bad += neg_bad
        out = write(good, a.out_dir, label_from=a.label_from, relative=a.relative,
                    negatives=neg)
    except (FileNotFoundError, ValueError) as e:
        return cli_args.fail(e)
    if bad:
        print(f"warning: skipped {len(bad)} of {len(files)} files that are not readable audio "
              f"(no row written): {_named(bad)}", file=sys.stderr)
    print(f"wrote {out.parent}: {len(good) + len(neg)} recordings "
          f"({'relative' if a.relative else 'absolute'} paths)")
    if a.label_from is not None:
        labels = labels_of([pathlib.Path(f).absolute() for f in good], a.label_from, [])
        per = collections.Counter(c for y in labels for c in y)
        print(f"rows per class ({len(per)} classes): "
              + ", ".join(f"{c} {per[c]}" for c in sorted(per))
              + (f"; {len(neg)} negatives (no class)" if a.negatives else ""))
    return 0


def _named(bad: list[tuple[str, str]]) -> str:
    shown = "; ".join(f"{f}: {why}" for f, why in bad[:SHOWN])
    return shown + (f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else "")
