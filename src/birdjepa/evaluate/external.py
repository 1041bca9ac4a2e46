"""Precomputed embeddings as an encoder: `encoders = ["emb:DIR"]` (or `--encoders emb:DIR`).

DIR holds parquet files in `python -m birdjepa.embed`'s schema, one per split of the evaluation:
`DIR/train.parquet` and `DIR/test.parquet`, or `DIR/<test set name>/{train,test}.parquet` when
the test sets need different files (that one is taken first). Columns: `row` (int, the split's
row, in the evaluation's shard order), `start_s` (float), an embedding column `emb_<pool>`
(a fixed- or variable-size list of floats; with several, the config's `pool` names one), any
others ignored. The test split needs exactly one window per row (the evaluation scores
segments); the training split needs at least one window for every row. Perch or BirdNET vectors
written in this schema are evaluated exactly like ours. Every file, column and row is checked
before anything is embedded; probes that need patch tokens (attentive, prototypical) are refused.
A file pyarrow cannot read, a non-integer or null `row`, a non-numeric or null `start_s`, a
(row, start_s) window given twice, and vectors that are null, hold non-numbers or nulls, are
empty, differ in width within a file, or differ from the train width in the test file are
one-line errors naming the file, the column and the first offending window.
"""

import hashlib
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import birdjepa.config
import birdjepa.evaluate.probes as probes

PREFIX = "emb:"


def is_external(spec: str) -> bool:
    return str(spec).startswith(PREFIX)


def directory(spec: str) -> pathlib.Path:
    return pathlib.Path(str(spec)[len(PREFIX):])


