"""Online linear probe on the stop-gradient pooled embedding, trained alongside every objective."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

import birdjepa.model
import birdjepa.objectives.common as common


def init(width: int, n_classes: int, *, key) -> birdjepa.model.Linear:
    """A zero-initialised linear classifier (starts at chance, uniform logits)."""
    probe = birdjepa.model.Linear(width, n_classes, key=key)
    return eqx.tree_at(lambda p: p.w, probe, jnp.zeros_like(probe.w))


def loss(
    probe: birdjepa.model.Linear,
    emb_nd: Float[Array, "n d"],
    target_n: Int[Array, " n"],
    w_n: Float[Array, " n"],
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Cross-entropy and accuracy of the probe; no gradient reaches the encoder."""
    logits = probe(jax.lax.stop_gradient(emb_nd))
    return common.xent(logits, target_n, w_n)
