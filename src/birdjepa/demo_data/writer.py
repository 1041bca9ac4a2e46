"""Writing a planned corpus as Hugging Face `datasets` on-disk shards (what
`Dataset.save_to_disk(out_dir, num_shards=K)` writes), atomically."""

import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import pathlib
import re
import time
import zlib

import pyarrow as pa

import birdjepa.common.outputs as outputs
import birdjepa.demo_data.catalogue as catalogue
import birdjepa.demo_data.codecs as codecs
import birdjepa.demo_data.synth as synth

BATCH_ROWS = 100
"""Rows per Arrow record batch, as `datasets` writes audio datasets."""

FEATURES: dict = {
    "audio": {"decode": False, "_type": "Audio"},
    "label": None,  # ClassLabel, filled in by _features()
    "species": {"dtype": "string", "_type": "Value"},
    "common_name": {"dtype": "string", "_type": "Value"},
    "recording_id": {"dtype": "string", "_type": "Value"},
    "codec": {"dtype": "string", "_type": "Value"},
    "subtype": {"dtype": "string", "_type": "Value"},
    "sample_rate": {"dtype": "int32", "_type": "Value"},
    "channels": {"dtype": "int32", "_type": "Value"},
    "duration_s": {"dtype": "float32", "_type": "Value"},
}

SCHEMA = pa.schema(
    [
        ("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ("label", pa.int64()),
        ("species", pa.string()),
        ("common_name", pa.string()),
        ("recording_id", pa.string()),
        ("codec", pa.string()),
        ("subtype", pa.string()),
        ("sample_rate", pa.int32()),
        ("channels", pa.int32()),
        ("duration_s", pa.float32()),
    ]
)


LABELS = "labels"
"""With noise recordings: the multilabel column (HF `Sequence(ClassLabel)` of the species):
[label] for a bird recording, [] for a noise one, so a run on it trains "nothing here" (sigmoid
targets of 0). The `label` column then has one more class, "noise" (an explicit noise class for
a softmax head)."""
NOISE = "noise"
"""The `label` class name of the noise recordings (id: the number of species)."""


def _features(noise: bool = False) -> dict:
    feats = dict(FEATURES)
    names = [s.code for s in catalogue.SPECIES]
    feats["label"] = {"names": names + [NOISE] if noise else names, "_type": "ClassLabel"}
    if noise:
        feats[LABELS] = {"feature": {"names": names, "_type": "ClassLabel"}, "_type": "Sequence"}
    return feats



def _make_row(plan: catalogue.Recording) -> dict:
    x = synth.synthesize(plan)
    code, name = (NOISE, "background noise") if plan.label < 0 else (
        catalogue.SPECIES[plan.label].code, catalogue.SPECIES[plan.label].name)
    rec_id = f"demo-{plan.seed}-{plan.index:06d}"
    _, subtype, ext = catalogue.CODECS[plan.codec]
    serial = zlib.crc32(rec_id.encode())
    return {
        "audio": {
            "bytes": codecs.encode(x, plan.sample_rate, plan.codec, serial),
            "path": f"{rec_id}.{ext}",
        },
        "label": plan.label if plan.label >= 0 else len(catalogue.SPECIES),
        LABELS: [plan.label] if plan.label >= 0 else [],  # dropped without the column
        "species": code,
        "common_name": name,
        "recording_id": rec_id,
        "codec": ext,
        "subtype": subtype,
        "sample_rate": plan.sample_rate,
        "channels": plan.channels,
        "duration_s": plan.n_frames / plan.sample_rate,
    }


# ---------------------------------------------------------------------------------------------
# Writing


def _shard_sizes(n: int, k: int) -> list[int]:
    """Contiguous shard sizes as `Dataset.shard(k, i, contiguous=True)` makes them."""
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def _rows(plans: list[catalogue.Recording], workers: int):
    if workers <= 1:
        yield from map(_make_row, plans)
        return
    # spawn, not fork: the caller may hold threads (JAX, pytest plugins).
    ctx = multiprocessing.get_context("spawn")
    ex = concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx)
    try:
        yield from ex.map(_make_row, plans)
    finally:
        # On an error or early close, do not wait for the rest of the corpus.
        ex.shutdown(wait=True, cancel_futures=True)


