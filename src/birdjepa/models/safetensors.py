"""A dependency-free `safetensors` reader and writer on numpy (the format Hugging Face and
PyTorch users share weights in; https://github.com/huggingface/safetensors).

File layout: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON
`{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}`,
then the raw little-endian tensor bytes; offsets count from the end of the header. bfloat16
tensors are read as float32 (exactly: bfloat16 is the top half of float32).
"""

import json
import math
import os
import pathlib

import ml_dtypes
import numpy as np

DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
NAMES = {v: k for k, v in DTYPES.items()}
MAX_HEADER = 100 * 2**20
MAX_DIMS = 32  # numpy 1's limit (numpy 2 allows 64)
MAX_BYTES = 2**63 - 1  # numpy's largest array, in bytes


class FormatError(ValueError):
    """A file that is not a valid safetensors file; the message names the file and the fault."""


def read_header(path: str | os.PathLike) -> tuple[dict, dict, int]:
    """({name: entry}, metadata, byte offset of the data) of a safetensors file. As the reference
    implementation, it requires the tensors to tile the data exactly: sorted by offset, each
    begins where the one before ends, and the last ends at the end of the file."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise FormatError(f"{path}: expected a .safetensors file, got a directory")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise FormatError(f"{path}: expected a safetensors file, got {size} bytes")
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER:
            raise FormatError(f"{path}: header length: expected at most {MAX_HEADER} bytes "
                              f"(the 100 MiB limit), got {n}")
        if n > size - 8:
            raise FormatError(f"{path}: header length {n} exceeds the file ({size} bytes): "
                              "not a safetensors file (a PyTorch .bin/.pt is a zip archive)")
        header = _parse(path, f.read(n))
    meta = header.pop("__metadata__", {}) or {}
    if not isinstance(meta, dict):
        raise FormatError(f"{path}: __metadata__: expected a JSON object, got {meta!r:.80}")
    data_len = size - 8 - n
    for name, e in header.items():
        _check_entry(path, name, e)
        begin, end = e["data_offsets"]
        itemsize = DTYPES[e["dtype"]].itemsize
        span = itemsize * math.prod(max(d, 1) for d in e["shape"])
        if span > MAX_BYTES:
            raise FormatError(f"{path}: tensor {name!r}: shape {e['shape']!r:.80}: expected at "
                              f"most {MAX_BYTES} bytes of {e['dtype']} (numpy's limit, zero "
                              f"dimensions aside), got {span}")
        want = itemsize * math.prod(e["shape"])
        if not begin <= end <= data_len or end - begin != want:
            raise FormatError(f"{path}: tensor {name!r}: data_offsets {[begin, end]} do not "
                              f"hold {e['dtype']} {e['shape']} ({want} bytes) in {data_len} "
                              "data bytes")
    _check_layout(path, header, data_len)
    return header, meta, 8 + n


def _parse(path, text: bytes) -> dict:
    """The header's JSON object; FormatError for anything else (bad UTF-8 or JSON, integers of
    over 4300 digits, nesting deeper than Python's recursion limit)."""
    try:
        header = json.loads(text)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, int digit limit
        raise FormatError(f"{path}: header is not JSON ({str(e):.200})") from None
    except RecursionError:
        raise FormatError(f"{path}: header: expected a JSON object of tensors, got JSON nested "
                          "deeper than Python's recursion limit") from None
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header: expected a JSON object of tensors, got a JSON "
                          f"{type(header).__name__}")
    return header


def _check_entry(path, name: str, e) -> None:
    """A header entry with a known dtype, a shape of ints >= 0 and two int data_offsets."""
    if not isinstance(e, dict):
        raise FormatError(f"{path}: tensor {name!r}: expected an object with dtype, shape and "
                          f"data_offsets, got {e!r:.80}")
    if not isinstance(e.get("dtype"), str) or e["dtype"] not in DTYPES:
        raise FormatError(f"{path}: tensor {name!r}: dtype {e.get('dtype')!r:.80} not one of "
                          f"{sorted(DTYPES)}")
    ints = lambda v: isinstance(v, list) and all(  # noqa: E731
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v)
    if not ints(e.get("shape")):
        raise FormatError(f"{path}: tensor {name!r}: shape: expected a list of ints >= 0, got "
                          f"{e.get('shape')!r:.80}")
    if len(e["shape"]) > MAX_DIMS:
        raise FormatError(f"{path}: tensor {name!r}: shape: expected at most {MAX_DIMS} "
                          f"dimensions, got {len(e['shape'])}")
    if not (ints(e.get("data_offsets")) and len(e["data_offsets"]) == 2):
        raise FormatError(f"{path}: tensor {name!r}: data_offsets: expected [begin, end], got "
                          f"{e.get('data_offsets')!r:.80}")


def _check_layout(path, header: dict, data_len: int) -> None:
    """Tensors (in any order in the header) that tile the data bytes: no overlap, no gap, no
    trailing bytes (the reference implementation's InvalidOffset / MetadataIncompleteBuffer)."""
    pos, prev = 0, None
    for name, e in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, end = e["data_offsets"]
        if begin != pos:
            after = f"where tensor {prev[0]!r} {prev[1]} ends" if prev else "(the first tensor)"
            fault = (f"overlaps tensor {prev[0]!r} {prev[1]}" if begin < pos
                     else f"leaves bytes [{pos}, {begin}) unused")
            raise FormatError(f"{path}: tensor {name!r}: data_offsets {[begin, end]} {fault}: "
                              f"expected it to begin at {pos} {after}, got {begin}")
        pos, prev = end, (name, [begin, end])
    if pos != data_len:
        last = f"tensor {prev[0]!r} {prev[1]}" if prev else "the header (no tensors)"
        raise FormatError(f"{path}: expected the tensors to end at the end of the file's "
                          f"{data_len} data bytes, got {data_len - pos} trailing bytes after "
                          f"{last}")


def check_weights(arrays: dict[str, np.ndarray], what: str) -> None:
    """Weights as an encoder needs them: every tensor floating point and finite; otherwise a
    one-line FormatError naming `what`, the tensor and the fault."""
    for name, a in arrays.items():
        if not np.issubdtype(a.dtype, np.floating):
            raise FormatError(f"{what}: tensor {name!r}: expected floating-point weights, got "
                              f"dtype {a.dtype}")
        # As the model holds them: float32 (1e300 in a F64 tensor becomes inf there).
        with np.errstate(over="ignore"):
            as_used = a if a.dtype.itemsize <= 4 else a.astype(np.float32)
        bad = int(a.size - np.count_nonzero(np.isfinite(as_used)))
        if bad:
            raise FormatError(f"{what}: tensor {name!r}: expected finite weights in float32, got "
                              f"{bad} NaN, infinite or out-of-range value(s) of {a.size}")


def load(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """({name: array}, metadata); floating tensors of 16 bits come back as float32."""
    header, meta, base = read_header(path)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        a = raw[base + begin : base + end].view(DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = a.astype(np.float32) if e["dtype"] in ("BF16", "F16") else np.array(a)
    return out, meta


def save(tensors: dict[str, np.ndarray], path: str | os.PathLike,
         metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` (C order, little-endian) with string `metadata`, names in sorted order."""
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    blobs, offset = [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        if dt not in NAMES:
            raise TypeError(f"tensor {name!r}: dtype {a.dtype} has no safetensors name")
        b = a.astype(dt, copy=False).tobytes()
        header[name] = {"dtype": NAMES[dt], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    path = pathlib.Path(path)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)
