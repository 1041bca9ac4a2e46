"""The one output file of `python -m birdjepa.embed` and `predict`: checked before any compute
(`check_out`: its suffix, a writable place, never over a file they did not write), written whole
or not at all (`write`: parquet, CSV or npz, beside and renamed in), and how an earlier output
is known (`is_output`, the ledger of birdjepa.common.outputs)."""

import json
import os
import pathlib
import zipfile

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet

import birdjepa._rs
import birdjepa.common.outputs as outputs


def vectors(a: np.ndarray) -> pa.Array:
    """(n, d) -> fixed_size_list<float32>[d]; (n, p, d) -> list<fixed_size_list[d]>[p]."""
    a = np.ascontiguousarray(a, np.float32)
    flat = pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), a.shape[-1])
    if a.ndim == 2:
        return flat
    return pa.FixedSizeListArray.from_arrays(flat, a.shape[1])


def write(cols: dict[str, pa.Array], path: str | os.PathLike) -> pathlib.Path:
    """Parquet (.parquet), CSV (.csv: a list or struct cell, such as a dataset's multilabel
    column, as JSON text), or npz (.npz: one array per column); the suffix in any case, as
    `check_out` accepts it. Written to a temporary file beside `path`, then renamed over it: a
    write that fails (a full disk) leaves an existing `path` as it was."""
    path = pathlib.Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv", ".npz"):
        raise ValueError(f"--out: expected a .parquet, .csv or .npz file, got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with outputs.replacing(path) as tmp:
        _write_as(suffix, cols, tmp)
    outputs.record(path)
    return path


def _write_as(suffix: str, cols: dict[str, pa.Array], path: pathlib.Path) -> None:
    if suffix == ".parquet":
        pyarrow.parquet.write_table(pa.table(cols), path)
    elif suffix == ".csv":
        pyarrow.csv.write_csv(pa.table({k: pa.array([json.dumps(v) for v in c.to_pylist()])
                                        if pa.types.is_nested(c.type) else c
                                        for k, c in cols.items()}), path)
    else:
        arrays = {}
        for k, c in cols.items():
            if pa.types.is_fixed_size_list(c.type):
                arrays[k] = _dense(c)
            else:
                arrays[k] = np.asarray(c.to_pylist(), dtype=object if pa.types.is_list(
                    c.type) or pa.types.is_struct(c.type) else None)
        _savez(path, arrays)


def _savez(path: pathlib.Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez without its keyword clash (a column named `file`): the same .npz layout."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for k, a in arrays.items():
            with z.open(f"{k}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(a), allow_pickle=True)


def _dense(c: pa.Array) -> np.ndarray:
    shape = []
    while pa.types.is_fixed_size_list(c.type):
        shape.append(c.type.list_size)
        c = c.flatten()
    return np.asarray(c.to_numpy(zero_copy_only=False), np.float32).reshape(-1, *shape)


def check_out(out: str | os.PathLike, suffixes: tuple[str, ...], option: str = "--out",
              overwrite: bool = False) -> None:
    """Before any compute: `out`'s suffix is one of `suffixes`, it is not a directory, an
    existing file there is one of embed's or predict's outputs, unchanged since they wrote it
    (`is_output`; or `overwrite`), and its nearest existing ancestor is a writable directory
    (not a file)."""
    path = pathlib.Path(out)
    if path.suffix.lower() not in suffixes:
        raise ValueError(f"{option}: expected a {' or '.join(suffixes)} file, got {str(out)!r}")
    if path.is_dir():
        raise ValueError(f"{option}: expected a file, got the directory {str(out)!r}")
    kind = birdjepa._rs.file_kind(path.stat().st_mode) if path.exists() else None
    if kind is not None:  # never opened: a FIFO would block, a device never end
        raise ValueError(f"{option}: expected a new file or a regular file embed/predict "
                         f"wrote, got {str(out)!r}, {kind}")
    if path.exists() and not overwrite and not is_output(path):
        raise ValueError(f"{option}: expected a new file or one embed/predict wrote, got "
                         f"{str(out)!r}, which holds something else; --overwrite replaces it")
    parent = next(p for p in path.absolute().parents if p.exists())
    if not parent.is_dir():
        raise ValueError(f"{option}: expected {str(parent)!r} to be a directory (the output "
                         f"goes under it), got a file")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"{option}: expected a writable directory, got {str(parent)!r}")


OUTPUT_COLUMNS = {"start_s", "end_s", "duration_s", "padded_s"}
"""Columns every table of embed and predict has (columns.timing): how an existing file is known
as one of their outputs, which a new run may replace."""


def is_output(path: pathlib.Path) -> bool:
    """Whether `path` is a file embed or predict wrote there and nobody changed since (the
    ledger beside it, `birdjepa.common.outputs.ours`): a table that merely has their columns, a
    copy of one, or one a user reviewed (a column added, a species corrected) is not."""
    return outputs.ours(path)