def write(
    out_dir: str | os.PathLike,
    *,
    n_recordings: int = 192,
    n_shards: int = 4,
    seed: int = 0,
    min_s: float = 5.0,
    max_s: float = 60.0,
    workers: int | None = None,
    overwrite: bool = False,
    verbose: bool = False,
    noise: int | None = None,
) -> dict:
    """Write the corpus to `out_dir` atomically and return a summary.

    The summary has `out_dir`, `shards` (paths), `rows_per_shard`, `n_recordings`, `species`
    (codes, the ClassLabel names), `species_names`, `label_counts`, `codec_counts`,
    `total_bytes` (of the shard files) and `seconds`. `noise` (None: neither): that many more
    recordings of background noise alone (no bird; `label` "noise", `labels` []), shuffled in
    among the others, and the `labels` multilabel column on every row. `workers` (default: up to 2 processes)
    changes only the speed, never the bytes. An existing non-empty `out_dir` is an error unless
    `overwrite`.
    """
    if n_recordings < 1 or not 1 <= n_shards <= n_recordings:
        raise ValueError(f"need 1 <= n_shards <= n_recordings, got {n_shards}, {n_recordings}")
    if not 0 < min_s <= max_s:
        raise ValueError(f"need 0 < min_s <= max_s, got {min_s}, {max_s}")
    if noise is not None and noise < 0:
        raise ValueError(f"noise: expected a number of recordings >= 0, got {noise}")
    out = pathlib.Path(out_dir)
    check_out_dir(out, overwrite)
    if workers is None:
        workers = min(2, os.cpu_count() or 1)

    t_start = time.perf_counter()
    plans = catalogue.plan_corpus(n_recordings, seed, min_s, max_s)
    if noise:
        plans = catalogue.with_noise(plans, noise, seed, min_s, max_s)
    labels = noise is not None
    n_recordings = len(plans)
    sizes = _shard_sizes(n_recordings, n_shards)
    names = [f"data-{i:05d}-of-{n_shards:05d}.arrow" for i in range(n_shards)]
    features = _features(labels)
    schema = SCHEMA if not labels else SCHEMA.insert(
        2, pa.field(LABELS, pa.list_(pa.int64())))
    schema = schema.with_metadata({"huggingface": json.dumps({"info": {"features": features}})})

    out.parent.mkdir(parents=True, exist_ok=True)
    rows = _rows(plans, workers)
    try:
        with outputs.replacing_dir(out, last="state.json") as tmp:
            codec_counts, label_counts = _write_shards(tmp, names, sizes, rows, schema, verbose)
            meta = [n_recordings, n_shards, seed, min_s, max_s, features] + (
                [noise] if labels else [])
            _write_metadata(tmp, names, features, fingerprint_of=meta,
                            description=f"birdjepa synthetic bird-song demo corpus: "
                                        f"{n_recordings} recordings of {len(catalogue.SPECIES)} "
                                        f"species, seed {seed}")
            record_all(tmp)
    finally:
        rows.close()

    shards = [out / n for n in names]
    return {
        "out_dir": str(out),
        "shards": [str(p) for p in shards],
        "rows_per_shard": sizes,
        "n_recordings": n_recordings,
        "species": [s.code for s in catalogue.SPECIES],
        "species_names": [s.name for s in catalogue.SPECIES],
        "label_counts": label_counts,
        "codec_counts": dict(sorted(codec_counts.items())),
        "total_bytes": sum(p.stat().st_size for p in shards),
        "seconds": time.perf_counter() - t_start,
    }


