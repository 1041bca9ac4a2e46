"""Online linear probe on the stop-gradient pooled embedding, trained alongside every objective.

The probe standardises its input with running statistics of the embedding (an exponential moving
average of the batch mean and variance, updated by the train step, not by the optimiser), then
applies a zero-initialised linear classifier: a BatchNorm without affine parameters in front of
the linear layer, the usual linear-probe protocol (MAE). Without it the probe's speed depends on
the conditioning of the embedding rather than on what it encodes: a frozen random encoder's
pooled embedding has a per-dimension offset ~2.5x its spread and one direction with ~10x the
spread of the others, which a zero-initialised probe at a modest learning rate needs thousands of
steps to undo (docs/issues/004-demo-learning).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

import birdjepa.model
import birdjepa.objectives.terms as terms

MOMENTUM = 0.9
"""Weight of the old running statistics per update (time constant ~10 updates)."""
EPS = 1e-5


class Probe(eqx.Module):
    linear: birdjepa.model.Linear
    mean: Float[Array, " d"]
    """Running mean of the embedding (set by `update_stats`; its gradient is always 0)."""
    var: Float[Array, " d"]
    """Running variance of the embedding (likewise)."""

    def __call__(self, emb_nd: Float[Array, "n d"]) -> Float[Array, "n c"]:
        mean, var = jax.lax.stop_gradient((self.mean, self.var))
        return self.linear((emb_nd - mean) * jax.lax.rsqrt(var + EPS))


def init(width: int, n_classes: int, *, key) -> Probe:
    """A zero-initialised linear classifier (starts at chance, uniform logits)."""
    linear = birdjepa.model.Linear(width, n_classes, key=key)
    linear = eqx.tree_at(lambda p: p.w, linear, jnp.zeros_like(linear.w))
    return Probe(linear, jnp.zeros((width,)), jnp.ones((width,)))


def batch_stats(
    emb_nd: Float[Array, "n d"], w_n: Float[Array, " n"]
) -> tuple[Float[Array, " d"], Float[Array, " d"]]:
    """Weighted first and second moments (mean, mean of squares) of the stop-gradient embedding
    over valid rows. Moments, not the variance, so that averaging them over equal micro-batches
    (gradient accumulation) gives exactly the large batch's statistics."""
    emb_nd = jax.lax.stop_gradient(emb_nd)
    w_n1 = (w_n / jnp.maximum(w_n.sum(), 1.0))[:, None]
    return (w_n1 * emb_nd).sum(0), (w_n1 * jnp.square(emb_nd)).sum(0)


def update_stats(probe: Probe, mean_d, sq_d, *, first: Array) -> Probe:
    """Fold one update's batch moments into the running statistics (replace them on the first)."""
    var_d = jnp.maximum(sq_d - jnp.square(mean_d), 0.0)
    ema = lambda old, new: jnp.where(first, new, MOMENTUM * old + (1 - MOMENTUM) * new)  # noqa: E731
    return eqx.tree_at(lambda p: (p.mean, p.var), probe, (ema(probe.mean, mean_d),
                                                          ema(probe.var, var_d)))


def loss(
    probe: Probe,
    emb_nd: Float[Array, "n d"],
    target_n: Int[Array, " n"],
    w_n: Float[Array, " n"],
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Cross-entropy and accuracy of the probe; no gradient reaches the encoder."""
    logits = probe(jax.lax.stop_gradient(emb_nd))
    return terms.xent(logits, target_n, w_n)
