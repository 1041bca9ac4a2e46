"""Path-only Arrow shards from audio files: `python -m birdjepa.sources from_files SRC... --out_dir DST`.

`datasets` 5.x embeds the audio bytes on `save_to_disk` (even with `Audio(decode=False)`), so it
no longer writes path-only data. This writes what the loader reads as path-only: one Arrow IPC
stream file `DST/data-00000-of-00001.arrow` whose `audio` column is the Hugging Face Audio struct
`{"bytes": null, "path": PATH}` (absolute paths, or relative to DST with `relative=True`, which
resolve against the shard's directory), a `file` column, and with `label_from="parent"` a
`label` column (`ClassLabel`: the sorted names of the files' parent directories, the usual
one-folder-per-species layout), with the HF features metadata so `class_names` finds them.
"""

import json
import os
import pathlib
import sys

import pyarrow as pa

import birdjepa.runtime.cli_args as cli_args

AUDIO = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff")


def audio_files(sources: list[str]) -> list[pathlib.Path]:
    """Audio files named or found (recursively, regular files only) under directories."""
    out = []
    for s in map(pathlib.Path, sources):
        if s.is_dir():
            out += sorted(p for p in s.rglob("*") if p.suffix.lower() in SUFFIXES and p.is_file())
        elif s.is_file():
            out.append(s)
        else:
            raise FileNotFoundError(f"SRC: expected an audio file or a directory, got {str(s)!r}")
    if not out:
        raise FileNotFoundError(f"SRC: expected audio files ({' '.join(SUFFIXES)}), found none "
                                f"in {sources}")
    return out


def write(files, out_dir: str | os.PathLike, *, label_from: str | None = None,
          relative: bool = False) -> pathlib.Path:
    """Write path-only shards for `files` into `out_dir`; returns the .arrow file."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [pathlib.Path(f).absolute() for f in files]
    paths = [os.path.relpath(f, out_dir.absolute()) if relative else str(f) for f in files]
    cols = {"audio": pa.array([{"bytes": None, "path": p} for p in paths], AUDIO),
            "file": pa.array([str(f) for f in files], pa.string())}
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
    tmp = path.with_suffix(".arrow.tmp")
    with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    os.replace(tmp, path)
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
    """Write the shard as the command line `a` says."""
    try:
        out = write(audio_files(a.src), a.out_dir, label_from=a.label_from, relative=a.relative)
    except (FileNotFoundError, ValueError) as e:
        return cli_args.fail(e)
    print(f"{out}", file=sys.stderr)
    return 0
