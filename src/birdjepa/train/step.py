"""The jitted computations of a run: loss, one optimiser update, one eval batch, and the host-side
guard that stops a run whose updates keep coming out non-finite."""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

import birdjepa.config
import birdjepa.data.device_features
import birdjepa.objectives
import birdjepa.objectives.probe
import birdjepa.objectives.terms
import birdjepa.optim
import birdjepa.train.state


class NonFiniteError(RuntimeError):
    pass


def features(batch: dict, cfg: birdjepa.config.Config) -> dict:
    """The batch the objectives read: with `data.features = "device"` the loader's windows made
    into log-mel views here, on the device (`birdjepa.data.device_features.featurize`); host
    features that crossed as bfloat16 (the loader's `batch_dtype`) back in float32 (the encoder
    rounds its input to its compute dtype either way)."""
    if "wave" in batch:
        batch = birdjepa.data.device_features.featurize(batch, cfg.data)
    return {k: v.astype(jnp.float32) if k in ("data", "local") else v for k, v in batch.items()}


def loss_fn(params, static, batch, key, cfg: birdjepa.config.Config):
    """Objective loss + probe loss (the probe sees a stop-gradient embedding)."""
    batch = features(batch, cfg)
    m = eqx.combine(params, static)
    obj, sub = birdjepa.objectives.get(cfg.objective)
    loss, parts, emb, target, w = obj.loss(sub, m["encoder"], m["heads"], batch, key=key)
    probe_loss, probe_acc = birdjepa.objectives.probe.loss(m["probe"], emb, target, w)
    emb_mean, emb_sq = birdjepa.objectives.probe.batch_stats(emb, w)
    return loss + probe_loss, {"loss": loss, **parts, "probe_loss": probe_loss,
                               "probe_acc": probe_acc, "emb_mean": emb_mean, "emb_sq": emb_sq}


def _accumulate_grads(params, static, batch, key, cfg: birdjepa.config.Config):
    """Mean gradients and loss parts over the grad_accum micro-batches (leading batch axis)."""
    n_micro = cfg.optim.grad_accum
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def micro(acc, xs):
        i, mb = xs
        (total, parts), g = grad_fn(params, static, mb, jax.random.fold_in(key, i), cfg)
        acc_g, acc_parts = acc
        return (jax.tree.map(jnp.add, acc_g, g),
                jax.tree.map(jnp.add, acc_parts, {**parts, "total": total})), None

    zeros_g = jax.tree.map(jnp.zeros_like, params)
    parts_shape = jax.eval_shape(
        lambda: grad_fn(params, static, jax.tree.map(lambda x: x[0], batch), key, cfg)[0]
    )
    zeros_parts = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                               {**parts_shape[1], "total": parts_shape[0]})
    (grads, parts), _ = jax.lax.scan(micro, (zeros_g, zeros_parts), (jnp.arange(n_micro), batch))
    return (jax.tree.map(lambda g: g / n_micro, grads),
            jax.tree.map(lambda p: p / n_micro, parts))


def update(state: dict, batch: dict, *, static, tx, cfg: birdjepa.config.Config,
           lr_cap: float = 1.0):
    """One optimiser update over grad_accum micro-batches (leading axis of every batch array).
    `lr_cap`: the cap on the schedule factor of an extended run (birdjepa.optim.extension_cap).

    Non-finite loss or gradients, or a batch with no valid row, skip the update: params and opt
    state are returned unchanged, only `step` advances (metric `empty_batch` flags the latter).
    """
    step, params = state["step"], state["params"]
    key = jax.random.fold_in(state["key"], step)
    grads, parts = _accumulate_grads(params, static, batch, key, cfg)
    finite = jnp.isfinite(parts["total"]) & jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)])
    )
    lr_factor = jnp.minimum(lr_cap, birdjepa.optim.schedule(cfg.optim, cfg.n_steps)(step))
    updates, new_opt = tx.update(grads, state["opt"], params)
    updates = jax.tree.map(lambda u: lr_factor * u, updates)
    new_params = optax.apply_updates(params, updates)
    # The probe's input standardisation follows the embedding (micro-batch-averaged statistics).
    new_params["probe"] = birdjepa.objectives.probe.update_stats(
        new_params["probe"], parts.pop("emb_mean"), parts.pop("emb_sq"), first=step == 0)
    # A batch without one valid row (every sample failed) takes no optimiser step either.
    any_valid = jnp.any(batch["valid"]) if "valid" in batch else jnp.array(True)
    apply = finite & any_valid
    keep = functools.partial(jax.tree.map, lambda new, old: jnp.where(apply, new, old))
    new_params, new_opt = keep(new_params, params), keep(new_opt, state["opt"])
    metrics = {
        **{k: v for k, v in parts.items() if k != "total"},
        "lr": cfg.optim.lr * lr_factor,
        "grad_norm": birdjepa.optim.model_grad_norm(grads),
        "param_norm": optax.tree.norm({k: v for k, v in new_params.items() if k != "probe"}),
        "finite": finite | ~any_valid,
        "empty_batch": ~any_valid,
    }
    new_state = {**state, "params": new_params, "opt": new_opt, "step": step + 1}
    return new_state, metrics


