"""Reading evaluation splits with pyarrow: audio bytes and (multi)labels by global row index.

A split is a shard directory (HF `save_to_disk` output, or any directory of Arrow IPC stream
files, read in sorted order as `birdjepa.data.Loader` reads them), one shard file, a list of
them, or a `datasets.Dataset`. Row ids are global indices over the shards in order, the loader's
`index`. Labels come from an integer column (one class per row; null or -1 means none) or a
`list<int>` column (BirdSet's `ebird_code_multilabel`, HF `Sequence(ClassLabel)`) and become a
multi-hot (rows, classes) matrix.
"""

import hashlib
import os
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute

import birdjepa.common.errors as errors
import birdjepa.data
import birdjepa.data.ipc
import birdjepa.data.paths as paths
import birdjepa.data.sources


def _read_shard(path: str, columns: list[str]) -> pa.Table:
    table = birdjepa.data.ipc.read_table(path)
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise KeyError(f"{path}: expected columns {missing}, got only {table.column_names}")
    return table.select(columns)


def is_dataset(source) -> bool:
    return hasattr(source, "features") and hasattr(source, "with_format")


def read(source, columns: list[str]) -> pa.Table:
    """The `columns` of every row of `source`, in global row order."""
    if is_dataset(source):
        missing = [c for c in columns if c not in source.column_names]
        if missing:
            raise KeyError(f"expected columns {missing}, got only {source.column_names}")
        return source.select_columns(columns).with_format("arrow")[:]
    shards = birdjepa.data.resolve_shards(source)
    return pa.concat_tables([_read_shard(p, columns) for p in shards])


def column_names(source) -> list[str]:
    """The columns of `source` (its first shard's schema), without reading rows."""
    if is_dataset(source):
        return list(source.column_names)
    return list(birdjepa.data.ipc.schema(birdjepa.data.resolve_shards(source)[0]).names)


