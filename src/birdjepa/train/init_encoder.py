"""`init_encoder`: a fresh run's encoder taken from another run's latest checkpoint (read-only:
that run may still be writing), an export directory or an imported model, opened through
birdjepa.models.open_model (the one door) after which it must hold the same architecture and
input; heads, probe and optimiser stay fresh."""

import dataclasses
import pathlib

import equinox as eqx
import jax

import birdjepa.config
import birdjepa.config.identity as identity
import birdjepa.models
import birdjepa.models.artifact
import birdjepa.runtime.rundir
import birdjepa.train.state


def init_from(cfg: birdjepa.config.Config, state: dict, mesh) -> dict:
    """`state` with its encoder replaced by the encoder `cfg.init_encoder` names: a run (or its
    checkpoints/ directory; its latest intact checkpoint), an export directory or an imported
    model ("bird-mae-base:WEIGHTS"). Optimiser state, heads and probe stay freshly
    initialised."""
    spec = _model_spec(cfg.init_encoder)
    try:
        run = birdjepa.models.artifact.parse_spec(spec).kind == "run"
        m = birdjepa.models.open_model(spec, sharding=birdjepa.train.state.replicated(mesh))
    except Exception as e:  # missing files, no intact checkpoint, a config that does not fit
        raise birdjepa.config.ConfigError(
            f"init_encoder: expected a run with a complete checkpoint, an export directory or "
            f"NAME:WEIGHTS, got {cfg.init_encoder!r} ({type(e).__name__}: "
            f"{' '.join(str(e).split())})") from None
    where = f"{spec} step {m.info['step']}" if run else spec
    if run:
        saved, keys, free = m.info["config"], identity.ENCODER_SHAPING, identity.ENCODER_FREE
    else:  # the input the encoder expects: a training config contradicting it is refused
        a = m.audio
        saved = {"model": dataclasses.asdict(m.encoder.cfg),
                 "data": {k: a[k] for k in ("n_frames", "n_mels", "sample_rate", "mean", "std",
                                            "pad")}}
        keys = (*identity.ENCODER_SHAPING, "data.sample_rate", "data.mean", "data.std",
                "data.pad")
        free = (*identity.ENCODER_FREE, "model.preset")
    identity.check_same(saved, cfg, keys=keys, ignore=free,
                        what=f"init_encoder: {where} holds another model")
    arrays = eqx.filter(m.encoder, eqx.is_array)
    if jax.tree.structure(arrays) != jax.tree.structure(state["params"]["encoder"]):
        raise birdjepa.config.ConfigError(
            f"init_encoder: {cfg.init_encoder}: its arrays do not match this run's encoder")
    arrays = jax.device_put(arrays, birdjepa.train.state.replicated(mesh))
    print(f"encoder initialised from {where}", flush=True)
    return {**state, "params": {**state["params"], "encoder": arrays}}


def _model_spec(given: str) -> str:
    """What `init_encoder` names, as open_model takes it: a run's checkpoints/ directory is its
    run; a path that does not exist is refused here, naming it."""
    p = pathlib.Path(given)
    if p.name == birdjepa.runtime.rundir.checkpoints_dir(p.parent).name and \
            birdjepa.runtime.rundir.is_run_dir(p.parent):
        return str(p.parent)
    if ":" not in given and not p.exists():
        raise birdjepa.config.ConfigError(
            f"init_encoder: expected a run directory or its checkpoints/ directory, an export "
            f"directory or NAME:WEIGHTS, got {given!r}, which does not exist")
    return given
