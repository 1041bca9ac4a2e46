"""The train state and where it lives: parameter and state initialisation, the abstract state
(shapes without compute), the device mesh, and host batches turned into sharded global arrays.

The train state is one pytree
    {"params": {"encoder", "heads", "probe"} arrays, "opt": optax state, "key": base key,
     "step": int32 updates done}
and every random draw of update `step` comes from fold_in(state["key"], step), so a run resumed
from (state, loader position) at a step boundary continues bit-exactly.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import birdjepa.config
import birdjepa.data.device_features
import birdjepa.model
import birdjepa.optim
import birdjepa.params


def make_mesh(n_devices: int | None = None) -> jax.sharding.Mesh:
    """A 1-D "data" mesh over the global devices (every process's), or the first `n_devices`."""
    devices = jax.devices()[: n_devices or jax.device_count()]
    return jax.sharding.Mesh(np.array(devices), ("data",))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def init_state(cfg: birdjepa.config.Config, mesh):
    """(state, static, tx), with the state replicated over the mesh.

    The state is built inside one jit whose outputs are replicated over the (possibly
    multi-process) mesh: every process computes the same values and the leaves, PRNG key
    included, are global arrays (Orbax refuses a host-local key with several processes)."""
    shapes, static = eqx.filter_eval_shape(lambda k: birdjepa.params.init_params(cfg, key=k), jax.random.key(0))
    tx = birdjepa.optim.make(cfg.optim, shapes)

    def make_state():
        k_init, k_train = jax.random.split(jax.random.key(cfg.seed))
        params, _ = birdjepa.params.init_params(cfg, key=k_init)
        return {"params": params, "opt": tx.init(params), "key": k_train,
                "step": jnp.zeros((), jnp.int32)}

    state = jax.jit(make_state, out_shardings=replicated(mesh))()
    return state, static, tx


def with_prior_bias(state: dict, n_classes: int, mesh) -> dict:
    """`state` with the class heads' biases (the supervised head, the online probe) at the
    log-odds of a one-in-`n_classes` prior, -log(n_classes - 1): for multi-hot (sigmoid) targets
    a new head then starts from "nothing here" (every sigmoid at 1/n_classes) instead of 0.5 for
    every class, and its first updates learn the species instead of pushing every class down
    (the prior initialisation of Lin et al. 2017, focal loss). On the demo, sigmoid top-1 on
    soundscapes after 150 steps 0.22 -> 0.41 (docs/issues/024-soundscape-abstain)."""
    b0 = -math.log(n_classes - 1) if n_classes > 1 else 0.0

    def bias_of(params):
        out = [params["probe"].linear]
        head = getattr(params["heads"], "head", None)
        if isinstance(head, birdjepa.model.Linear) and head.b is not None:
            out.append(head)
        return [lin.b for lin in out]

    def apply(s):
        params = eqx.tree_at(bias_of, s["params"],
                             [jnp.full_like(b, b0) for b in bias_of(s["params"])])
        return {**s, "params": params}

    return jax.jit(apply, out_shardings=replicated(mesh))(state)


BATCH_KEYS = ("data", "local", "target", "valid", *birdjepa.data.device_features.WAVE_KEYS)
"""The keys of a loader batch the step reads (host or device features)."""


def _batch_axis(key: str, x: np.ndarray) -> int:
    """The batch axis of a loader array: 1 for views-first arrays ((V, B, ...) features, local
    crops, crop starts and frames), else 0."""
    return 1 if key in ("local", "crop_start", "crop_frames", "local_crop_start",
                        "local_crop_frames") or (key == "data" and x.ndim == 4) else 0


def shard_batch(batch: dict, cfg: birdjepa.config.Config, mesh) -> dict:
    """Host batch -> global arrays with a leading micro-batch axis, sharded on the batch axis."""
    n_micro = cfg.optim.grad_accum
    out = {}
    for k in BATCH_KEYS:
        if k not in batch:
            continue
        x = np.asarray(batch[k])
        b_axis = _batch_axis(k, x)
        b = x.shape[b_axis]
        x = x.reshape(*x.shape[:b_axis], n_micro, b // n_micro, *x.shape[b_axis + 1:])
        x = np.moveaxis(x, b_axis, 0)  # (n_micro, [V,] b, ...)
        spec = P(*([None] * (b_axis + 1)), "data")
        out[k] = jax.make_array_from_process_local_data(NamedSharding(mesh, spec), x)
    return out


def shard_eval_batch(batch: dict, batch_size: int, mesh) -> dict:
    """Pad this process's slice of an eval batch to `batch_size` (the per-process eval batch,
    eval_batch_size // process_count; valid False on padding) and build global arrays from it.
    Every process pads to the same size and runs the same number of batches (the loader pads a
    process whose slice ran out), so the collective eval step lines up."""
    b = len(batch["target"])
    out = {k: np.asarray(batch[k]) for k in BATCH_KEYS if k in batch and k != "local"}
    out["valid"] = np.asarray(batch.get("valid", np.ones(b, bool)), bool)
    for k, v in out.items():
        if b < batch_size:
            axis = _batch_axis(k, v)
            widths = [(0, 0)] * v.ndim
            widths[axis] = (0, batch_size - b)
            out[k] = np.pad(v, widths)
    return {k: jax.make_array_from_process_local_data(
        NamedSharding(mesh, P(*([None] * _batch_axis(k, v)), "data")), v) for k, v in out.items()}


def batch_dtype(cfg: birdjepa.config.Config) -> str:
    """The dtype host features cross to the device in (the loader's `batch_dtype`): the
    encoder's compute dtype, which rounds its input to it either way."""
    return "bfloat16" if cfg.model.compute_dtype == "bfloat16" else "float32"


def abstract_batch(cfg: birdjepa.config.Config, sharding, *, wave_dtype: str = "float32") -> dict:
    """Shapes and dtypes of a device batch as `shard_batch` builds it from the train loader of
    a finalized `cfg` (leading micro-batch axis): host features in `batch_dtype(cfg)`, or with
    `data.features = "device"` the windows (`wave_dtype`: "int16" from a packed corpus, else
    "float32", the larger) and their crops; local crops where data.n_local > 0."""
    d, n_micro = cfg.data, cfg.optim.grad_accum
    b = cfg.batch_size // n_micro
    views = (d.n_views,) if d.n_views > 1 else ()
    spec = {"target": ((n_micro, b), jnp.int32), "valid": ((n_micro, b), jnp.bool_)}
    if d.features == "device":
        samples = round((d.view_window_s or d.clip_s) * d.sample_rate)
        spec["wave"] = ((n_micro, b, samples), jnp.dtype(wave_dtype))
        for k, n in (("crop", d.n_views), ("local_crop", d.n_local)):
            if n:
                spec[f"{k}_start"] = spec[f"{k}_frames"] = ((n_micro, n, b), jnp.int32)
    else:
        dt = jnp.dtype(batch_dtype(cfg))
        spec["data"] = ((n_micro, *views, b, d.n_frames, d.n_mels), dt)
        if d.n_local:
            spec["local"] = ((n_micro, d.n_local, b, d.local_frames, d.n_mels), dt)
    return {k: jax.ShapeDtypeStruct(s, dt, sharding=sharding) for k, (s, dt) in spec.items()}


def check_batch(batch: dict, cfg: birdjepa.config.Config) -> None:
    """The loader's first batch has the shape the config promises (this process's slice)."""
    b = cfg.batch_size // jax.process_count()
    want = (b, cfg.data.n_frames, cfg.data.n_mels)
    if cfg.data.n_views > 1:
        want = (cfg.data.n_views, *want)
    key = "data"
    if "wave" in batch:  # device features: the windows and the views' crops in them
        window_s = cfg.data.view_window_s or cfg.data.clip_s
        key, want = "wave", (b, round(window_s * cfg.data.sample_rate))
        crops = tuple(np.shape(batch["crop_start"]))
        if crops != (cfg.data.n_views, b):
            raise ValueError(f"train batch 'crop_start': expected shape {(cfg.data.n_views, b)} "
                             f"from the config, got {crops}")
    got = tuple(np.shape(batch[key]))
    if got != want:
        raise ValueError(f"train batch '{key}': expected shape {want} from the config, got {got}")
