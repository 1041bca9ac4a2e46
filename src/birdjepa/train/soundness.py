"""Whether a finished run is a usable model: finite parameters, finite embeddings of a fixed
probe batch, no run of skipped non-finite updates at the end. A run that is not gets no COMPLETE
marker (birdjepa.train.run.finish) and an UnsoundRunError saying why."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import birdjepa.config
import birdjepa.runtime.checkpoint
import birdjepa.train.state


class UnsoundRunError(RuntimeError):
    """Training ended but the result is not a usable model: not marked COMPLETE."""


PROBE_BATCH = 2
"""Clips in the fixed probe batch the finished encoder must embed finitely."""


def probe_embeddings_finite(cfg: birdjepa.config.Config, state: dict, static, mesh) -> bool:
    """Whether the encoder embeds a fixed batch (normal noise at the loader's scale, seed 0)
    to finite vectors: finite parameters can still overflow (e.g. after lr=1e30)."""
    x = np.random.default_rng(0).normal(0, 0.5, (PROBE_BATCH, cfg.data.n_frames,
                                                 cfg.data.n_mels)).astype(np.float32)
    x = jax.device_put(x, birdjepa.train.state.replicated(mesh))

    @jax.jit
    def finite(params, x_btm):
        encoder = eqx.combine(params, static)["encoder"]
        return jnp.isfinite(encoder(x_btm).pooled_bd).all()

    return bool(finite(state["params"], x))


def unsound(run, state: dict, summary: dict, nonfinite_run: int) -> str | None:
    """Why the finished run is not a usable model, or None: non-finite parameters, non-finite
    embeddings of the probe batch, or updates that were still non-finite at the end."""
    if not birdjepa.runtime.checkpoint.all_finite(state["params"]):
        return f"parameters are not finite after step {summary['steps']}"
    if nonfinite_run:
        return (f"the last {nonfinite_run} update(s) up to step {summary['steps']} were "
                f"non-finite and skipped (last finite loss: {summary['final_loss']:.4g} at step "
                f"{summary['final_loss_step']})")
    if not probe_embeddings_finite(run.cfg, state, run.static, run.mesh):
        return (f"the encoder after step {summary['steps']} gives non-finite embeddings of a "
                "fixed probe batch (diverged; lower optim.lr?)")
    return None
