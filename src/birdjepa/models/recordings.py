"""What `python -m birdjepa.embed` and `python -m birdjepa.predict` share: SOURCE arguments
(audio files, directories of audio, Arrow shards, a saved dataset), the windows of every
recording through the training transform with a progress bar, and one row per window that
carries where it came from (file, or dataset row and the dataset's other columns) and when
(start_s, end_s)."""

import argparse
import dataclasses
import os
import pathlib
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet
import tqdm

import birdjepa.data.table as table
import birdjepa.models.artifact as export
import birdjepa.models.inference as embed

RESERVED = ("file", "row", "start_s", "end_s", "class", "confidence")
"""Output column names; a dataset column of the same name is written as source_<name>."""
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff")


@dataclasses.dataclass
class Source:
    files: list[str] | None = None
    """Audio files (row i = files[i]), or None for a table source."""
    shards: str | list[str] | None = None
    """Arrow shards, a dataset directory or DIR:SPLIT."""
    columns: list[str] = dataclasses.field(default_factory=list)
    """The table's columns carried into every row (all but the audio column)."""

    @property
    def data(self):
        return self.files if self.files is not None else self.shards

    def __len__(self) -> int:
        if self.files is not None:
            return len(self.files)
        return len(table.read(self.shards, self.columns[:1])) if self.columns else 0


def _is_table_dir(p: pathlib.Path) -> bool:
    return any(p.glob("*.arrow")) or (p / "state.json").is_file() or (
        p / "dataset_dict.json").is_file()


def resolve(args: list[str], audio_column: str = "audio") -> Source:
    """SOURCE arguments as one Source; a clear error for a missing path or a mix of kinds."""
    files, shards = [], []
    for a in args:
        p = pathlib.Path(a)
        base, _, split = a.rpartition(":")
        if p.is_dir() and not _is_table_dir(p):
            found = sorted(str(f) for f in p.rglob("*") if f.suffix.lower() in AUDIO_SUFFIXES)
            if not found:
                raise FileNotFoundError(f"SOURCE {a!r}: a directory without audio files "
                                        f"({', '.join(AUDIO_SUFFIXES)}) or Arrow shards")
            files += found
        elif p.is_file() and p.suffix.lower() in AUDIO_SUFFIXES:
            files.append(a)
        elif p.exists() or (base and pathlib.Path(base).is_dir() and "/" not in split):
            shards.append(a)
        else:
            raise FileNotFoundError(f"SOURCE: expected an audio file, a directory of audio, "
                                    f"Arrow shards or a dataset directory, got {a!r}, which "
                                    "does not exist")
    if files and shards:
        raise ValueError(f"SOURCE: expected audio files or Arrow shards, got both ({files[0]!r}"
                         f" and {shards[0]!r})")
    if files:
        return Source(files=files)
    src = shards[0] if len(shards) == 1 else shards
    cols = [c for c in table.column_names(src) if c != audio_column]
    if audio_column not in table.column_names(src):
        raise KeyError(f"SOURCE {shards[0]!r}: expected audio column {audio_column!r}, got "
                       f"{table.column_names(src)}")
    return Source(shards=src, columns=cols)


def add_common(p: argparse.ArgumentParser, *, window_s: float | None = None) -> None:
    """MODEL, SOURCE and the options both command lines take (underscores; dashes also work)."""
    p.add_argument("model", metavar="MODEL", help="a run directory (its latest checkpoint), an "
                   "export directory (python -m birdjepa.export) or NAME:WEIGHTS for an "
                   "imported model, e.g. bird-mae-base:model.safetensors")
    p.add_argument("source", metavar="SOURCE", nargs="+", help="audio files, directories "
                   "searched recursively for audio (" + " ".join(AUDIO_SUFFIXES) + "), Arrow "
                   "shards (a file or directory), a datasets save_to_disk directory, or DIR:SPLIT")
    p.add_argument("--out", required=True, help="output file; its suffix picks the format")
    p.add_argument("--window", type=float, default=window_s,
                   help="window length in seconds (default: the model's clip, e.g. 5 s; more "
                   "than the model's frames is an error)")
    p.add_argument("--hop", type=float, default=None,
                   help="window start spacing in seconds (default: --window, i.e. tiling); the "
                   "last window of a recording is zero-padded")
    p.add_argument("--centre", "--center", action="store_true",
                   help="one window per recording, at its centre (the loader's eval crop)")
    p.add_argument("--batch_size", "--batch-size", type=int, default=64,
                   help="windows per encoder call (default %(default)s)")
    p.add_argument("--n_workers", "--n-workers", type=int, default=2,
                   help="threads decoding and transforming audio (default %(default)s)")
    p.add_argument("--audio_column", "--audio-column", default="audio",
                   help="audio column of a table SOURCE (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")


