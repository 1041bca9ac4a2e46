"""Models in and out of birdjepa: import published encoders (`load("bird-mae-base",
weights=PATH)`), export a run's encoder to plain files (`birdjepa.models.artifact.export`, `python -m
birdjepa.export`),
and `open_model(spec)`, the one resolver the command lines share (a run directory, an export
directory, or "bird-mae-base:PATH"). `load_encoder(path)` (also `birdjepa.load_encoder`) is the
one way to load an encoder in Python."""

import os

import birdjepa.config
import birdjepa.model
import birdjepa.models.arrays as arrays
import birdjepa.models.artifact as artifact
import birdjepa.models.bird_mae as bird_mae
import birdjepa.runtime.rundir

ConversionError = arrays.ConversionError
Model = artifact.Model
load_export = artifact.load_export
open_model = artifact.open_model
IMPORTED = tuple(bird_mae.PRESETS)
"""Names `load` takes: published architectures whose weights the user downloads."""

__all__ = ["IMPORTED", "ConversionError", "Model", "load", "load_encoder", "load_export",
           "open_model"]


def load_encoder(path: str | os.PathLike, *, step: int | None = None, with_head: bool = False,
                 with_input: bool = False):
    """(encoder, config) from a run directory (its latest intact checkpoint, or `step`), an
    export directory (its files only: no Orbax, no run directory) or an imported model
    "bird-mae-base:WEIGHTS" (config None). The encoder is the `birdjepa.model.ViT` Module:
    `encoder(x)` on (B, T, M) log-mel clips returns its outputs (e.g. `.pooled_bd`).
    `with_head=True` appends the class head (logits from pooled embeddings: the supervised
    head, else the online probe; None without one) and its class names, as `python -m
    birdjepa.predict` uses them; `with_input=True` appends the model's input settings
    (birdjepa.models.artifact.INPUT_KEYS: sample rate, fbank, clip seconds, n_frames, pad,
    mean, std, window), what embed, predict and evaluate compute its input with. With both:
    (encoder, config, head, classes, input)."""
    m = artifact.open_model(path, step=step)
    cfg = m.info.get("config")
    if cfg is not None:
        cfg = birdjepa.config.finalize(birdjepa.config.from_dict(
            birdjepa.config.Config, birdjepa.config.strip_none(cfg)))
    # One restore: encoder, head and config from the same checkpoint, even while it trains.
    return (m.encoder, cfg, *((m.head, m.classes) if with_head else ()),
            *((m.audio,) if with_input else ()))


def load(name: str, *, weights: str | os.PathLike) -> birdjepa.model.ViT:
    """Our encoder (`birdjepa.model.ViT`, float32) holding published weights: `name` one of
    IMPORTED ("bird-mae-base", "bird-mae-large"), `weights` the downloaded state dict
    (.safetensors). Raises ConversionError naming every missing or unexpected key and every
    shape mismatch."""
    if name not in IMPORTED:
        raise ValueError(f"model: expected one of {list(IMPORTED)}, got {name!r}")
    return bird_mae.load(name, weights)
