"""The repository's training configs as the train and checkpoint benchmarks run them."""

import dataclasses
import pathlib

import birdjepa.config

CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


def load(name: str, batch_size: int | None, backend: str, *,
         data: str | None = None) -> birdjepa.config.Config:
    """configs/NAME.toml with one micro-batch per update; `batch_size` overrides its batch
    (default on CPU: 4 for every config but the demo, so vit-s fits a laptop-class step).
    With `data` (a shard directory) the run reads it and takes its class count from its label
    column, as training does; without, 10 classes of synthetic data unless the config says."""
    cfg = birdjepa.config.load(CONFIGS / f"{name}.toml")
    bs = batch_size or (4 if name != "demo" and backend == "cpu" else None)
    cfg = dataclasses.replace(
        cfg, batch_size=bs or cfg.batch_size,
        n_classes=cfg.n_classes if data else cfg.n_classes or 10,
        optim=dataclasses.replace(cfg.optim, grad_accum=1),
    )
    if data:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(
            cfg.data, train_shards=data, eval_shards=data))
    return cfg
