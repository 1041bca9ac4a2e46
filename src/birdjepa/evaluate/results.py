"""The results table on disk: `results.parquet` and `results.csv`, one row per (test set,
encoder, probe, k, seed, metric), and reading and merging such files.

Columns (SCHEMA, in order):
* key: `test_set`, `encoder`, `probe`, `k` ("1", "5", ..., "all"), `seed`, `metric`
  (`birdjepa.evaluate.metrics.METRICS`), `value`;
* the group's numbers (the same on every seed's row of one test set, encoder, probe, k and
  metric): `n_seeds`, `mean`, `sd` (over seeds), `min`, `max`, `lo`, `hi` (the interval) and
  `interval` (its method: "bootstrap-segments", "bootstrap-seeds+segments" or "min-max", see
  `birdjepa.evaluate.intervals`) and `chance` (the metric's chance level on this test set's
  labels, `birdjepa.evaluate.metrics.chance`; NaN in files written before it existed);
* the run: `n_train_recordings`, `n_train_windows`, `n_steps`, `loss_first`, `loss_last`,
  `fit_s`; the test set: `n_segments`, `n_labelled`, `n_classes`, `n_classes_scored`,
  `n_classes_cmap5`;
* the encoder's identity: `encoder_run_dir` (empty for a random init), `encoder_step` (-1 for
  one), `encoder_config_hash`, `encoder_digest`;
* the settings: `train_shards`, `test_shards`, `train_windows`, `window_s`, `hop_s` (NaN:
  tiling), `pool`, `n_boot` and every probe setting as `probe_<field>`.

Merging: rows are grouped by (test set and its `test_shards`, encoder and its
`encoder_digest`, probe, k); a group in a later file replaces the same group of an earlier one
whole (its seeds and intervals were computed together). Display names are keyed on identity:
two encoders (different digests) under one name, or two test splits (different shards) under
one test set name, are refused (ValueError naming both), never one silently dropped.
"""

import dataclasses
import pathlib

import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet

import birdjepa.common.outputs as outputs
import birdjepa.evaluate.probes as probes

KEY = ("test_set", "encoder", "probe", "k", "seed", "metric")
GROUP = ("test_set", "test_shards", "encoder", "encoder_digest", "probe", "k")
"""What a merged group is: display names with what they name (shards, checkpoint digest)."""

_PROBE_TYPES = {float: pa.float64(), int: pa.int64(), str: pa.string(), bool: pa.bool_()}

SCHEMA = pa.schema(
    [(c, pa.string()) for c in ("test_set", "encoder", "probe", "k")]
    + [("seed", pa.int64()), ("metric", pa.string()), ("value", pa.float64()),
       ("n_seeds", pa.int64())]
    + [(c, pa.float64()) for c in ("mean", "sd", "min", "max", "lo", "hi")]
    + [("interval", pa.string()), ("chance", pa.float64())]
    + [(c, pa.int64()) for c in ("n_train_recordings", "n_train_windows", "n_steps")]
    + [(c, pa.float64()) for c in ("loss_first", "loss_last", "fit_s")]
    + [(c, pa.int64()) for c in ("n_segments", "n_labelled", "n_classes", "n_classes_scored",
                                 "n_classes_cmap5")]
    + [("encoder_run_dir", pa.string()), ("encoder_step", pa.int64()),
       ("encoder_config_hash", pa.string()), ("encoder_digest", pa.string())]
    + [(c, pa.string()) for c in ("train_shards", "test_shards", "train_windows")]
    + [("window_s", pa.float64()), ("hop_s", pa.float64()), ("pool", pa.string()),
       ("n_boot", pa.int64()), ("protocol", pa.string()), ("sampling", pa.string())]
    + [(f"probe_{f.name}", _PROBE_TYPES[type(getattr(probes.ProbeConfig(), f.name))])
       for f in dataclasses.fields(probes.ProbeConfig)]
)
"""Every column of a results file, with its type."""


def to_table(rows: list[dict]) -> pa.Table:
    """The rows as a table of SCHEMA (a missing column is an error naming it)."""
    missing = sorted({c for r in rows for c in SCHEMA.names if c not in r})
    if missing:
        raise ValueError(f"result rows: expected every column of the schema, missing {missing}")
    return pa.Table.from_pylist([{c: r[c] for c in SCHEMA.names} for r in rows], schema=SCHEMA)


def write(rows: list[dict], out_dir: str | pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Write out_dir/results.parquet and out_dir/results.csv; their paths."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t = to_table(rows)
    paths = out / "results.parquet", out / "results.csv"
    with outputs.replacing(paths[0]) as tmp:
        pyarrow.parquet.write_table(t, tmp)
    with outputs.replacing(paths[1]) as tmp:
        pyarrow.csv.write_csv(t, tmp)
    return paths


def read(path: str | pathlib.Path) -> list[dict]:
    """Rows of a results.parquet or results.csv (a directory: its results.parquet)."""
    p = pathlib.Path(path)
    if p.is_dir():
        p = p / "results.parquet"
    if not p.is_file():
        raise FileNotFoundError(f"results: expected a results.parquet or results.csv file (or a "
                                f"directory holding one), got {str(path)!r}")
    if p.suffix == ".csv":
        opts = pyarrow.csv.ConvertOptions(column_types=SCHEMA, strings_can_be_null=False)
        t = pyarrow.csv.read_csv(p, convert_options=opts)
    else:
        t = pyarrow.parquet.read_table(p)
    missing = [c for c in KEY + ("value", "mean", "sd", "lo", "hi", "interval")
               if c not in t.column_names]
    if missing:
        raise ValueError(f"{p}: expected a birdjepa results table, missing columns {missing}")
    rows = t.to_pylist()
    for r in rows:  # files written before the column existed
        r.setdefault("chance", float("nan"))
        r.setdefault("protocol", "")
        r.setdefault("sampling", "exact")
    return rows


def merge(*files_rows: list[dict]) -> list[dict]:
    """Rows of several results, a later one's (test set, encoder, probe, k) groups replacing
    the earlier ones' whole; order of first appearance kept."""
    groups: dict[tuple, list[dict]] = {}
    for rows in files_rows:
        fresh: dict[tuple, list[dict]] = {}
        for r in rows:
            fresh.setdefault(tuple(r.get(c) for c in GROUP), []).append(r)
        groups.update(fresh)
    out = [r for rs in groups.values() for r in rs]
    _check_names(out)
    return out


def _check_names(rows: list[dict]) -> None:
    """Each display name names one thing: an encoder one digest, a test set one split."""
    for name, what, field in (("encoder", "encoder", "encoder_digest"),
                              ("test_set", "test set", "test_shards")):
        seen: dict[str, list] = {}
        for r in rows:
            ids = seen.setdefault(r[name], [])
            if r.get(field) not in ids:
                ids.append(r.get(field))
        for shown, ids in seen.items():
            if len(ids) > 1:
                raise ValueError(
                    f"{what} {shown!r}: expected one {field} per name, got {len(ids)} "
                    f"({', '.join(repr(i) for i in ids)}); these are different {what}s under "
                    f"one name: evaluate them under different names")
