"""Supervised objective: cross-entropy of a linear head on the pooled embedding."""


import equinox as eqx
import jax
import jax.numpy as jnp

import birdjepa.config.losses
import birdjepa.model
import birdjepa.objectives.augment as augment
import birdjepa.objectives.terms as terms

SupervisedConfig = birdjepa.config.losses.SupervisedConfig


class Heads(eqx.Module):
    head: birdjepa.model.Linear


def init_heads(cfg: SupervisedConfig, encoder: birdjepa.model.ViT, n_classes: int, *, key):
    return Heads(birdjepa.model.Linear(encoder.width, n_classes, key=key))


def mixup(views_vbtm, target_bc, mix: float, *, key):
    """Multilabel mixup (SupervisedConfig.mix): each clip plus the clip `shift` rows on (one
    random shift per batch, never 0) at a power weight uniform in [0, mix] per clip and view,
    the labels joined; an unlabelled row (-1) stays unlabelled."""
    if target_bc.ndim != 2:
        raise ValueError("objective.supervised.mix: expected a list<int> label column (multi-hot "
                         "sigmoid targets), got class ids; set mix = 0 or use a list column")
    v, b = views_vbtm.shape[:2]
    k_shift, k_lam = jax.random.split(key)
    shift = jax.random.randint(k_shift, (), 1, max(b, 2))
    scale = 2 * augment.LOADER_STD  # normalised log-mel is (log power - mean) / (2 std)
    lam = jax.random.uniform(k_lam, (v, b, 1, 1), maxval=mix)
    other = jnp.roll(views_vbtm, shift, axis=1)
    views = jnp.logaddexp(jnp.log1p(-lam) + scale * views_vbtm,
                          jnp.log(lam + 1e-12) + scale * other) / scale
    joined = jnp.maximum(target_bc, jnp.maximum(jnp.roll(target_bc, shift, axis=0), 0.0))
    return views, jnp.where(target_bc[:, :1] < 0, target_bc, joined)


def loss(cfg: SupervisedConfig, encoder, heads: Heads, batch: dict, *, key):
    """Returns (loss, metrics, pooled embeddings (V*B, D), their targets, their weights)."""
    views = terms.as_views(batch["data"])
    target = batch["target"]
    if cfg.mix:
        views, target = mixup(views, target, cfg.mix, key=key)
    views = augment.augment_views(cfg.augment, views, key=jax.random.fold_in(key, 1))
    v, b = views.shape[:2]
    emb = encoder(views.reshape(v * b, *views.shape[2:])).pooled_bd
    target = terms.tile_views(target, v)
    w = terms.tile_views(terms.weights(batch, b), v)
    logits = heads.head(emb)
    ce, acc = terms.xent(logits, target, w)
    if cfg.label_smoothing and target.ndim == 1:
        eps, n_classes = cfg.label_smoothing, logits.shape[-1]
        soft = jax.nn.one_hot(target, n_classes) * (1 - eps) + eps / n_classes
        ce = terms.wmean(-(soft * jax.nn.log_softmax(logits, -1)).sum(-1), w * (target >= 0))
    return ce, {"ce": ce, "train_acc": acc}, emb, target, w

