"""No objective: the encoder is not trained, only the online linear probe on its embedding.

The baseline "probe on a frozen randomly initialised encoder": the loss is exactly 0 and the
embedding is stop-gradient, so every encoder gradient is exactly 0 and there are no heads. With
zero gradients Adam's update is exactly 0 too, but AdamW's decoupled weight decay is not: run
this objective with `optim.weight_decay = 0` (configs/demo-random.toml does) and the encoder
stays bit-identical to its initialisation (the logged `param_norm` is then constant).
"""


import equinox as eqx
import jax
import jax.numpy as jnp

import birdjepa.config.losses
import birdjepa.objectives.terms as terms

ProbeOnlyConfig = birdjepa.config.losses.ProbeOnlyConfig


class Heads(eqx.Module):
    """No trainable heads."""


def init_heads(cfg: ProbeOnlyConfig, encoder, n_classes: int, *, key):
    del cfg, encoder, n_classes, key
    return Heads()


def loss(cfg: ProbeOnlyConfig, encoder, heads: Heads, batch: dict, *, key):
    """Zero loss; the pooled embeddings (V*B, D) of every view go to the probe."""
    del cfg, heads, key
    views = terms.as_views(batch["data"])
    v, b = views.shape[:2]
    emb = jax.lax.stop_gradient(encoder(views.reshape(v * b, *views.shape[2:])).pooled_bd)
    w = terms.tile_views(terms.weights(batch, b), v)
    return jnp.zeros((), jnp.float32), {}, emb, terms.tile_views(batch["target"], v), w
