"""The parameters of a run's model, outside the trainer: `init_params` builds them
({"encoder", "heads", "probe"}) and `abstract_state` gives the structure, shapes and dtypes of a
whole train state without computing anything, which is what a checkpoint is restored into
(birdjepa.models.open_model, through artifact.restore_state, for notebooks, evaluation and
init_encoder; birdjepa.train.run for resuming).

The train state is one pytree
    {"params": {"encoder", "heads", "probe"} arrays, "opt": optax state, "key": base key,
     "step": int32 updates done}.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.sharding import SingleDeviceSharding

import birdjepa.config
import birdjepa.model
import birdjepa.objectives
import birdjepa.objectives.probe
import birdjepa.optim


def init_params(cfg: birdjepa.config.Config, *, key) -> tuple[dict, dict]:
    """(arrays, static) of {"encoder", "heads", "probe"}."""
    k_enc, k_heads, k_probe = jax.random.split(key, 3)
    obj, sub = birdjepa.objectives.get(cfg.objective)
    enc = birdjepa.model.ViT(cfg.model, n_frames=cfg.data.n_frames, n_mels=cfg.data.n_mels,
                             key=k_enc)
    modules = {
        "encoder": enc,
        "heads": obj.init_heads(sub, enc, cfg.n_classes, key=k_heads),
        "probe": birdjepa.objectives.probe.init(enc.width, cfg.n_classes, key=k_probe),
    }
    return eqx.partition(modules, eqx.is_array)


def abstract_state(cfg: birdjepa.config.Config, *, device=None, sharding=None):
    """(abstract train state, static modules) for a finalized `cfg`: the structure, shapes and
    dtypes `init_state` would produce, without computing anything; every leaf on `sharding`
    (default: `device`, default the first device)."""
    sharding = sharding or SingleDeviceSharding(device or jax.devices()[0])
    key = jax.eval_shape(lambda: jax.random.key(cfg.seed))
    params, static = eqx.filter_eval_shape(lambda k: init_params(cfg, key=k), key)
    tx = birdjepa.optim.make(cfg.optim, params)
    state = {
        "params": params,
        "opt": jax.eval_shape(tx.init, params),
        "key": key,
        "step": jax.ShapeDtypeStruct((), jnp.int32),
    }
    state = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                         state)
    return state, static
