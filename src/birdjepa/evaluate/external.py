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
"""

import hashlib
import pathlib

import numpy as np
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
    names = pq.read_schema(p).names
    col = _column(spec, p, names, pool)
    t = pq.read_table(p, columns=["row", "start_s", col])
    row = t.column("row").to_numpy().astype(np.int64)
    start = t.column("start_s").to_numpy().astype(np.float64)
    pooled = np.asarray(t.column(col).to_pylist(), np.float32)
    order = np.lexsort((start, row))
    return {"pooled": pooled[order], "row": row[order], "start_s": start[order]}


def check(spec: str, test_set: str, n_train: int, n_test: int, cfg) -> None:
    """Up front: files, columns, and rows (every training row present, exactly one window per
    test row, none out of range), and no probe that needs patch tokens."""
    tokens = [k for k in cfg.probes if k in probes.TOKEN_KINDS]
    if tokens:
        raise _fail(spec, f"precomputed embeddings are pooled vectors only; expected probes "
                    f"without patch tokens, got {tokens} (drop them from 'probes')")
    for role, n in (("train", n_train), ("test", n_test)):
        p = path(spec, test_set, role)
        if not p.is_file():
            raise _fail(spec, f"expected {p} (or {directory(spec) / test_set / p.name}) for the "
                        f"{role} split of test set {test_set!r}, got no such file")
        names = pq.read_schema(p).names
        missing = [c for c in ("row", "start_s") if c not in names]
        if missing:
            raise _fail(spec, f"expected columns row and start_s in {p}, got {names}")
        _column(spec, p, names, cfg.pool)
        rows = pq.read_table(p, columns=["row"]).column("row").to_numpy()
        absent = np.setdiff1d(np.arange(n), rows)
        extra = rows[(rows < 0) | (rows >= n)]
        if len(absent) or len(extra):
            raise _fail(spec, f"expected rows 0..{n - 1} of the {role} split in {p}, got "
                        f"{len(absent)} missing (first {absent[:5].tolist()}) and "
                        f"{len(extra)} out of range")
        if role == "test" and len(rows) != n:
            raise _fail(spec, f"expected one window per test row ({n}) in {p}, got "
                        f"{len(rows)} windows")