def fingerprint(source, audio_column: str | None = None) -> str:
    """What a split's embeddings depend on in its files, cheaply: per shard its absolute path,
    size, modification time and the sha256 of its first and last MiB (a `datasets.Dataset`:
    its own fingerprint). A rewritten split gets a new fingerprint. With `audio_column`, also
    `audio_identity` of every path-only recording: replacing a recording changes it too."""
    if audio_column is not None:
        base = fingerprint(source)
        files = [a for a in read_audio(source, audio_column) if isinstance(a, str)]
        return base if not files else hashlib.sha256(
            (base + "".join(audio_identity(f) for f in files)).encode()).hexdigest()[:16]
    if is_dataset(source):
        return str(getattr(source, "_fingerprint", None) or id(source))
    h = hashlib.sha256()
    for path in birdjepa.data.resolve_shards(source):
        st = os.stat(path)
        h.update(f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        with open(path, "rb") as f:
            h.update(f.read(1 << 20))
            if st.st_size > 1 << 20:
                f.seek(max(1 << 20, st.st_size - (1 << 20)))
                h.update(f.read())
    return h.hexdigest()[:16]


def audio_identity(path: str) -> str:
    """A path-only recording's identity for cache keys: absolute path, size, mtime (ns) and
    inode, from one stat; not a content hash, which would read every recording of a split at
    every evaluation just to check the cache. Replacing a file (a copy, a re-download, rsync's
    write-then-rename) changes its mtime or inode; only a same-size rewrite that forges the
    mtime in place goes unseen. A missing file has its own identity."""
    try:
        st = os.stat(path)
    except OSError as e:
        return f"{os.path.abspath(path)}\0missing {e.errno}\n"
    return f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n"


def audio_bytes(table: pa.Table, column: str = "audio", base_dir: str = "", *,
                audio_root: str = "", path_map: Mapping[str, str] | None = None) -> list:
    """The encoded audio of an HF Audio column (a struct of bytes and path), a binary column or a
    string column of paths, per row: bytes, or for a path-only row the file its stored path
    names (`paths.resolve`: `path_map` applied, a relative path joined to
    `audio_root`, else to `base_dir`, the shard's directory), or None."""
    col = table.column(column).combine_chunks()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        data, stored = [None] * len(col), col.to_pylist()
    elif pa.types.is_struct(col.type):
        data = col.field("bytes").to_pylist()
        has_path = col.type.get_field_index("path") >= 0
        stored = col.field("path").to_pylist() if has_path else [None] * len(col)
    else:
        return col.to_pylist()
    return [b if b else (paths.resolve(p, base_dir, audio_root, path_map)
                         if p else None)
            for b, p in zip(data, stored, strict=True)]


def read_audio(source, column: str = "audio", *, audio_root: str = "",
               path_map: Mapping[str, str] | None = None) -> list:
    """`audio_bytes` of every row of `source`; stored paths resolve as the loader resolves them
    with the same `audio_root` and `path_map` (relative ones against each shard's directory
    when `audio_root` is empty)."""
    if is_dataset(source):
        return audio_bytes(read(source, [column]), column, audio_root=audio_root,
                           path_map=path_map)
    return [a for p in birdjepa.data.resolve_shards(source)
            for a in audio_bytes(_read_shard(p, [column]), column, os.path.dirname(p),
                                 audio_root=audio_root, path_map=path_map)]


def _stored_paths(tbl: pa.Table, column: str) -> list[tuple[int, str]]:
    """(row, stored path) of the path-only rows of `tbl` (no bytes, a path), without touching
    the bytes themselves (memory-mapped shards stay unread)."""
    col = tbl.column(column).combine_chunks()
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        stored = col.to_pylist()
    elif pa.types.is_struct(col.type) and col.type.get_field_index("path") >= 0:
        has_bytes = col.type.get_field_index("bytes") >= 0
        empty = (col.field("bytes").is_null().to_pylist() if has_bytes else [True] * len(col))
        if has_bytes:  # b"" is no audio either
            lengths = pa.compute.binary_length(col.field("bytes")).fill_null(0).to_pylist()
            empty = [e or n == 0 for e, n in zip(empty, lengths, strict=True)]
        stored = [p if e else None for p, e in zip(col.field("path").to_pylist(), empty,
                                                     strict=True)]
    else:
        return []
    return [(i, p) for i, p in enumerate(stored) if p]


def check_audio_files(source, column: str = "audio", *, audio_root: str = "",
                      path_map: Mapping[str, str] | None = None,
                      max_audio_mb: float = paths.MAX_AUDIO_MB) -> dict:
    """Every path-only row's file, resolved as `read_audio` resolves it and checked as the
    readers read it (`paths.check_file`: stat only, so a FIFO cannot block).
    Returns {"checked": path-only rows, "missing": [(where, stored, resolved)], "unusable":
    [(where, why)]}, `where` naming shard and row ("row i" for a datasets.Dataset)."""
    if is_dataset(source):
        parts = [("", "", read(source, [column]))]
    else:
        parts = [(p, os.path.dirname(p), _read_shard(p, [column]))
                 for p in birdjepa.data.resolve_shards(source)]
    out: dict = {"checked": 0, "missing": [], "unusable": []}
    for shard, base_dir, tbl in parts:
        for row, stored in _stored_paths(tbl, column):
            out["checked"] += 1
            path = paths.resolve(stored, base_dir, audio_root, path_map)
            where = f"{shard}: row {row}" if shard else f"row {row}"
            try:
                paths.check_file(path, max_audio_mb)
            except OSError:
                out["missing"].append((where, stored, path))
            except errors.DatasetError as e:
                out["unusable"].append((where, str(e)))
    return out


def moved_hint(missing: list, audio_root: str = "--audio_root DIR",
               path_map: str = "--path_map OLD=NEW") -> str:
    """What fixes `check_audio_files`' missing files, naming the settings as the caller spells
    them: the first one's stored and resolved path, then `path_map` (an absolute stored path:
    map the stored prefix OLD to the local NEW) or `audio_root` (a relative one)."""
    where, stored, path = missing[0]
    said = f"{where} stores {stored!r}" + (f", read as {path!r}" if path != stored else "")
    if os.path.isabs(stored):
        fix = f"set {path_map} (the stored prefix OLD and where the files are now, NEW)"
    else:
        fix = f"set {audio_root} (the directory the relative paths start from) or {path_map}"
    return f"{said}, which does not exist; {fix}"


def class_names(source, column: str) -> list[str] | None:
    """The ClassLabel names of `column` (plain or in a Sequence/List) from the HF metadata."""
    ds = source if is_dataset(source) else None
    return birdjepa.data.sources.class_names(birdjepa.data.resolve_shards(source), column, ds)


def multi_hot(table: pa.Table, column: str, n_classes: int) -> np.ndarray:
    """bool (rows, n_classes) from an int column or a list<int> column of `table`."""
    col = table.column(column).combine_chunks()
    n = len(col)
    y = np.zeros((n, n_classes), bool)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        lengths = col.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
        values = col.flatten().fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = np.repeat(np.arange(n), lengths)
    elif pa.types.is_integer(col.type):
        values = col.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        rows = np.arange(n)
    else:
        raise TypeError(f"label column {column!r}: expected int or list<int>, got {col.type}")
    keep = values >= 0
    if (values[keep] >= n_classes).any():
        raise ValueError(f"label column {column!r}: expected class ids < {n_classes}, got "
                         f"{int(values.max())}")
    y[rows[keep], values[keep]] = True
    return y
