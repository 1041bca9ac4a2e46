"""Supervised objective: cross-entropy of a linear head on the pooled embedding."""


import equinox as eqx
import jax

import birdjepa.config.losses
import birdjepa.model
import birdjepa.objectives.common as common

SupervisedConfig = birdjepa.config.losses.SupervisedConfig


class Heads(eqx.Module):
    head: birdjepa.model.Linear


def init_heads(cfg: SupervisedConfig, encoder: birdjepa.model.ViT, n_classes: int, *, key):
    return Heads(birdjepa.model.Linear(encoder.width, n_classes, key=key))


def loss(cfg: SupervisedConfig, encoder, heads: Heads, batch: dict, *, key):
    """Returns (loss, metrics, pooled embeddings (V*B, D), their targets, their weights)."""
    del key
    views = common.as_views(batch["data"])
    v, b = views.shape[:2]
    emb = encoder(views.reshape(v * b, *views.shape[2:])).pooled_bd
    target = common.tile_views(batch["target"], v)
    w = common.tile_views(common.weights(batch, b), v)
    logits = heads.head(emb)
    ce, acc = common.xent(logits, target, w)
    if cfg.label_smoothing and target.ndim == 1:
        eps, n_classes = cfg.label_smoothing, logits.shape[-1]
        soft = jax.nn.one_hot(target, n_classes) * (1 - eps) + eps / n_classes
        ce = common.wmean(-(soft * jax.nn.log_softmax(logits, -1)).sum(-1), w * (target >= 0))
    return ce, {"ce": ce, "train_acc": acc}, emb, target, w

