"""Path-only Arrow shards from audio files: `python -m birdjepa.sources from_files SRC... --out_dir DST`.

`datasets` 5.x embeds the audio bytes on `save_to_disk` (even with `Audio(decode=False)`), so it
no longer writes path-only data. This writes what the loader reads as path-only: one Arrow IPC
stream file `DST/data-00000-of-00001.arrow` whose `audio` column is the Hugging Face Audio struct
`{"bytes": null, "path": PATH}` (absolute paths, or relative to DST with `relative=True`, which
resolve against the shard's directory), a `file` column (the path as stored, so a relative
dataset carries no stale absolute path into `embed` / `predict` output), and with
`label_from="parent"` a `label` column (`ClassLabel`: the sorted names of the files' parent directories, the usual
one-folder-per-species layout), with the HF features metadata so `class_names` finds them, and `state.json` /
`dataset_info.json` beside it, so that `datasets.load_from_disk` opens DST too.

The command line reads every file's header first (`readable`): a file that is not audio (a
text file named `.wav`), is empty or holds no audio frames is skipped, and the skips are one
warning line naming them; none readable is an error (exit status 2). It prints the rows and,
with `--label_from parent`, the rows per class.
"""

import collections
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


def write(files, out_dir: str | os.PathLike, *, label_from: str | None = None,
          relative: bool = False) -> pathlib.Path:
    """Write path-only shards for `files` into `out_dir`; returns the .arrow file."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [pathlib.Path(f).absolute() for f in files]
    paths = [os.path.relpath(f, out_dir.absolute()) if relative else str(f) for f in files]
    cols = {"audio": pa.array([{"bytes": None, "path": p} for p in paths], AUDIO),
            "file": pa.array(paths, pa.string())}  # as stored: relative stays relative
    features = {"audio": {"_type": "Audio", "decode": True},
                "file": {"dtype": "string", "_type": "Value"}}
    if label_from == "parent":
        names = sorted({f.parent.name for f in files})
        cols["label"] = pa.array([names.index(f.parent.name) for f in files], pa.int64())
        features["label"] = {"names": names, "_type": "ClassLabel"}
    elif label_from is not None:
        raise ValueError(f"label_from: expected None or 'parent', got {label_from!r}")
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
    p.add_argument("--label_from", choices=("parent",), default=None,
                   help="parent: a ClassLabel `label` column from each file's folder name")
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
        out = write(good, a.out_dir, label_from=a.label_from, relative=a.relative)
    except (FileNotFoundError, ValueError) as e:
        return cli_args.fail(e)
    if bad:
        print(f"warning: skipped {len(bad)} of {len(files)} files that are not readable audio "
              f"(no row written): {_named(bad)}", file=sys.stderr)
    print(f"wrote {out.parent}: {len(good)} recordings "
          f"({'relative' if a.relative else 'absolute'} paths)")
    if a.label_from is not None:
        per = collections.Counter(pathlib.Path(f).parent.name for f in good)
        print(f"rows per class ({len(per)} classes): "
              + ", ".join(f"{c} {per[c]}" for c in sorted(per)))
    return 0


def _named(bad: list[tuple[str, str]]) -> str:
    shown = "; ".join(f"{f}: {why}" for f, why in bad[:SHOWN])
    return shown + (f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else "")
