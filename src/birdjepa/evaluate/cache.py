"""Embedding every split once per encoder, with a cache keyed by what embeddings depend on.

A split (a training or test split of some test set) is embedded once per encoder and shared by
every test set, probe, k and seed that uses it. The cache file
`out_dir/embeddings/<encoder>/<role>-<key>.npz` is keyed by a sha256 over:

* the encoder's content: its checkpoint manifest digest (or its parameters' digest for a
  random initialisation) and its model config (pooling, compute dtype, ...);
* the transform: the `features.Windows` settings (window, hop, centre, frames, mels,
  normalisation), the pooling and the audio column;
* the data: `table.fingerprint` of the split (paths, sizes, mtimes, sha256 of head and tail),
  and for path-only audio each recording's `table.audio_identity` (path, size, mtime, inode;
  see there why not a content hash);
* CACHE_VERSION, bumped when the embedding code changes what it computes.

Never by a run directory's path or its step's name: retraining into the same run directory
gives a new manifest, so a new key.
"""

import dataclasses
import hashlib
import json
import pathlib
import sys
import time

import numpy as np

import birdjepa.common.outputs as outputs
import birdjepa.data.loader_config
import birdjepa.data.table as table
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.external as external
import birdjepa.evaluate.progress as progress
import birdjepa.models.features as features
import birdjepa.models.inference as inference

CACHE_VERSION = 2
"""Part of every cache key; bump it when `embed` changes what it computes."""


def windows(enc, cfg: eval_config.EvalConfig, role: str) -> features.Windows:
    """Training windows (centre crop or sliding) or test windows (one centre window per
    segment) for an encoder's input shape."""
    audio = enc.audio or inference.as_model(enc.model).audio  # every setting from the model
    if role == "test":
        return features.Windows.for_model(
            audio, window_s=cfg.window_s, centre=True, segment=cfg.segment,
            segment_columns=(cfg.segment_start_column, cfg.segment_end_column))
    return features.Windows.for_model(audio, window_s=cfg.window_s, hop_s=cfg.hop_s,
                                   centre=cfg.train_windows == "centre")


def pool_of(enc, cfg: eval_config.EvalConfig) -> str:
    return enc.model.cfg.pool if cfg.pool == "encoder" else cfg.pool


def layers_of(enc, cfg: eval_config.EvalConfig) -> tuple[int, ...]:
    """The blocks the multilayer probe reads for `enc` (cfg.layers resolved against its depth,
    each block once, in order); () when no multilayer probe is asked for."""
    if "multilayer" not in cfg.probes:
        return ()
    depth = enc.model.cfg.depth
    return tuple(sorted({min(max(i + depth if i < 0 else i, 0), depth - 1)
                         for i in cfg.layers}))


