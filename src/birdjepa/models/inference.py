"""`birdjepa.embeddings`: frozen-encoder embeddings of audio, through exactly the training transform.

The windows become encoder input in birdjepa.models.features (`features.Windows`, `features`: decode,
resample, Kaldi log-mel, normalise, exactly the training transform); here they are encoded
(`encode`, `embeddings`, `write`). Every input setting comes from the model (`as_model`), never
from a default.
"""

import copy
import dataclasses
import os
import pathlib
import sys
import time

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pyarrow as pa

import birdjepa.common.outputs as outputs
import birdjepa.data
import birdjepa.data.audio
import birdjepa.data.loader_config
import birdjepa.data.paths
import birdjepa.data.table as table
import birdjepa.model
import birdjepa.models
import birdjepa.models.artifact
import birdjepa.models.bird_mae
import birdjepa.models.columns as columns
import birdjepa.models.failures
import birdjepa.models.features as features

POOLS = ("cls", "mean", "patches")


def as_model(x, *, step: int | None = None) -> birdjepa.models.Model:
    """What embedding takes as a model, as a birdjepa.models.Model: a path (a run, an export
    directory, "bird-mae-base:WEIGHTS") through birdjepa.models.open_model, the one reading of
    a model spec; a Model as it is; a bare ViT with its input settings: Bird-MAE's published
    input for a bird-mae-* preset (what `birdjepa.models.load` returns), else those of a run
    on the loader's defaults."""
    if isinstance(x, str | os.PathLike):
        return birdjepa.models.open_model(x, step=step)
    if isinstance(x, birdjepa.models.Model):
        return x
    if not isinstance(x, birdjepa.model.ViT):
        raise TypeError("expected a birdjepa.model.ViT, a birdjepa.models.Model, a run or "
                        f"export directory, got {type(x).__name__}")
    if str(x.cfg.preset).startswith("bird-mae"):
        audio = birdjepa.models.artifact.input_settings(birdjepa.models.bird_mae.AUDIO, "model")
    else:
        audio = birdjepa.models.artifact.run_input(birdjepa.data.LoaderConfig(), "model")
    return birdjepa.models.Model(x, audio, source=x.cfg.preset or "")


# -- encoding ---------------------------------------------------------------------------------


def with_pool(encoder: birdjepa.model.ViT, pool: str) -> birdjepa.model.ViT:
    """The same encoder whose `pooled_bd` is the CLS token ("cls") or the patch mean ("mean")."""
    if encoder.cfg.pool == pool:
        return encoder
    out = copy.copy(encoder)
    object.__setattr__(out, "cfg", dataclasses.replace(encoder.cfg, pool=pool))
    return out


@eqx.filter_jit
def _forward(encoder, x_btm, want_patches: bool):
    # Patch tokens: un-normed for a model with fc_norm (Bird-MAE's layout: Hugging Face's
    # hidden_states[-1]), final-normed for ours (model.fc_norm's docstring).
    out = encoder(x_btm, normed_patches=not encoder.cfg.fc_norm)
    return out.pooled_bd, (out.patches_bnd if want_patches else None)


@eqx.filter_jit
def _layers(encoder, x_btm, layers: tuple[int, ...]):
    return encoder.layer_patches(x_btm, layers).astype(jnp.float16)


def bucket(n: int, batch_size: int, compiled: set[int]) -> int:
    """The padded batch shape for `n` windows: the smallest shape already compiled that holds
    them, else the next power of two (at most `batch_size`). A job compiles at most
    log2(batch_size) + 1 shapes, in practice one (full batches) or two (plus a short tail that
    came first); a small job no longer pays for `batch_size` windows."""
    held = [c for c in compiled if c >= n]
    return min(held) if held else min(batch_size, 1 << max(0, n - 1).bit_length())


def encode(encoder: birdjepa.model.ViT, batches, pools: tuple[str, ...],
           *, batch_size: int = 64, progress=None, layers: tuple[int, ...] = ()
           ) -> dict[str, np.ndarray]:
    """Run the encoder over `features` batches, each padded to a `bucket` shape; {pool: array}
    for each requested pool plus "row" and "start_s", and with `layers` "layers": (windows,
    len(layers), patches, d) float16, the patch tokens after those blocks
    (`ViT.layer_patches`). `progress(rows, compile_s)` is called after each batch with its row
    ids and the seconds it spent compiling a new shape (0.0)."""
    bad = [p for p in pools if p not in POOLS]
    if bad:
        raise ValueError(f"pool: expected values in {POOLS}, got {bad}")
    vector = [p for p in pools if p != "patches"]
    encs = {p: with_pool(encoder, p) for p in vector or ["mean"]}
    out: dict[str, list] = {p: [] for p in (*pools, "row", "start_s")}
    if layers:
        out["layers"] = []
    compiled: set[int] = set()
    for x, rows, starts in batches:
        b = len(x)
        shape = bucket(b, max(batch_size, b), compiled)
        new, t0 = shape not in compiled, time.perf_counter()
        xp = jnp.asarray(np.pad(x, ((0, shape - b), (0, 0), (0, 0))))
        for i, (p, enc) in enumerate(encs.items()):
            pooled, patches = _forward(enc, xp, i == 0 and "patches" in pools)
            if p in pools:
                out[p].append(np.asarray(pooled[:b]))
            if patches is not None:
                out["patches"].append(np.asarray(patches[:b]))
        if layers:
            out["layers"].append(np.asarray(_layers(encoder, xp, tuple(layers))[:b]))
        compiled.add(shape)
        out["row"].append(rows)
        out["start_s"].append(starts)
        if progress is not None:
            progress(rows, time.perf_counter() - t0 if new else 0.0)
    return {k: np.concatenate(v) if v else np.zeros((0,)) for k, v in out.items()}


