"""The demo corpus as BirdSet publishes it (`python -m birdjepa.demo_data OUT --layout birdset`).

What a user who ran BirdSet's loading script has in `~/.cache/huggingface/datasets`:

* `downloads/extracted/<sha256>/<name>.ogg`: the audio, 32 kHz mono Vorbis, one file per row;
* `DBD-research-group___birdset/<CONFIG>/0.0.4/<hash>/`: one Arrow file per split
  (`birdset-train.arrow`, `birdset-test_5s.arrow`) and `dataset_info.json`, with exactly
  BirdSet's features (`FEATURES`); the audio column is path-only: `{"bytes": None, "path": <abs>}`.

The train split holds the focal demo recordings with `detected_events` (the [start, end] seconds
of each phrase of the labelled species), `ebird_code` and `ebird_code_multilabel`. The `test_5s`
split holds demo soundscapes pre-cut into 5 s segment files named as BirdSet names them,
`{SITE}_{ID}_{YYYYMMDD}_{HHMMSS}_{START}_{END}.ogg`, with soundscape-relative
`start_time`/`end_time`, `ebird_code` None and the labels only in `ebird_code_multilabel`.
"""

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import time

import numpy as np
import pyarrow as pa

import birdjepa.demo_data.catalogue as catalogue
import birdjepa.demo_data.codecs as codecs
import birdjepa.demo_data.soundscape as soundscape
import birdjepa.demo_data.synth as synth
import birdjepa.demo_data.writer as writer

CONFIG = "DEMO"
"""The dataset config name (BirdSet's are HSN, NBP, XCM, XCL, ...)."""
SITE = "DMO"
"""The site code in the test_5s file names."""


def features(names: list[str]):
    """BirdSet's features (its loading script, v0.0.4), with `names` as the class list."""
    import datasets  # noqa: PLC0415 (optional dependency, only for this layout)

    def label():
        return datasets.ClassLabel(names=names)

    s, f, i = datasets.Value("string"), datasets.Value("float64"), datasets.Value("int64")
    return datasets.Features({
        # BirdSet's script says mono=True (datasets < 4); datasets >= 4 names it num_channels.
        "audio": _audio(datasets),
        "filepath": s, "start_time": f, "end_time": f, "low_freq": i, "high_freq": i,
        "ebird_code": label(),
        "ebird_code_multilabel": datasets.Sequence(label()),
        "ebird_code_secondary": datasets.Sequence(s),
        "call_type": s, "sex": s, "lat": f, "long": f, "length": i, "microphone": s,
        "license": s, "source": s, "local_time": s,
        "detected_events": datasets.Sequence(datasets.Sequence(f)),
        "event_cluster": datasets.Sequence(i),
        "peaks": datasets.Sequence(f),
        "quality": s, "recordist": s,
        "genus": label(), "species_group": label(), "order": label(),
        "genus_multilabel": datasets.Sequence(label()),
        "species_group_multilabel": datasets.Sequence(label()),
        "order_multilabel": datasets.Sequence(label()),
    })


def _audio(datasets):
    try:
        return datasets.Audio(sampling_rate=32000, mono=True, decode=False)
    except TypeError:
        return datasets.Audio(sampling_rate=32000, num_channels=1, decode=False)


def row(path: str, *, label: int | None, labels: list[int], start: float | None = None,
        end: float | None = None, events: list[list[float]] | None = None,
        length: int = 0) -> dict:
    """One row with BirdSet's columns, path-only audio."""
    genus = label if label is not None else None
    return {
        "audio": {"bytes": None, "path": path}, "filepath": path,
        "start_time": start, "end_time": end, "low_freq": 500, "high_freq": 12000,
        "ebird_code": label, "ebird_code_multilabel": labels, "ebird_code_secondary": [],
        "call_type": "song", "sex": None, "lat": 52.0, "long": 8.0, "length": length,
        "microphone": "focal", "license": "CC BY 4.0", "source": "demo", "local_time": "06:00",
        "detected_events": events or [], "event_cluster": [0] * len(events or []),
        "peaks": [(a + b) / 2 for a, b in (events or [])], "quality": "A", "recordist": "demo",
        "genus": genus, "species_group": genus, "order": genus,
        "genus_multilabel": labels, "species_group_multilabel": labels,
        "order_multilabel": labels,
    }


def events_of(plan: catalogue.Recording, merge_s: float = 0.3) -> list[list[float]]:
    """The labelled species' song as [start, end] seconds: where its stem is above 5 % of its
    peak envelope (20 ms frames), gaps shorter than `merge_s` merged; what an event detector
    would report on a clean recording."""
    song = synth.synthesize(plan, stems=True)["song"]
    hop = plan.sample_rate // 50
    n = len(song) // hop
    env = np.abs(song[: n * hop]).reshape(n, hop).max(1)
    on = env > 0.05 * (env.max() or 1.0)
    out: list[list[float]] = []
    for k in np.flatnonzero(on):
        t0, t1 = k * hop / plan.sample_rate, (k + 1) * hop / plan.sample_rate
        if out and t0 - out[-1][1] < merge_s:
            out[-1][1] = t1
        else:
            out.append([t0, t1])
    return [[round(a, 3), round(b, 3)] for a, b in out]


