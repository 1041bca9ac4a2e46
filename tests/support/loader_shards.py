"""Write small Hugging Face-style Arrow shards for the loader tests (pyarrow only).

Schema as `datasets` writes it: audio struct {bytes: binary, path: string}, label int64. The
payload of row i is b"row-%08d" % i (or b"CORRUPT..." for rows listed in `corrupt`), which the
loader's DebugTransform hashes into features; "CORRUPT" payloads fail to transform.
"""

import os

import pyarrow as pa
import pyarrow.ipc

AUDIO = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
INT64 = pa.int64()


def table(rows: range, labels=None, corrupt=(), label_type=INT64) -> pa.Table:
    payload = [b"CORRUPT-%08d" % i if i in corrupt else b"row-%08d" % i for i in rows]
    audio = pa.array([{"bytes": p, "path": f"{i}.ogg"} for i, p in zip(rows, payload, strict=True)],
                     type=AUDIO)
    lab = [labels(i) for i in rows] if labels else [i % 10 for i in rows]
    return pa.table({"audio": audio, "label": pa.array(lab, type=label_type)})


def write(path, tbl: pa.Table, fmt: str = "stream", batch_rows: int = 50) -> str:
    path = os.fspath(path)
    new = pa.ipc.new_stream if fmt == "stream" else pa.ipc.new_file
    with pa.OSFile(path, "wb") as sink, new(sink, tbl.schema) as w:
        for b in tbl.to_batches(max_chunksize=batch_rows):
            w.write_batch(b)
    return path


def corpus(d, sizes=(300, 200, 277), corrupt=(), fmts=None, labels=None) -> list[str]:
    """Shards of consecutive global rows; returns their paths in order."""
    paths, start = [], 0
    for k, n in enumerate(sizes):
        fmt = fmts[k] if fmts else ("file" if k == 1 else "stream")
        rows = range(start, start + n)
        paths.append(write(os.path.join(d, f"shard-{k:03d}.arrow"),
                           table(rows, labels=labels, corrupt=set(corrupt)), fmt))
        start += n
    return paths
