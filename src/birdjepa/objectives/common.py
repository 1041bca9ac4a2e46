"""Pieces shared by the objectives: views handling, weighted means, cross-entropy."""

import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, Int


def as_views(data: Float[Array, "..."]) -> Float[Array, "v b t m"]:
    """(B, T, M) -> (1, B, T, M); (V, B, T, M) unchanged."""
    if data.ndim == 3:
        return data[None]
    if data.ndim == 4:
        return data
    raise ValueError(f"batch['data']: expected (B, T, M) or (V, B, T, M), got shape {data.shape}")


def weights(batch: dict, b: int) -> Float[Array, " b"]:
    """Per-example weights: 0 for rows marked invalid by the optional `valid` mask (padding,
    failed decodes), else 1. Missing labels are masked separately, in `xent`."""
    if "valid" in batch:
        return batch["valid"].astype(jnp.float32)
    return jnp.ones((b,), jnp.float32)


def wmean(x: Float[Array, " n"], w: Float[Array, " n"]) -> Float[Array, ""]:
    return (x * w).sum() / jnp.maximum(w.sum(), 1.0)


def xent(
    logits_nc: Float[Array, "n c"], target_n: Int[Array, " n"], w_n: Float[Array, " n"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Weighted-mean softmax cross-entropy and accuracy; missing labels (-1) get weight 0."""
    w_n = w_n * (target_n >= 0)
    target_n = jnp.maximum(target_n, 0)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits_nc, target_n)
    acc = (jnp.argmax(logits_nc, -1) == target_n).astype(jnp.float32)
    return wmean(ce, w_n), wmean(acc, w_n)


def tile_views(x_b: jax.Array, v: int) -> jax.Array:
    """Repeat per-example values for V views flattened view-major: (B,) -> (V*B,)."""
    return jnp.tile(x_b, v)
