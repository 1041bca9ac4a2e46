"""Few-shot subsets of a training split: which rows (`sample`), which rows the field allows
(`lenient`), and the split written with only them (`write`,
`python -m birdjepa.sources fewshot SRC --out_dir DST --k 5 --seed 0`).

The same rows serve three uses, so that they can be compared: the probe's k training
recordings per class in `evaluate`, the split a supervised baseline is trained on with only
those labels (`--keep labelled`), and the split a semi-supervised run sees with every other
row's labels removed (`--keep all`: the other rows stay, unlabelled).

Bird-MAE's few-shot protocol (arXiv 2504.12880, its `LenientCondition`) draws only from
recordings of at most 20 s without secondary labels, k per class, without filling a class that
has fewer (`sample(..., eligible=...)`), with three sampling seeds.
"""

import dataclasses
import json
import os
import pathlib
import sys

import numpy as np
import pyarrow as pa
from jaxtyping import Bool

import birdjepa.common.cli_args as cli_args
import birdjepa.common.outputs as outputs
import birdjepa.data.audio
import birdjepa.data.from_annotations as from_annotations
import birdjepa.data.ipc
import birdjepa.data.table as table

LENIENT_MAX_S = 20.0
"""Bird-MAE's lenient condition: recordings of at most this many seconds."""
SECONDARY_COLUMN = "ebird_code_secondary"
"""BirdSet's column of secondary species (a list of names)."""


