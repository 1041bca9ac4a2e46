"""Optimiser and learning-rate schedules.

The optimiser is built with the peak learning rates; the training step multiplies its updates
by `schedule(cfg, n_steps)(step)`, a factor in (0, 1], so the schedule advances once per update
(never per micro-batch) and the logged lr is exactly the one applied.

Parameters are a dict {"encoder", "heads", "probe"} of array pytrees. Encoder and heads share
one clipped optimiser (AdamW, or Muon on block matrices + AdamW elsewhere); the probe has its own
unclipped AdamW so that its gradients never change the encoder's clipping.
"""

import typing

import jax
import jax.numpy as jnp
import optax
import optax.contrib

import birdjepa.config.optimizer

OptimConfig = birdjepa.config.optimizer.OptimConfig


def schedule(cfg: OptimConfig, n_steps: int) -> typing.Callable[[jax.Array], jax.Array]:
    """Multiplier of the peak lr at update `step` (0-based): in [final_lr_frac, 1], never 0."""
    floor, warmup = cfg.final_lr_frac, max(cfg.warmup, 0)
    if not 0 < floor <= 1:
        raise ValueError(f"optim.final_lr_frac: expected in (0, 1], got {floor}")

    def fn(step):
        step = jnp.asarray(step, jnp.float32)
        warm = jnp.minimum((step + 1) / max(warmup, 1), 1.0)
        if cfg.schedule == "cosine":
            p = jnp.clip((step - warmup) / max(n_steps - warmup, 1), 0.0, 1.0)
            decay = floor + (1 - floor) * 0.5 * (1 + jnp.cos(jnp.pi * p))
        elif cfg.schedule == "wsd":
            n_decay = max(int(round(cfg.decay_frac * n_steps)), 1)
            start = max(n_steps - n_decay, warmup)
            p = jnp.clip((step - start) / max(n_steps - start, 1), 0.0, 1.0)
            decay = 1 - (1 - floor) * p
        else:
            raise ValueError(f"optim.schedule: expected 'cosine' or 'wsd', got {cfg.schedule!r}")
        return jnp.where(step < warmup, warm, decay)

    return fn


def extension_cap(cfg: OptimConfig, *, old_n_steps: int, old_cap: float, step: int) -> float:
    """The cap on the schedule factor of a run extended (resume="extend") at update `step`
    from `old_n_steps` (whose factor was capped at `old_cap`) to a new n_steps.

    The rule: from then on the factor is min(cap, schedule(cfg, new_n_steps)(t)), where cap is
    the factor the run had at `step`. So the learning rate is continuous at the extension and
    never goes up: it stays at the old value until the longer schedule comes down to it, then
    follows that schedule to its floor at the new end (a finished cosine run continues at its
    floor). During warmup both schedules agree, so no cap is needed (1.0)."""
    if step < cfg.warmup:
        return float(old_cap)
    factor = float(schedule(cfg, old_n_steps)(step))
    return min(float(old_cap), factor)


def _names(path) -> list[str]:
    out = []
    for p in path:
        for attr in ("name", "key", "idx"):
            if hasattr(p, attr):
                out.append(str(getattr(p, attr)))
                break
    return out


def decay_mask(params) -> typing.Any:
    """True on Linear weight matrices (leaf named `w`), False elsewhere."""
    return jax.tree_util.tree_map_with_path(lambda path, _: _names(path)[-1] == "w", params)


def muon_labels(params) -> typing.Any:
    """'muon' on the weight matrices of transformer blocks (stacked (depth, d_in, d_out)),
    'adam' on everything else (patch/position embeddings, tokens, heads, norms, biases)."""

    def label(path, x):
        names = _names(path)
        return "muon" if "blocks" in names and names[-1] == "w" and x.ndim >= 2 else "adam"

    return jax.tree_util.tree_map_with_path(label, params)


def make(cfg: OptimConfig, params: dict) -> optax.GradientTransformation:
    """The optimiser for {"encoder", "heads", "probe"} at peak learning rates."""
    adamw = optax.adamw(
        cfg.lr, b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay, mask=decay_mask
    )
    if cfg.muon:
        muon = optax.contrib.muon(
            cfg.muon_lr,
            weight_decay=cfg.weight_decay,
            # Blocks are stacked by lax.scan: axis 0 is a batch of (d_in, d_out) matrices.
            muon_weight_dimension_numbers=optax.contrib.MuonDimensionNumbers(-2, -1),
        )
        inner = optax.partition({"muon": muon, "adam": adamw}, muon_labels)
    else:
        inner = adamw
    model_tx = optax.chain(optax.clip_by_global_norm(cfg.clip), inner) if cfg.clip else inner
    probe_tx = optax.adamw(cfg.probe_lr, b1=cfg.b1, b2=cfg.b2, weight_decay=0.0)

    def labels(p):
        return {k: jax.tree.map(lambda _, k=k: "probe" if k == "probe" else "model", v)
                for k, v in p.items()}

    return optax.partition({"model": model_tx, "probe": probe_tx}, labels)


def model_grad_norm(grads: dict) -> jax.Array:
    """Global norm of the encoder + heads gradients (what clipping sees)."""
    return optax.tree.norm({k: v for k, v in grads.items() if k != "probe"})