def embeddings(encoder_or_run_dir, source, *, window_s: float | None = None,
               hop_s: float | None = None, centre: bool = False,
               pool: str | tuple[str, ...] | None = None, batch_size: int = 64,
               audio_column: str = "audio", n_workers: int = 2,
               out: str | os.PathLike | None = None, step: int | None = None,
               segment: str = "centre", segment_columns: tuple[str, str] = ("start_time", "end_time"),
               channels_first: bool = False, audio_root: str = "",
               path_map: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Embeddings of every window of `source` by a frozen encoder, via the training transform.

    `encoder_or_run_dir`: a `birdjepa.model.ViT`, a run directory (latest checkpoint, or
    `step`), an export directory (birdjepa.models.artifact) or "bird-mae-base:WEIGHTS". `source`: encoded bytes, a path to an audio file, `(wave, sample_rate)`, a
    `datasets.Dataset`, Arrow shards (a directory, a file or a list), or a list of audio file
    paths (row i = file i). A `wave` is (n,) or (n, channels), or (channels, n) with
    `channels_first=True`; float at full scale 1, integer scaled by its dtype's range; empty is
    an error (birdjepa.data.audio.as_mono). A recording that fails to decode is skipped; one
    warning at the end counts them by kind and names the first few by file or row (every one
    failing is an error). Batches are padded to a few shapes (`bucket`), not to `batch_size`. `pool`:
    "cls", "mean",
    "patches" or a tuple of them; None means the encoder's own pooling (model.pool).
    `segment="columns"` (with `centre=True`, shards) embeds each row's [start, end] seconds from
    `segment_columns` (e.g. BirdSet's event-level test split), cut exactly there. Path-only
    audio of a table moved since it was written: `path_map` {stored prefix: local prefix} and
    `audio_root` (relative paths), as the loader takes them (birdjepa.data.paths).
    `window_s` None is the model's clip (its input settings, `as_model`: sample rate, fbank,
    frames, padding and normalisation all come from the model). For a model with fc_norm
    (Bird-MAE) "patches" are the last block's tokens un-normed (Hugging Face's
    hidden_states[-1]); for ours, final-normed.

    Returns the columns `python -m birdjepa.embed` writes, one row per window: "row" (windows,)
    int64 row id (0 for a single recording), "file" (path sources: the file's path as given),
    "start_s", "end_s" (never past the recording's end), "duration_s" (the recording's),
    "padded_s" (seconds of the input past the recording's end) float64, "emb_<pool>" (windows,
    d) float32 per vector pool and "patches" (windows, patches, d). With `out`, also writes
    them to `out` (.npz; .arrow: an Arrow IPC file, one row per window, arrays flattened).
    """
    m = as_model(encoder_or_run_dir, step=step)
    enc, audio = m.encoder, m.audio
    pools = (pool,) if isinstance(pool, str) else tuple(pool or (enc.cfg.pool,))
    w = features.Windows.for_model(audio, window_s=window_s, hop_s=hop_s, centre=centre,
                          segment=segment, segment_columns=tuple(segment_columns))
    durations: dict[int, float] = {}
    files = dict(audio_root=audio_root, path_map=path_map)
    batches = features.features(source, w, batch_size=batch_size, audio_column=audio_column,
                       n_workers=n_workers, channels_first=channels_first,
                       durations=durations, **files)
    got = encode(enc, batches, pools, batch_size=batch_size)
    rows = set(got["row"].tolist())
    if rows - set(durations):  # the loader's windows: read the headers
        durations.update(features.header_durations(source, w, audio_column, files, rows,
                                          channels_first=channels_first))
    length = w.window_s
    if w.segment == "columns":  # the loader cuts each row's [start, end] exactly
        seg = table.read(source, list(w.segment_columns))
        length = np.subtract(*[seg.column(c).to_numpy() for c in w.segment_columns[::-1]])[
            got["row"]]
    paths = ([str(f) for f in source] if features.is_audio_files(source)  # files: as given
             else [str(source)] if isinstance(source, str | os.PathLike)
             and not features.is_table_source(source) else None)
    result = columns.embedded(got, pools, length, durations, paths)
    if out is not None:
        write(result, out)
    return result


def write(result: dict[str, np.ndarray], path: str | os.PathLike) -> None:
    """Save `embeddings`' result as .npz, or as an Arrow IPC file (.arrow, one row per window)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrow = path.suffix == ".arrow"
    path = path if arrow or path.suffix == ".npz" else path.with_name(path.name + ".npz")
    with outputs.replacing(path) as tmp, open(tmp, "wb") as f:
        if not arrow:
            return np.savez(f, **result)
        cols = {k: (pa.array(list(v.reshape(len(v), -1))) if v.ndim > 1 else pa.array(v))
                for k, v in result.items()}
        tbl = pa.table(cols).replace_schema_metadata(
            {"shapes": repr({k: list(v.shape[1:]) for k, v in result.items()})})
        with pa.ipc.new_file(f, tbl.schema) as wr:
            wr.write_table(tbl)


if __name__ == "__main__":
    sys.exit("birdjepa.models.inference is the library; the command line is python -m "
             "birdjepa.embed MODEL SOURCE... --out FILE.parquet (see its --help)")