def write_split(path: str | os.PathLike, rows: list[dict], feats) -> None:
    """What load_dataset leaves in its cache: one Arrow stream per split, the features in its
    schema metadata, audio as stored (path-only: local files are not embedded). Rows are in
    storage form already, so there is no feature encoding (which would need an audio backend)."""
    import datasets.arrow_writer  # noqa: PLC0415 (optional dependency)

    table = pa.Table.from_pylist(rows, schema=feats.arrow_schema)
    with datasets.arrow_writer.ArrowWriter(features=feats, embed_local_files=False,
                                           path=str(path)) as w:
        w.write_table(table)
        w.finalize()


def _extracted(root: pathlib.Path, key: str) -> pathlib.Path:
    d = root / "downloads" / "extracted" / hashlib.sha256(key.encode()).hexdigest()
    d.mkdir(parents=True, exist_ok=True)
    return d


def _train_rows(root: pathlib.Path, n: int, seed: int, min_s: float, max_s: float) -> list:
    d = _extracted(root, f"train-{seed}")
    rows = []
    for p in catalogue.plan_corpus(n, seed, min_s, max_s):
        p = dataclasses.replace(p, codec="ogg", sample_rate=32000, channels=1,
                                n_frames=int(p.n_frames / p.sample_rate * 32000))
        path = d / f"XC{100000 + p.index}.ogg"
        path.write_bytes(codecs.encode(synth.synthesize(p), 32000, "ogg", p.index))
        rows.append(row(str(path), label=p.label, labels=[p.label], events=events_of(p),
                        length=p.n_frames // 32000))
    return rows


def _test_rows(root: pathlib.Path, n_soundscapes: int, n_segments: int, seed: int) -> list:
    d = _extracted(root, f"test_5s-{seed}")
    rows = []
    for plan in soundscape.plan_soundscapes(n_soundscapes, seed, n_segments=n_segments):
        plan = dataclasses.replace(plan, codec="ogg", sample_rate=32000)
        x, labels = soundscape.synthesize(plan)
        seg = int(plan.segment_s * 32000)
        stamp = f"2015{7 + plan.index // 28:02d}{1 + plan.index % 28:02d}_061805"
        for j, lab in enumerate(labels):
            a, b = j * plan.segment_s, (j + 1) * plan.segment_s
            name = f"{SITE}_{plan.index + 1:03d}_{stamp}_{a:03.0f}_{b:03.0f}.ogg"
            piece = x[j * seg:(j + 1) * seg, None]
            (d / name).write_bytes(codecs.encode(piece, 32000, "ogg", plan.index * 1000 + j))
            rows.append(row(str(d / name), label=None, labels=sorted(lab), start=a, end=b,
                            length=int(plan.segment_s)))
    return rows


def write(out_dir: str | os.PathLike, *, n_recordings: int = 96, n_soundscapes: int = 6,
          n_segments: int = 12, seed: int = 0, min_s: float = 5.0, max_s: float = 30.0,
          overwrite: bool = False) -> dict:
    """Write the BirdSet-shaped demo cache under `out_dir`; return {"dataset_dir", "train",
    "test_5s", "n_train", "n_test", "seconds"} (`dataset_dir:train` is what a loader takes)."""
    out = pathlib.Path(out_dir).absolute()
    writer.check_out_dir(out, overwrite)
    if out.exists() and any(out.iterdir()):  # an earlier demo cache, every file of it ours
        shutil.rmtree(out)
    t0 = time.perf_counter()
    names = [s.code for s in catalogue.SPECIES]
    feats = features(names)
    splits = {"train": _train_rows(out, n_recordings, seed, min_s, max_s),
              "test_5s": _test_rows(out, n_soundscapes, n_segments, seed + 2)}
    ds_dir = out / "DBD-research-group___birdset" / CONFIG / "0.0.4" / "demo"
    ds_dir.mkdir(parents=True)
    info = {"builder_name": "birdset", "config_name": CONFIG, "dataset_name": "birdset",
            "version": {"version_str": "0.0.4"}, "features": feats.to_dict(), "splits": {}}
    for split, rows in splits.items():
        write_split(ds_dir / f"birdset-{split}.arrow", rows, feats)
        info["splits"][split] = {"name": split, "num_examples": len(rows),
                                 "dataset_name": "birdset"}
    (ds_dir / "dataset_info.json").write_text(json.dumps(info, indent=2))
    writer.record_all(out)
    return {"dataset_dir": str(ds_dir), "train": f"{ds_dir}:train",
            "test_5s": f"{ds_dir}:test_5s", "n_train": len(splits["train"]),
            "n_test": len(splits["test_5s"]), "seconds": time.perf_counter() - t0}
