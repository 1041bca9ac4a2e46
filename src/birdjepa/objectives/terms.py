"""Loss terms shared by the objectives: views handling, weighted means, cross-entropy.

Targets are int class ids `(n,)` (-1: no label) from an int label column, or multi-hot float
`(n, c)` from a list<int> column (multilabel: an empty list is a row of 0, no species; a null
list is a row of -1, unlabelled); `per_row` scores both."""

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
    binary cross-entropy averaged over classes, hit = argmax is in the label set (BirdSet's
    top-1), labelled = the set is not empty; a row of -1 (a null list: unlabelled) has loss 0
    (an empty set is a real negative for every class and keeps its loss)."""
    if target.ndim == 2:
        known = known_rows(target)
        t = jnp.maximum(target, 0.0)
        bce = optax.sigmoid_binary_cross_entropy(logits_nc, t).mean(-1) * known
        hit = jnp.take_along_axis(t, jnp.argmax(logits_nc, -1)[:, None], -1)[:, 0]
        return bce, hit, (t.sum(-1) > 0).astype(jnp.float32)
    labelled = (target >= 0).astype(jnp.float32)
    target = jnp.maximum(target, 0)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits_nc, target) * labelled
    return ce, (jnp.argmax(logits_nc, -1) == target).astype(jnp.float32), labelled


def known_rows(target: Int[Array, " n"] | Float[Array, "n c"]) -> Float[Array, " n"]:
    """1 for rows whose labels are known (an id >= 0; a multi-hot row, even empty), 0 for
    unlabelled ones (id -1; a multi-hot row of -1 from a null list)."""
    return ((target[:, 0] if target.ndim == 2 else target) >= 0).astype(jnp.float32)


def xent(
    logits_nc: Float[Array, "n c"], target: Int[Array, " n"] | Float[Array, "n c"],
    w_n: Float[Array, " n"]
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """Weighted-mean loss and top-1 accuracy (`per_row`) over the known rows (`known_rows`);
    with multi-hot targets an empty label set counts in the loss, not in the accuracy."""
    loss_n, hit_n, labelled_n = per_row(logits_nc, target)
    return wmean(loss_n, w_n * known_rows(target)), wmean(hit_n, w_n * labelled_n)


def tile_views(x_b: jax.Array, v: int) -> jax.Array:
    """Repeat per-example values for V views flattened view-major: (B, ...) -> (V*B, ...)."""
    return jnp.concatenate([x_b] * v, axis=0) if v > 1 else x_b
