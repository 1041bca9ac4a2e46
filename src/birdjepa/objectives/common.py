"""Pieces shared by the objectives: views handling, weighted means, cross-entropy.

Targets are int class ids `(n,)` (-1: no label) from an int label column, or multi-hot float
`(n, c)` from a list<int> column (multilabel); `per_row` scores both."""

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


def per_row(
    logits_nc: Float[Array, "n c"], target: Int[Array, " n"] | Float[Array, "n c"]
) -> tuple[Float[Array, " n"], Float[Array, " n"], Float[Array, " n"]]:
    """(loss, top-1 hit, labelled) per row. Class ids: softmax cross-entropy, hit = argmax is
    the class, labelled = id >= 0 (the loss counts only labelled rows). Multi-hot: sigmoid
    binary cross-entropy averaged over classes (every row counts: an empty label set is a
    negative for every class), hit = argmax is in the label set (BirdSet's top-1), labelled =
    the set is not empty."""
    if target.ndim == 2:
        bce = optax.sigmoid_binary_cross_entropy(logits_nc, target).mean(-1)
        hit = jnp.take_along_axis(target, jnp.argmax(logits_nc, -1)[:, None], -1)[:, 0]
        return bce, hit, (target.sum(-1) > 0).astype(jnp.float32)
    labelled = (target >= 0).astype(jnp.float32)
    target = jnp.maximum(target, 0)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits_nc, target) * labelled
    return ce, (jnp.argmax(logits_nc, -1) == target).astype(jnp.float32), labelled


def xent(
    logits_nc: Float[Array, "n c"], target: Int[Array, " n"] | Float[Array, "n c"],
    w_n: Float[Array, " n"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Weighted-mean loss and top-1 accuracy (`per_row`); rows without a label (-1) get weight 0
    in both with class ids, and only in the accuracy with multi-hot targets."""
    loss_n, hit_n, labelled_n = per_row(logits_nc, target)
    loss_w = w_n if target.ndim == 2 else w_n * labelled_n
    return wmean(loss_n, loss_w), wmean(hit_n, w_n * labelled_n)


def tile_views(x_b: jax.Array, v: int) -> jax.Array:
    """Repeat per-example values for V views flattened view-major: (B, ...) -> (V*B, ...)."""
    return jnp.concatenate([x_b] * v, axis=0) if v > 1 else x_b