def cache_key(enc, source, w: features.Windows, pool: str, audio_column: str,
              data_fp: str, files: dict | None = None, layers: tuple[int, ...] = ()) -> str:
    """sha256 (16 hex) of everything the embeddings of `source` by `enc` depend on (`files`:
    where path-only audio is read, when audio_root or path_map is set)."""
    blob = json.dumps({
        "version": CACHE_VERSION, "encoder": enc.digest, "model": repr(enc.model.cfg),
        "windows": {k: v for k, v in dataclasses.asdict(w).items()  # keys of old caches kept
                    if (k, v) not in (("pad", "zero"),
                                      ("resampler", birdjepa.data.loader_config.LEGACY_RESAMPLER))},
        "pool": pool, "audio_column": audio_column,
        "data": data_fp, **({"files": files} if files else {}),
        **({"layers": list(layers)} if layers else {})}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _counted(batches, bar: progress.Progress):
    """Pass batches through, advancing `bar` by recordings done (row ids come in order)."""
    rows_done, n_windows = 0, 0
    for x, rows, starts in batches:
        n_windows += len(x)
        hi = int(rows.max()) + 1 if len(rows) else rows_done
        dt = max(time.perf_counter() - bar.t0, 1e-9)
        bar.update(max(0, hi - rows_done), extra=f"{n_windows} windows, "
                   f"{n_windows / dt:.0f} windows/s")
        rows_done = max(rows_done, hi)
        yield x, rows, starts


def _kept(batches, store: list):
    for b in batches:
        store.append(b)
        yield b


def _load(path: pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return dict(z)


def _save(path: pathlib.Path, arrays: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with outputs.replacing(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


def files(spec: eval_config.TestSet) -> dict:
    """A resolved test set's path-only audio settings ({} when it sets none)."""
    return {k: v for k, v in (("audio_root", spec.audio_root), ("path_map", spec.path_map))
            if v}


def _embed_split(encoders, source, role: str, n_rows: int, cfg, cache_dir: pathlib.Path,
                 verbose: bool, moved: dict) -> dict[str, dict]:
    """{encoder name: arrays} for one split: from the cache, or encoded from log-mel features
    computed once per window shape and shared by the encoders (`moved`: `files(spec)`)."""
    data_fp = table.fingerprint(source, cfg.audio_column)
    feats: dict = {}
    out = {}
    for enc in encoders:
        w, pool, layers = windows(enc, cfg, role), pool_of(enc, cfg), layers_of(enc, cfg)
        key = cache_key(enc, source, w, pool, cfg.audio_column, data_fp, moved, layers)
        path = cache_dir / enc.name / f"{role}-{key}.npz"
        if path.exists():
            out[enc.name] = _load(path)
            if verbose:
                print(f"embed {enc.name} {role}: from the cache ({path})", file=sys.stderr)
            continue
        label = f"embed {enc.name} {role} {pathlib.Path(str(source)).name}"
        with progress.Progress(label, n_rows, unit="recordings", enabled=verbose) as bar:
            if w in feats:
                batches = _counted(iter(feats[w]), bar)
            else:  # computed while the first encoder consumes them, kept for the others
                feats[w] = []
                batches = _counted(_kept(features.features(
                    source, w, batch_size=cfg.batch_size, audio_column=cfg.audio_column,
                    n_workers=cfg.n_workers, **moved), feats[w]), bar)
            arrays = inference.encode(enc.model, batches, (pool, "patches"),
                                      batch_size=cfg.batch_size, layers=layers)
        arrays["pooled"] = arrays.pop(pool)
        _save(path, arrays)
        out[enc.name] = arrays
    return out


def embed_all(encoders, plans, cfg: eval_config.EvalConfig, cache_dir: pathlib.Path, *,
              verbose: bool = True) -> dict[tuple[str, str, str], dict]:
    """{(encoder, "train" | "test", test set name): arrays "pooled", "patches", "row",
    "start_s"}; each distinct split is embedded once per encoder (its features held only
    while it is embedded)."""
    splits: dict[tuple[str, str, str], list[str]] = {}
    n_rows, moved = {}, {}
    for tp in plans:
        for role, source, n in (("train", tp.spec.train_shards, len(tp.y_train)),
                                ("test", tp.spec.test_shards, len(tp.y_test))):
            where = files(tp.spec)  # a split read with other path settings is another split
            split = (role, str(source), json.dumps(where, sort_keys=True))
            splits.setdefault(split, []).append(tp.spec.name)
            n_rows[split], moved[split] = n, where
    out = {}
    for enc in (e for e in encoders if e.model is None):  # precomputed: read, not embedded
        for tp in plans:
            for role in ("train", "test"):
                out[(enc.name, role, tp.spec.name)] = external.load(enc.run_dir, tp.spec.name,
                                                                    role, cfg.pool)
    encoders = [e for e in encoders if e.model is not None]
    for split, names in splits.items():
        role, source, _ = split
        got = _embed_split(encoders, source, role, n_rows[split], cfg, cache_dir, verbose,
                           moved[split]) if encoders else {}
        for enc_name, arrays in got.items():
            for name in names:
                out[(enc_name, role, name)] = arrays
    return out