def digest(spec: str) -> str:
    """sha256 over the directory's parquet files (names and bytes)."""
    h = hashlib.sha256()
    for p in sorted(directory(spec).rglob("*.parquet")):
        h.update(str(p.relative_to(directory(spec))).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def path(spec: str, test_set: str, role: str) -> pathlib.Path:
    d = directory(spec)
    own = d / test_set / f"{role}.parquet"
    return own if own.is_file() else d / f"{role}.parquet"


def _fail(spec: str, what: str) -> birdjepa.config.ConfigError:
    return birdjepa.config.ConfigError(f"config key 'encoders': {spec!r}: {what}")


def _read(spec: str, p: pathlib.Path, fn, **kw):
    """fn(p, **kw) (pq.read_schema or pq.read_table); a file pyarrow cannot read (truncated,
    not parquet) is a ConfigError naming it."""
    try:
        return fn(p, **kw)
    except (pa.ArrowException, OSError) as e:
        raise _fail(spec, f"expected a parquet file pyarrow can read at {p}, got "
                    f"{type(e).__name__}: {' '.join(str(e).split())}") from None


def _column(spec: str, p: pathlib.Path, names: list[str], pool: str) -> str:
    embs = [c for c in names if c.startswith("emb_")]
    if pool != "encoder" and f"emb_{pool}" in embs:
        return f"emb_{pool}"
    if len(embs) == 1 and pool == "encoder":
        return embs[0]
    raise _fail(spec, f"expected {'one emb_* column' if pool == 'encoder' else f'emb_{pool}'}"
                f" in {p}, got columns {names}")


def load(spec: str, test_set: str, role: str, pool: str) -> dict[str, np.ndarray]:
    """{"pooled": (windows, d) float32, "row": (windows,), "start_s": (windows,)}, sorted by
    row then start."""
    p = path(spec, test_set, role)
    names = _read(spec, p, pq.read_schema).names
    col = _column(spec, p, names, pool)
    t = _read(spec, p, pq.read_table, columns=["row", "start_s", col])
    row = t.column("row").to_numpy().astype(np.int64)
    start = t.column("start_s").to_numpy().astype(np.float64)
    pooled = np.asarray(t.column(col).to_pylist(), np.float32)
    order = np.lexsort((start, row))
    return {"pooled": pooled[order], "row": row[order], "start_s": start[order]}


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _check_columns(spec: str, p: pathlib.Path, t: pa.Table, col: str) -> None:
    """Integer `row`, numeric `start_s`, the vectors as lists of numbers; no null row or start."""
    kinds = {"row": ("integers", pa.types.is_integer), "start_s": ("numbers", _is_number)}
    for c, (want, ok) in kinds.items():
        if not ok(t.schema.field(c).type):
            raise _fail(spec, f"expected column {c} of {want} in {p}, got {t.schema.field(c).type}")
    vec_t = t.schema.field(col).type
    is_list = (pa.types.is_list(vec_t) or pa.types.is_large_list(vec_t)
               or pa.types.is_fixed_size_list(vec_t))
    if not (is_list and _is_number(vec_t.value_type)):
        raise _fail(spec, f"expected column {col} of lists of numbers (float or int) in {p}, "
                    f"got {vec_t}")
    for c in ("row", "start_s"):
        null = pc.is_null(t.column(c)).to_numpy(zero_copy_only=False)
        if null.any():
            raise _fail(spec, f"expected no null in column {c} of {p}, got {int(null.sum())} "
                        f"(first in window {int(np.flatnonzero(null)[0])}, counting from 0)")


def _check_unique(spec: str, p: pathlib.Path, row: np.ndarray, start: np.ndarray) -> None:
    """Each (row, start_s) window at most once: a repeat would count twice in the probes."""
    order = np.lexsort((start, row))
    row_w, start_w = row[order], start[order]
    same = (row_w[1:] == row_w[:-1]) & (start_w[1:] == start_w[:-1])
    if same.any():
        i = int(np.flatnonzero(same)[0])
        times = int(((row == row_w[i]) & (start == start_w[i])).sum())
        raise _fail(spec, f"expected each (row, start_s) window once, got {p}: row "
                    f"{int(row_w[i])} start_s {float(start_w[i])} appears {times} times")


def _width(spec: str, p: pathlib.Path, vec: pa.Array, col: str, row: np.ndarray,
           start: np.ndarray) -> int:
    """The vectors' one width; a null vector or element, width 0, or vectors of different
    widths is a ConfigError naming the first such window."""
    at = lambda i: f"row {int(row[i])} start_s {float(start[i])}"  # noqa: E731
    null = pc.is_null(vec).to_numpy(zero_copy_only=False)
    if null.any():
        raise _fail(spec, f"expected a vector in every window of column {col} in {p}, got "
                    f"{int(null.sum())} null (first at {at(int(np.flatnonzero(null)[0]))})")
    null_el = pc.is_null(pc.list_flatten(vec)).to_numpy(zero_copy_only=False)
    if null_el.any():
        i = int(pc.list_parent_indices(vec).to_numpy()[np.flatnonzero(null_el)[0]])
        raise _fail(spec, f"expected vectors of numbers in column {col} of {p}, got "
                    f"{int(null_el.sum())} null elements (first at {at(i)})")
    width_w = pc.list_value_length(vec).to_numpy(zero_copy_only=False).astype(np.int64)
    if not len(width_w):
        return 0
    bad = np.flatnonzero((width_w != width_w[0]) | (width_w == 0))
    if len(bad):
        i = int(bad[0])
        want = "at least 1" if width_w[0] == 0 else f"{width_w[0]} (that of the first)"
        raise _fail(spec, f"expected every vector in column {col} of {p} to have width {want}, "
                    f"got width {width_w[i]} at {at(i)} ({len(bad)} of {len(width_w)} windows)")
    return int(width_w[0])


def _check_file(spec: str, p: pathlib.Path, role: str, n: int, pool: str) -> int:
    """Columns, rows and vectors of one split's file; returns the vectors' width."""
    names = _read(spec, p, pq.read_schema).names
    missing = [c for c in ("row", "start_s") if c not in names]
    if missing:
        raise _fail(spec, f"expected columns row and start_s in {p}, got {names}")
    col = _column(spec, p, names, pool)
    t = _read(spec, p, pq.read_table, columns=["row", "start_s", col])
    _check_columns(spec, p, t, col)
    rows = t.column("row").to_numpy().astype(np.int64)
    start = t.column("start_s").to_numpy().astype(np.float64)
    absent = np.setdiff1d(np.arange(n), rows)
    extra = rows[(rows < 0) | (rows >= n)]
    if len(absent) or len(extra):
        raise _fail(spec, f"expected rows 0..{n - 1} of the {role} split in {p}, got "
                    f"{len(absent)} missing (first {absent[:5].tolist()}) and "
                    f"{len(extra)} out of range")
    _check_unique(spec, p, rows, start)
    if role == "test" and len(rows) != n:
        raise _fail(spec, f"expected one window per test row ({n}) in {p}, got "
                    f"{len(rows)} windows")
    return _width(spec, p, t.column(col).combine_chunks(), col, rows, start)


def check(spec: str, test_set: str, n_train: int, n_test: int, cfg) -> None:
    """Up front: files, columns, and rows (every training row present, exactly one window per
    test row, none out of range, no window twice), vectors (numbers, one width in both
    splits), and no probe that needs patch tokens."""
    tokens = [k for k in cfg.probes if probes.FIELDS[k] != "pooled"]
    if tokens:
        raise _fail(spec, f"precomputed embeddings are pooled vectors only; expected probes "
                    f"without patch tokens, got {tokens} (drop them from 'probes')")
    width = {}
    for role, n in (("train", n_train), ("test", n_test)):
        p = path(spec, test_set, role)
        if not p.is_file():
            raise _fail(spec, f"expected {p} (or {directory(spec) / test_set / p.name}) for the "
                        f"{role} split of test set {test_set!r}, got no such file")
        width[role] = (_check_file(spec, p, role, n, cfg.pool), p)
    if width["test"][0] != width["train"][0]:
        raise _fail(spec, f"expected the vectors in {width['test'][1]} to have the width of "
                    f"those in {width['train'][1]} ({width['train'][0]}), got width "
                    f"{width['test'][0]}")