def windows(m: export.Model, args) -> embed.Windows:
    """The model's input settings (embed.Windows.for_model) with the command line's windows."""
    return embed.Windows.for_model(m.audio, window_s=args.window, hop_s=args.hop,
                                   centre=args.centre)


class Progress:
    """tqdm over recordings (rate and ETA) with the windows encoded so far, on stderr."""

    def __init__(self, total: int, enabled: bool):
        self.bar = tqdm.tqdm(total=total, unit="rec", file=sys.stderr, disable=not enabled,
                             dynamic_ncols=True, desc="windows 0")
        self.seen, self.n_windows, self.t0 = -1, 0, time.perf_counter()

    def wrap(self, batches):
        for x, rows, starts in batches:
            self.n_windows += len(rows)
            top = int(rows.max()) if len(rows) else self.seen  # rows come in order
            rate = self.n_windows / max(time.perf_counter() - self.t0, 1e-9)
            self.bar.set_description(f"windows {self.n_windows} ({rate:.1f}/s)", refresh=False)
            if top - 1 > self.seen:  # recordings before the last one seen are done
                self.bar.update(top - 1 - self.seen)
                self.seen = top - 1
            yield x, rows, starts
        self.bar.update(self.bar.total - self.bar.n if self.bar.total else 0)
        self.bar.close()


def encode(m: export.Model, src: Source, w: embed.Windows, pools: tuple[str, ...], *,
           batch_size: int = 64, n_workers: int = 2, audio_column: str = "audio",
           progress: bool = True) -> dict[str, np.ndarray]:
    """`birdjepa.models.inference.encode` over the windows of `src`, with a progress bar."""
    batches = embed.features(src.data, w, batch_size=batch_size, audio_column=audio_column,
                             n_workers=n_workers)
    bar = Progress(len(src), progress)
    return embed.encode(m.encoder, bar.wrap(batches), pools, batch_size=batch_size)


def where(src: Source, out: dict[str, np.ndarray], w: embed.Windows) -> dict[str, pa.Array]:
    """Columns saying where each window comes from: file or row (+ the table's columns),
    start_s, end_s."""
    rows = out["row"].astype(np.int64)
    cols: dict[str, pa.Array] = {}
    if src.files is not None:
        cols["file"] = pa.array([src.files[r] for r in rows], pa.string())
    else:
        cols["row"] = pa.array(rows)
        meta = table.read(src.shards, src.columns)
        taken = meta.take(pa.array(rows))
        for name in src.columns:
            key = f"source_{name}" if name in RESERVED else name
            cols[key] = taken.column(name).combine_chunks()
    cols["start_s"] = pa.array(out["start_s"].astype(np.float64))
    cols["end_s"] = pa.array(out["start_s"].astype(np.float64) + w.window_s)
    return cols


def vectors(a: np.ndarray) -> pa.Array:
    """(n, d) -> fixed_size_list<float32>[d]; (n, p, d) -> list<fixed_size_list[d]>[p]."""
    a = np.ascontiguousarray(a, np.float32)
    flat = pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), a.shape[-1])
    if a.ndim == 2:
        return flat
    return pa.FixedSizeListArray.from_arrays(flat, a.shape[1])


def write(cols: dict[str, pa.Array], path: str | os.PathLike) -> pathlib.Path:
    """Parquet (.parquet), CSV (.csv: scalar columns only), or npz (.npz: one array per column)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tbl = pa.table(cols)
    if path.suffix == ".parquet":
        pyarrow.parquet.write_table(tbl, path)
    elif path.suffix == ".csv":
        pyarrow.csv.write_csv(tbl, path)
    elif path.suffix == ".npz":
        arrays = {}
        for k, c in cols.items():
            if pa.types.is_fixed_size_list(c.type):
                arrays[k] = _dense(c)
            else:
                arrays[k] = np.asarray(c.to_pylist(), dtype=object if pa.types.is_list(
                    c.type) or pa.types.is_struct(c.type) else None)
        np.savez(path, **arrays)
    else:
        raise ValueError(f"--out: expected a .parquet, .csv or .npz file, got {str(path)!r}")
    return path


def _dense(c: pa.Array) -> np.ndarray:
    shape = []
    while pa.types.is_fixed_size_list(c.type):
        shape.append(c.type.list_size)
        c = c.flatten()
    return np.asarray(c.to_numpy(zero_copy_only=False), np.float32).reshape(-1, *shape)


def cli_main(parser: argparse.ArgumentParser, run, argv: list[str] | None, what: str) -> int:
    """Parse, `run(args)` -> columns, report "<n> <what> -> OUT" on stderr; a missing input or
    a bad value is one line and exit status 2."""
    args = parser.parse_args(argv)
    try:
        cols = run(args)
    except (FileNotFoundError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = len(next(iter(cols.values()))) if cols else 0
    print(f"{n} {what} -> {args.out}", file=sys.stderr)
    return 0