def sample(labels_nc: Bool[np.ndarray, "n c"], k: int | None, *, seed: int,
           names: list[str] | None = None,
           eligible: Bool[np.ndarray, " n"] | None = None) -> np.ndarray:
    """Sorted row indices with `k` rows of each class (all rows when `k` is None).

    Classes are filled in order, each from the rows holding it that were not taken yet, so a
    multilabel row counts once, for the class that took it. Deterministic in (labels, k, seed,
    eligible). Without `eligible`: exactly k rows per class, and a class with fewer is a
    ValueError naming it. With `eligible` (Bird-MAE's lenient sampling): only eligible rows, at
    most k per class; a class with fewer eligible rows keeps what it has (count them with
    `labels_nc[rows].sum(0)`).
    """
    y = np.asarray(labels_nc, bool)
    if k is None:
        return np.arange(len(y)) if eligible is None else np.flatnonzero(eligible)
    if k < 1:
        raise ValueError(f"expected k >= 1 or None (all), got {k}")
    ok = np.ones(len(y), bool) if eligible is None else np.asarray(eligible, bool)
    if ok.shape != (len(y),):
        raise ValueError(f"eligible: expected shape ({len(y)},), got {ok.shape}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, k, 0xF5]))
    taken = np.zeros(len(y), bool)
    for c in range(y.shape[1]):
        pool = np.flatnonzero(y[:, c] & ~taken & ok)
        if len(pool) < k and eligible is None:
            name = f"class {c}" + (f" ({names[c]!r})" if names else "")
            n_all = int(y[:, c].sum())
            shared = "" if n_all == len(pool) else (
                f" left ({n_all} hold it; a row of several classes counts for one)")
            raise ValueError(
                f"few-shot k={k}: expected >= {k} training rows per class, {name} has "
                f"{len(pool)}{shared}"
            )
        taken[rng.choice(pool, size=min(k, len(pool)), replace=False)] = True
    return np.flatnonzero(taken)


@dataclasses.dataclass(frozen=True)
class Lenient:
    """Which rows Bird-MAE's lenient condition allows, and why the others are out."""

    eligible: np.ndarray
    """(rows,) bool: at most `max_s` seconds and no secondary label."""
    too_long: int
    """Rows longer than `max_s`."""
    secondary: int
    """Rows (of at most max_s) with a secondary label."""
    unknown_length: int
    """Rows whose header gives no length (left out: the condition cannot be checked)."""
    has_secondary_column: bool
    """False: the split has no secondary-label column, so only the length was checked."""


def lenient(source, *, audio_column: str = "audio", max_s: float = LENIENT_MAX_S,
            secondary_column: str = SECONDARY_COLUMN, audio_root: str = "",
            path_map: dict[str, str] | None = None) -> Lenient:
    """Bird-MAE's lenient condition over the rows of `source`: a recording's length from its
    header (n_frames / sample_rate), its secondary labels from `secondary_column` (a list
    column; absent: none known, and the result says so)."""
    cols = table.column_names(source)
    has_sec = secondary_column in cols
    n_sec = np.zeros(0, np.int64)
    if has_sec:
        sec = table.read(source, [secondary_column]).column(0).combine_chunks()
        n_sec = np.asarray([len(v) if v else 0 for v in sec.to_pylist()], np.int64)
    durations = [_durations(part, audio_column, audio_root, path_map)  # one shard at a time
                 for part in ([source] if table.is_dataset(source)
                              else birdjepa.data.resolve_shards(source))]
    dur = np.concatenate(durations) if durations else np.zeros(0)
    if not has_sec:
        n_sec = np.zeros(len(dur), np.int64)
    known = np.isfinite(dur)
    short = known & (np.nan_to_num(dur, nan=np.inf) <= max_s)
    return Lenient(eligible=short & (n_sec == 0), too_long=int((known & ~short).sum()),
                   secondary=int((short & (n_sec > 0)).sum()),
                   unknown_length=int((~known).sum()), has_secondary_column=has_sec)


def _durations(part, audio_column: str, audio_root: str, path_map) -> np.ndarray:
    """(rows,) seconds of one shard's (or dataset's) recordings from their headers, NaN where
    unknown (no audio, an unreadable header, no frame count)."""
    items = table.read_audio(part, audio_column, audio_root=audio_root, path_map=path_map)
    dur = np.full(len(items), np.nan)
    for i, item in enumerate(items):
        if item is None:
            continue
        try:
            h = birdjepa.data.audio.info(item)
        except Exception:  # unreadable: its length is unknown, the row stays out
            continue
        if h.get("n_frames") and h.get("sample_rate"):
            dur[i] = h["n_frames"] / h["sample_rate"]
    return dur


def _absolute_audio(t: pa.Table, column: str, shard: str) -> pa.Table:
    """`t` with each relative path of a path-only audio struct made absolute (it was relative
    to the source shard's directory, which the written split does not share)."""
    if column not in t.column_names or not pa.types.is_struct(t.schema.field(column).type):
        return t
    col = t.column(column).combine_chunks()
    typ = col.type
    if typ.get_field_index("path") < 0:
        return t
    base = os.path.dirname(os.path.abspath(shard))
    fixed = [p if (p is None or os.path.isabs(p) or (b is not None)) else
             os.path.normpath(os.path.join(base, p))
             for p, b in zip(col.field("path").to_pylist(), col.field("bytes").to_pylist()
                             if typ.get_field_index("bytes") >= 0 else [None] * len(col),
                             strict=True)]
    fields = [col.field(i) if typ.field(i).name != "path" else pa.array(fixed, typ.field(i).type)
              for i in range(typ.num_fields)]
    new = pa.StructArray.from_arrays(fields, fields=list(typ), mask=col.is_null())
    return t.set_column(t.column_names.index(column), t.schema.field(column), new)


def _relabel(t: pa.Table, column: str, new: dict[int, int]) -> pa.Table:
    """`t` with the int `column` of row i set to new[i]."""
    i = t.column_names.index(column)
    col = t.column(column).combine_chunks()
    if not pa.types.is_integer(col.type):
        raise ValueError(f"labels: expected an int label column {column!r}, got {col.type}")
    vals = col.to_pylist()
    for r, v in new.items():
        vals[r] = v
    return t.set_column(i, t.schema.field(column), pa.array(vals, col.type))


def write(source, out_dir: str | os.PathLike, rows: np.ndarray, *, label_column: str,
          keep: str = "labelled", audio_column: str = "audio", labels: np.ndarray | None = None,
          note: str = "") -> pathlib.Path:
    """Write `source` with only `rows` labelled into `out_dir` (one Arrow stream file,
    `state.json`, the source's features): `keep="labelled"` writes those rows alone (a
    supervised baseline's split), `keep="all"` every row, the others' `label_column` null
    (unlabelled: the objectives mask them). `labels` ((len(rows),) class ids, for an int
    label column) replaces those rows' labels (pseudo-labels). Shards are read one at a
    time."""
    if keep not in ("labelled", "all"):
        raise ValueError(f"keep: expected 'labelled' or 'all', got {keep!r}")
    rows = np.asarray(rows)
    if labels is not None and np.shape(labels) != rows.shape:
        raise ValueError(f"labels: expected shape {rows.shape} (one per row), got "
                         f"{np.shape(labels)}")
    new = None if labels is None else dict(zip(rows.tolist(), np.asarray(labels).tolist(),
                                               strict=True))
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [source] if table.is_dataset(source) else birdjepa.data.resolve_shards(source)
    path = out_dir / from_annotations.SHARD
    start, written, schema = 0, None, None
    with outputs.replacing(path) as tmp, pa.OSFile(str(tmp), "wb") as f:
        for shard in files:
            t = table.read(shard, table.column_names(shard)) if table.is_dataset(shard) else \
                birdjepa.data.ipc.read_table(shard)
            n = len(t)
            chosen = np.zeros(n, bool)
            chosen[rows[(rows >= start) & (rows < start + n)] - start] = True
            if new is not None:
                t = _relabel(t, label_column, {r - start: v for r, v in new.items()
                                               if start <= r < start + n})
            start += n
            if not table.is_dataset(shard):
                t = _absolute_audio(t, audio_column, shard)
            if keep == "labelled":
                t = t.filter(pa.array(chosen))
            else:
                i = t.column_names.index(label_column)
                col = t.column(label_column).combine_chunks()
                t = t.set_column(i, t.schema.field(label_column),
                                 pa.compute.if_else(pa.array(chosen), col,
                                                    pa.nulls(n, col.type)))
            if written is None:
                schema = t.schema
                written = pa.ipc.new_stream(f, schema)
            written.write_table(t.cast(schema))
        if start <= int(rows.max(initial=-1)):  # nothing replaced
            raise ValueError(f"rows: expected ids < {start} (the rows of {source}), got "
                             f"{int(rows.max())}")
        if written is not None:
            written.close()
    meta = dict(schema.metadata or {})
    if b"huggingface" not in meta:  # features from the source's dataset_info.json, if any
        info = pathlib.Path(files[0] if isinstance(files[0], str) else "").parent / \
            "dataset_info.json"
        feats = json.loads(info.read_text()).get("features") if info.is_file() else None
        if feats is None:
            outputs.record(path)
            return path
        meta[b"huggingface"] = json.dumps({"info": {"features": feats}}).encode()
    from_annotations.write_state(out_dir, pa.table(
        {c: pa.array([], schema.field(c).type) for c in schema.names}).replace_schema_metadata(
            meta), note or f"birdjepa fewshot: {len(rows)} labelled rows of {source}")
    outputs.record(path, out_dir / "state.json", out_dir / "dataset_info.json")
    return path


def check_out_dir(out_dir: str | os.PathLike) -> None:
    """`out_dir` new, or holding only what an earlier `write` wrote there, unchanged (its
    ledger, birdjepa.common.outputs): another file (another split's shards, or a dataset of
    the user's with the same file names) would be read with the subset, or replaced."""
    d = pathlib.Path(out_dir)
    if d.exists() and not d.is_dir():
        raise ValueError(f"--out_dir: expected a directory, got the file {str(d)!r}")
    other = sorted(p.name for p in d.iterdir() if p.name != outputs.LEDGER
                   and not outputs.ours(p)) if d.is_dir() else []
    if other:
        raise ValueError(f"--out_dir: expected a new directory or an earlier subset, got "
                         f"{str(d)!r} holding {', '.join(other[:5])}")


def add_options(p: cli_args.Parser) -> cli_args.Parser:
    """Every option of `python -m birdjepa.sources fewshot`, in one place."""
    p.add_argument("src", metavar="SRC", help="the training split (shards, DIR:SPLIT)")
    p.add_argument("--out_dir", required=True, help="where the subset split is written")
    p.add_argument("--k", type=int, required=True, metavar="K",
                   help="labelled recordings per class (>= 1)")
    p.add_argument("--seed", type=int, default=0, metavar="SEED",
                   help="sampling seed, as evaluate's seeds")
    p.add_argument("--label_column", default="label", help="int or list<int> label column")
    p.add_argument("--audio_column", default="audio", help="audio column (lengths, --lenient)")
    p.add_argument("--keep", choices=("labelled", "all"), default="labelled",
                   help="labelled: only the k rows per class (a supervised baseline's split); "
                   "all: every row, the others unlabelled (a semi-supervised run's split)")
    p.add_flag("lenient", "Bird-MAE's lenient sampling: only recordings of at most 20 s "
               "without secondary labels, at most k per class")
    return p


def run(a, resolve) -> int:
    """`python -m birdjepa.sources fewshot`: the rows evaluate's probe trains on for (k,
    seed), written as a split; prints the rows per class."""
    if a.k < 1:
        return cli_args.fail(ValueError(f"--k: expected an int >= 1, got {a.k}"))
    try:
        resolve(a.src)
        check_out_dir(a.out_dir)
        names = table.class_names(a.src, a.label_column)
        tbl = table.read(a.src, [a.label_column])
        col = tbl.column(0).combine_chunks()
        ids = (col.flatten() if hasattr(col.type, "value_type") else col).drop_null()
        n_classes = len(names) if names else int(max(ids.to_pylist(), default=-1)) + 1
        hi = table.multi_hot(tbl, a.label_column, n_classes)
        elig = lenient(a.src, audio_column=a.audio_column) if a.lenient else None
        rows = sample(hi, a.k, seed=a.seed, names=names,
                      eligible=None if elig is None else elig.eligible)
        out = write(a.src, a.out_dir, rows, label_column=a.label_column, keep=a.keep,
                    audio_column=a.audio_column)
    except FileNotFoundError as e:  # SRC, or a path-only row's audio
        return cli_args.fail(ValueError(f"expected an existing file, got {e.filename!r} "
                                        f"({e.strerror}; SRC was {a.src!r})"))
    except (ValueError, KeyError) as e:
        return cli_args.fail(e)
    per = hi[rows].sum(0)
    shown = names or [str(i) for i in range(len(per))]
    print(f"wrote {out.parent}: {len(rows)} labelled rows (k={a.k}, seed {a.seed}"
          f"{', lenient' if a.lenient else ''}), keep={a.keep}")
    print("labelled rows per class: " + ", ".join(f"{c} {int(n)}" for c, n in
                                                  zip(shown, per, strict=True)))
    if elig is not None:
        print(f"lenient: {int(elig.eligible.sum())} eligible, {elig.too_long} longer than "
              f"{LENIENT_MAX_S:g} s, {elig.secondary} with secondary labels, "
              f"{elig.unknown_length} of unknown length"
              + ("" if elig.has_secondary_column else
                 f" (no {SECONDARY_COLUMN} column: secondary labels not checked)"),
              file=sys.stderr)
    return 0
