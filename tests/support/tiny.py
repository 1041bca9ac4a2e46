"""The one home of tiny training runs for tests: `tiny_config` (a Config on synthetic loaders,
seconds per run) and `tiny_toml` (a TOML for the CLI and the real loader on a demo corpus)."""

import dataclasses
import os

import numpy as np

import birdjepa.config
import birdjepa.data.synthetic
import birdjepa.model
import birdjepa.objectives
import birdjepa.objectives.lejepa
import birdjepa.objectives.mae
import birdjepa.runtime.rundir


def tiny_config(objective: str = "supervised", **overrides):
    """A seconds-scale Config for tests: 1-block width-32 encoder on (32, 64) inputs, 4 classes.

    `overrides` replace top-level fields (e.g. n_steps=5, run_dir=...)."""
    base = birdjepa.config.Config()
    cfg = birdjepa.config.Config(
        n_steps=5,
        batch_size=8,
        n_classes=4,
        run_id="test",
        objective=birdjepa.config.losses.ObjectiveConfig(
            name=objective,
            lejepa=birdjepa.objectives.lejepa.LeJEPAConfig(
                n_slices=16, proj_hidden=32, proj_dim=16
            ),
            mae=birdjepa.objectives.mae.MAEConfig(
                dec_width=32, dec_depth=1, dec_heads=2, block=(1, 2)
            ),
        ),
        model=birdjepa.config.architecture.ModelConfig(width=32, depth=1, n_heads=2, n_registers=1),
        data=birdjepa.config.DataConfig(n_views=2 if objective == "lejepa" else 1, n_frames=32,
                                        n_mels=64),
        optim=dataclasses.replace(base.optim, warmup=2),
        eval_every=0,
        log_every=1,
        wandb=birdjepa.config.WandbConfig(mode="disabled"),
    )
    cfg = dataclasses.replace(cfg, **overrides)
    return dataclasses.replace(cfg, model=birdjepa.config.architecture.resolve(cfg.model))


def tiny_toml(corpus: str | os.PathLike, *, n_steps: int, ckpt_every: int = 1, n_workers: int = 1,
              seed: int = 0) -> str:
    """Width-32, depth-1 supervised ViT on 512 x 128 clips (patch 32 x 16: 128 tokens), batch 8,
    the real loader; a metrics row every step, a checkpoint every `ckpt_every` steps."""
    return f"""\
n_steps = {n_steps}
seed = {seed}
batch_size = 8
n_classes = 12
eval_every = 0
log_every = 1
ckpt_every = {ckpt_every}
ckpt_keep = 2

[objective]
name = "supervised"

[model]
preset = "debug"
width = 32
depth = 1
n_heads = 2
patch = [32, 16]

[data]
train_shards = "{corpus}"
eval_shards = "{corpus}"
n_workers = {n_workers}
n_views = 1
n_frames = 512
n_mels = 128

[optim]
lr = 2e-3
warmup = 4

[wandb]
mode = "disabled"
"""


tiny_loaders = birdjepa.data.synthetic.loaders
"""(train, eval) SyntheticLoaders matching a config."""


def untrained_run(cfg, *, seed: int = 0, summary: dict | None = None,
                  adjust=None) -> "os.PathLike":
    """`cfg.run_dir` (created) as a finished run leaves it, without the training: config.toml,
    a checkpoint at step 2 of the parameters initialised from `seed` (then `adjust(params)`),
    COMPLETE with `summary`. For tests that need a model to open, export, embed or predict
    with, not its skill."""
    import pathlib

    import jax
    import jax.numpy as jnp

    import birdjepa.optim
    import birdjepa.params
    import birdjepa.runtime.checkpoint

    run = pathlib.Path(cfg.run_dir)
    run.mkdir(parents=True)
    (run / "config.toml").write_text(birdjepa.config.to_toml(cfg))
    params, _ = birdjepa.params.init_params(cfg, key=jax.random.key(seed))
    if adjust is not None:
        params = adjust(params)
    tx = birdjepa.optim.make(cfg.optim, params)
    state = {"params": params, "opt": tx.init(params), "key": jax.random.key(1),
             "step": jnp.int32(2)}
    with birdjepa.runtime.checkpoint.Checkpointer(run / "checkpoints", every=1, keep=1) as ck:
        ck.save(2, state, loader={}, meta={"config": dataclasses.asdict(cfg)}, force=True)
    birdjepa.runtime.rundir.mark_complete(run, summary or {"steps": 2})
    return run


def finalize(cfg):
    """`cfg` as a run sees it: model preset resolved, checked, run_id and run_dir filled."""
    return birdjepa.runtime.rundir.assign(birdjepa.config.finalize(cfg))


class NaNFrom:
    """Wraps a train loader; every batch from `start` (0-based) on is NaN (non-finite steps)."""

    def __init__(self, loader, start: int):
        self.loader, self.start = loader, start

    def __iter__(self):
        for i, b in enumerate(self.loader):
            if i >= self.start:
                b["data"] = np.full_like(b["data"], np.nan)
            yield b

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def close(self):
        self.loader.close()
