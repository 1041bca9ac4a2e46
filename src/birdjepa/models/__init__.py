"""Models in and out of birdjepa: import published encoders (`load("bird-mae-base",
weights=PATH)`), export a run's encoder to plain files (`birdjepa.models.artifact.export`, `python -m
birdjepa.export`),
and `open_model(spec)`, the one resolver the command lines share (a run directory, an export
directory, or "bird-mae-base:PATH")."""

import os

import birdjepa.config
import birdjepa.encoder
import birdjepa.model
import birdjepa.models.artifact as _export
import birdjepa.models.bird_mae as bird_mae

ConversionError = bird_mae.ConversionError
Model = _export.Model
load_export = _export.load_export
open_model = _export.open_model
IMPORTED = tuple(bird_mae.PRESETS)
"""Names `load` takes: published architectures whose weights the user downloads."""


def load_encoder(path: str | os.PathLike, *, step: int | None = None, with_head: bool = False):
    """(encoder, config) from an export directory (its files only: no Orbax, no run
    directory) or a run directory (birdjepa.encoder.load_encoder, its latest checkpoint).
    `with_head=True`: (encoder, config, head, classes), the class head (logits from pooled
    embeddings: the supervised head, else the online probe; None without one) and its class
    names, as `python -m birdjepa.predict` uses them."""
    if with_head:
        m = _export.from_run(path, step=step) if not _export.is_export(path) else \
            load_export(path)
        encoder, cfg = load_encoder(path, step=step)
        return encoder, cfg, m.head, m.classes
    if _export.is_export(path):
        m = load_export(path)
        cfg = m.info.get("config")
        if cfg is not None:
            cfg = birdjepa.config.finalize(birdjepa.config.from_dict(
                birdjepa.config.Config, birdjepa.config.strip_none(cfg)))
        return m.encoder, cfg
    return birdjepa.encoder.load_encoder(path, step=step)


def load(name: str, *, weights: str | os.PathLike) -> birdjepa.model.ViT:
    """Our encoder (`birdjepa.model.ViT`, float32) holding published weights: `name` one of
    IMPORTED ("bird-mae-base", "bird-mae-large"), `weights` the downloaded state dict
    (.safetensors). Raises ConversionError naming every missing or unexpected key and every
    shape mismatch."""
    if name not in IMPORTED:
        raise ValueError(f"model: expected one of {list(IMPORTED)}, got {name!r}")
    return bird_mae.load(name, weights)
