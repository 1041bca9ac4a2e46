"""`init_encoder`: a fresh run's encoder taken from another run's latest checkpoint (read-only:
that run may still be writing), an export directory or an imported model, after the check that
it holds the same architecture and input; heads, probe and optimiser stay fresh."""

import dataclasses
import pathlib

import equinox as eqx
import jax

import birdjepa.config
import birdjepa.config.identity as identity
import birdjepa.models
import birdjepa.models.artifact
import birdjepa.params
import birdjepa.runtime.checkpoint
import birdjepa.runtime.rundir
import birdjepa.train.state


def init_from(cfg: birdjepa.config.Config, state: dict, mesh) -> dict:
    """`state` with its encoder replaced by the encoder in the latest checkpoint of the run
    `cfg.init_encoder` (optimiser state, heads and probe stay freshly initialised), or by the
    encoder of an export directory or an imported model ("bird-mae-base:WEIGHTS")."""
    try:  # a run's checkpoints/ directory is no MODEL, but init_encoder takes it too
        kind = birdjepa.models.artifact.parse_spec(cfg.init_encoder).kind
    except FileNotFoundError:
        kind = "run"
    if kind != "run":
        return _init_from_files(cfg, state, mesh)
    src = pathlib.Path(cfg.init_encoder)
    ckpt_dir = birdjepa.runtime.rundir.find_checkpoints(src)
    if not ckpt_dir.is_dir():
        raise birdjepa.config.ConfigError(
            f"init_encoder: expected a run directory or its checkpoints/ directory, "
            f"got {str(src)!r}, which does not exist")
    with birdjepa.runtime.checkpoint.Checkpointer(ckpt_dir, every=1, keep=1, read_only=True) as ck:
        step = ck.latest_step()  # the newest intact step (read-only: nothing is moved)
        if step is None:
            raise birdjepa.config.ConfigError(
                f"init_encoder: no complete checkpoint in {ckpt_dir}")
        saved = ck.read_meta(step).get("config", {})
        identity.check_same(saved, cfg, keys=identity.ENCODER_SHAPING,
                            ignore=identity.ENCODER_FREE,
                            what=f"init_encoder: {ckpt_dir} step {step} holds another model")
        src_cfg = birdjepa.config.from_dict(birdjepa.config.Config,
                                            birdjepa.config.strip_none(saved))
        like, _ = birdjepa.params.abstract_state(
            src_cfg, sharding=birdjepa.train.state.replicated(mesh))
        encoder = ck.restore(like, step=step).state["params"]["encoder"]
    print(f"encoder initialised from {ckpt_dir} step {step}", flush=True)
    return {**state, "params": {**state["params"], "encoder": encoder}}


def _init_from_files(cfg: birdjepa.config.Config, state: dict, mesh) -> dict:
    """`init_from` for an export or imported model: the architecture check, then its arrays."""
    m = birdjepa.models.open_model(cfg.init_encoder)
    a = m.audio  # the input the encoder expects: a training config contradicting it is refused
    saved = {"model": dataclasses.asdict(m.encoder.cfg),
             "data": {k: a[k] for k in ("n_frames", "n_mels", "sample_rate", "mean", "std", "pad")}}
    keys = (*identity.ENCODER_SHAPING, "data.sample_rate", "data.mean", "data.std", "data.pad")
    identity.check_same(saved, cfg, keys=keys, ignore=(*identity.ENCODER_FREE, "model.preset"),
                        what=f"init_encoder: {cfg.init_encoder} holds another model")
    arrays = eqx.filter(m.encoder, eqx.is_array)
    if jax.tree.structure(arrays) != jax.tree.structure(state["params"]["encoder"]):
        raise birdjepa.config.ConfigError(
            f"init_encoder: {cfg.init_encoder}: its arrays do not match this run's encoder")
    arrays = jax.device_put(arrays, birdjepa.train.state.replicated(mesh))
    print(f"encoder initialised from {cfg.init_encoder}", flush=True)
    return {**state, "params": {**state["params"], "encoder": arrays}}