def _write_shards(tmp: pathlib.Path, names, sizes, rows, schema, verbose: bool):
    """Shard files of `sizes` rows each, in record batches of BATCH_ROWS; (codec, label) counts."""
    codec_counts: dict[str, int] = {}
    label_counts = [0] * len(catalogue.SPECIES)
    done, total = 0, sum(sizes)
    for name, size in zip(names, sizes, strict=True):
        with pa.OSFile(str(tmp / name), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
            batch: list[dict] = []
            for _ in range(size):
                row = next(rows)
                batch.append(row)
                key = row["codec"] if row["codec"] != "wav" else f"wav/{row['subtype']}"
                codec_counts[key] = codec_counts.get(key, 0) + 1
                if row["label"] < len(label_counts):  # a species, not noise
                    label_counts[row["label"]] += 1
                done += 1
                if len(batch) == BATCH_ROWS:
                    w.write_batch(pa.RecordBatch.from_pylist(batch, schema=schema))
                    batch = []
            if batch:
                w.write_batch(pa.RecordBatch.from_pylist(batch, schema=schema))
        if verbose:
            print(f"  {name}: {size} rows ({done}/{total})", flush=True)
    return codec_counts, label_counts


def _write_metadata(tmp: pathlib.Path, names, features: dict, *, fingerprint_of,
                    description: str) -> None:
    """state.json (`_data_files` lists the shards) and dataset_info.json, as datasets writes."""
    fingerprint = hashlib.sha256(json.dumps(fingerprint_of).encode()).hexdigest()[:16]
    state = {
        "_data_files": [{"filename": n} for n in names],
        "_fingerprint": fingerprint,
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": None,
    }
    info = {"citation": "", "description": description, "features": features, "homepage": "",
            "license": ""}
    (tmp / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    (tmp / "dataset_info.json").write_text(json.dumps(info, indent=2))


def check_out_dir(out: pathlib.Path, overwrite: bool) -> None:
    """Before anything is written: `out` is absent or empty, or with `overwrite` holds only an
    earlier demo corpus (every file listed, unchanged, in the ledger its writer left beside it:
    birdjepa.common.outputs); anything else there is a user's and is never replaced."""
    if not out.exists():
        return
    if not out.is_dir():
        raise FileExistsError(f"{out}: expected a directory to write the demo corpus into (or "
                              "none), got a file")
    if not any(out.iterdir()):
        return
    if not overwrite:
        raise FileExistsError(f"{out} exists and is not empty; --overwrite (overwrite=True) "
                              "replaces an earlier demo corpus there")
    foreign = [p for p in sorted(out.rglob("*"))
               if not p.is_dir() and p.name != outputs.LEDGER and not outputs.ours(p)]
    if foreign and _before_the_ledger(out):
        return
    if foreign:
        raise FileExistsError(f"{out} holds files the demo writer did not write (e.g. "
                              f"{foreign[0]}); --overwrite replaces only an earlier demo corpus: "
                              "choose another --out_dir")


def _before_the_ledger(out: pathlib.Path) -> bool:
    """A corpus this writer (or the soundscape writer) wrote before it kept a ledger: exactly
    its file names (shards, state.json, dataset_info.json) and the description only it
    writes, so that `make demo` in an older checkout still replaces its own corpus."""
    names = {p.name for p in out.iterdir()}
    shards = {n for n in names if re.fullmatch(r"data-\d{5}-of-\d{5}\.arrow", n)}
    if not shards or names - shards != {"state.json", "dataset_info.json"}:
        return False
    try:
        info = json.loads((out / "dataset_info.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and str(info.get("description", "")).startswith(
        ("birdjepa synthetic bird-song demo corpus", "birdjepa synthetic soundscapes"))


def record_all(root: pathlib.Path) -> None:
    """Every file under `root` in its directory's ledger: what `check_out_dir` recognises."""
    outputs.record(*[p for p in sorted(root.rglob("*"))
                     if p.is_file() and p.name != outputs.LEDGER])


