"""The output vocabulary of `birdjepa.embeddings`, `python -m birdjepa.embed` and `python -m
birdjepa.predict`, in one place: where a window comes from (`file`, or the dataset's `row` and
its other columns), when (`start_s`, `end_s`, `duration_s`, `padded_s`), and what the encoder
made of it (`emb_<pool>`, `patches`)."""

import numpy as np

RESERVED = ("file", "row", "start_s", "end_s", "duration_s", "padded_s", "class", "confidence",
            "class_index", "patches")
"""Output column names (and `emb_<pool>`); a dataset column of such a name is written as
source_<name> (`carried`)."""


def carried(name: str) -> str:
    """The output name of a dataset column `name`: source_<name> where `name` is an output's
    (RESERVED, emb_*) or itself starts with source_, else `name`. One-to-one, and never an
    output's name: `start_s` and `source_start_s` become `source_start_s` and
    `source_source_start_s`."""
    return f"source_{name}" if name in RESERVED or name.startswith(("emb_", "source_")) else name


def timing(rows: np.ndarray, start_s: np.ndarray, length_s, durations: dict) -> dict:
    """start_s, end_s (never past the recording's end), duration_s (the recording's, from
    `durations` {row: seconds}) and padded_s (seconds of the window's input past that end) of
    windows of `length_s` seconds (one number, or one per window), float64."""
    start = np.asarray(start_s, np.float64)
    dur = np.asarray([durations[r] for r in rows], np.float64).reshape(start.shape)
    end = np.minimum(start + length_s, dur)
    return {"start_s": start, "end_s": end, "duration_s": dur,
            "padded_s": np.maximum(start + length_s - end, 0.0)}


def vector_name(pool: str) -> str:
    """The column of a pool's vectors: emb_cls, emb_mean; the patch tokens are `patches`."""
    return pool if pool == "patches" else f"emb_{pool}"


def embedded(got: dict, pools: tuple[str, ...], length_s, durations: dict,
             paths: list[str] | None) -> dict[str, np.ndarray]:
    """`birdjepa.embeddings`'s result from `inference.encode`'s `got` ({pool, row, start_s}): row,
    file (`paths[row]`, for path sources), the `timing` columns, then emb_<pool> / patches."""
    rows = got["row"].astype(np.int64)
    out = {"row": rows, **({"file": np.asarray(paths, str)[rows]} if paths else {}),
           **timing(rows, got["start_s"], length_s, durations)}
    return out | {vector_name(p): got[p] for p in pools}