def jit_update(cfg: birdjepa.config.Config, *, static, tx, lr_cap: float = 1.0):
    """The jitted train step (the state argument is donated)."""
    return jax.jit(functools.partial(update, static=static, tx=tx, cfg=cfg, lr_cap=lr_cap),
                   donate_argnums=0)


def eval_step(params, batch, *, static, cfg: birdjepa.config.Config):
    """Sums over one eval batch: labelled valid rows, probe top-1 hits and loss, supervised head
    hits (class ids or multi-hot targets: `objectives.terms.per_row`)."""
    m = eqx.combine(params, static)
    batch = features(batch, cfg)
    target = batch["target"]
    emb = m["encoder"](batch["data"]).pooled_bd
    ce, hit, labelled = birdjepa.objectives.terms.per_row(m["probe"](emb), target)
    w = batch["valid"].astype(jnp.float32) * labelled
    out = {"n": w.sum(), "probe_correct": (hit * w).sum(), "probe_loss": (ce * w).sum()}
    if cfg.objective.name == "supervised":
        _, head_hit, _ = birdjepa.objectives.terms.per_row(m["heads"].head(emb), target)
        out["head_correct"] = (head_hit * w).sum()
    return out


def jit_eval(cfg: birdjepa.config.Config, *, static):
    return jax.jit(functools.partial(eval_step, static=static, cfg=cfg))


def evaluate(eval_fn, state, eval_loader, batch_size: int, mesh) -> dict:
    """One pass over the eval loader: probe (and supervised head) accuracy over valid rows."""
    totals: dict[str, float] = {}
    for batch in eval_loader:
        sharded = birdjepa.train.state.shard_eval_batch(batch, batch_size, mesh)
        out = jax.device_get(eval_fn(state["params"], sharded))
        for k, v in out.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    n = max(totals.get("n", 0.0), 1.0)
    row = {"eval/probe_acc": totals.get("probe_correct", 0.0) / n,
           "eval/probe_loss": totals.get("probe_loss", 0.0) / n, "eval/n": totals.get("n", 0.0)}
    if "head_correct" in totals:
        row["eval/head_acc"] = totals["head_correct"] / n
    return row


@dataclasses.dataclass
class NonFiniteGuard:
    """Counts skipped (non-finite) updates; raises NonFiniteError after `max_run` in a row,
    naming the steps and the last finite step's loss and gradient norm."""

    max_run: int
    run: int = 0
    total: int = 0
    first_bad: int | None = None
    last_finite: tuple[int, dict] | None = None

    def observe(self, step: int, finite: bool, metrics: dict) -> None:
        """Record update `step` (1-based: updates done); raise once the run of bad ones is
        too long."""
        if finite:
            self.run, self.last_finite = 0, (step, metrics)
            return
        self.total += 1
        self.run += 1
        self.first_bad = step if self.run == 1 else self.first_bad
        print(f"step {step}: non-finite loss/grads, update skipped "
              f"({self.run} in a row, {self.total} total)", flush=True)
        if self.run >= self.max_run:
            last = "no finite step yet"
            if self.last_finite:
                s, m = self.last_finite
                last = f"last finite step {s}: loss={m['loss']:.6g}, grad_norm={m['grad_norm']:.6g}"
            raise NonFiniteError(
                f"{self.run} consecutive non-finite updates, steps {self.first_bad}..{step} "
                f"(max_nonfinite={self.max_run}); {last}"
            )
