"""Pretraining loop: `python -m birdjepa.pretrain --cfg FILE.toml [--n_steps=40 ...]`.

Read `main` top to bottom. The train state is one pytree
    {"params": {"encoder", "heads", "probe"} arrays, "opt": optax state, "key": base key,
     "step": int32 updates done}
and every random draw of update `step` comes from fold_in(state["key"], step), so a run resumed
from (state, loader.state_dict()) at a step boundary continues bit-exactly.
"""

import dataclasses
import functools
import json
import pathlib
import shutil
import sys
import time
import uuid

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import birdjepa
import birdjepa.checkpoint
import birdjepa.config
import birdjepa.distributed
import birdjepa.encoder
import birdjepa.metrics
import birdjepa.model
import birdjepa.objectives
import birdjepa.objectives.probe
import birdjepa.optim


class NonFiniteError(RuntimeError):
    pass


def finalize(cfg: birdjepa.config.Config) -> birdjepa.config.Config:
    """Fill run_id/run_dir, resolve the model preset, check cross-field constraints."""
    if cfg.n_classes is None or cfg.n_classes < 2:
        raise birdjepa.config.ConfigError(f"n_classes: expected an int >= 2, got {cfg.n_classes}")
    if cfg.batch_size % cfg.optim.grad_accum:
        raise birdjepa.config.ConfigError(
            f"batch_size={cfg.batch_size} must be divisible by optim.grad_accum="
            f"{cfg.optim.grad_accum}"
        )
    if cfg.objective.name == "lejepa" and cfg.data.n_views < 2:
        raise birdjepa.config.ConfigError(
            f"objective 'lejepa' needs data.n_views >= 2, got {cfg.data.n_views}"
        )
    run_id = cfg.run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    return dataclasses.replace(
        cfg,
        run_id=run_id,
        run_dir=cfg.run_dir or f"runs/{run_id}",
        model=birdjepa.model.resolve(cfg.model),
    )


def make_loaders(cfg: birdjepa.config.Config, *, train_state: dict | None = None):
    """(train, eval) birdjepa.data.Loader over the configured shards; fails fast on missing
    paths. `train_state` (a train loader's state_dict()) resumes the train stream."""
    for name in ("train_shards", "eval_shards"):
        path = getattr(cfg.data, name)
        if not path:
            raise birdjepa.config.ConfigError(f"data.{name} is required; got {path!r}")
        if not any(c in path for c in "*?[") and not pathlib.Path(path).exists():
            raise FileNotFoundError(f"data.{name}: {path!r} does not exist")
    import birdjepa.data as data_lib  # lazy: the loader needs the Rust extension

    d = cfg.data
    # batch_size is global: with several processes each gets its batch_size // process_count.
    common = dict(
        seed=cfg.seed,
        n_workers=d.n_workers,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
        n_frames=d.n_frames,
        n_mels=d.n_mels,
        audio_column=d.audio_column,
        label_column=d.label_column,
    )
    train = data_lib.Loader(
        d.train_shards, mode="train", batch_size=cfg.batch_size, n_views=d.n_views,
        state=train_state, **common,
    )
    evals = data_lib.Loader(
        d.eval_shards, mode="eval", batch_size=d.eval_batch_size or cfg.batch_size, **common
    )
    return train, evals


def init_params(cfg: birdjepa.config.Config, *, key) -> tuple[dict, dict]:
    """(arrays, static) of {"encoder", "heads", "probe"}."""
    k_enc, k_heads, k_probe = jax.random.split(key, 3)
    obj, sub = birdjepa.objectives.get(cfg.objective)
    enc = birdjepa.model.ViT(cfg.model, n_frames=cfg.data.n_frames, n_mels=cfg.data.n_mels,
                             key=k_enc)
    modules = {
        "encoder": enc,
        "heads": obj.init_heads(sub, enc, cfg.n_classes, key=k_heads),
        "probe": birdjepa.objectives.probe.init(enc.width, cfg.n_classes, key=k_probe),
    }
    return eqx.partition(modules, eqx.is_array)


def loss_fn(params, static, batch, key, cfg: birdjepa.config.Config):
    """Objective loss + probe loss (the probe sees a stop-gradient embedding)."""
    m = eqx.combine(params, static)
    obj, sub = birdjepa.objectives.get(cfg.objective)
    loss, parts, emb, target, w = obj.loss(sub, m["encoder"], m["heads"], batch, key=key)
    probe_loss, probe_acc = birdjepa.objectives.probe.loss(m["probe"], emb, target, w)
    emb_mean, emb_sq = birdjepa.objectives.probe.batch_stats(emb, w)
    return loss + probe_loss, {"loss": loss, **parts, "probe_loss": probe_loss,
                               "probe_acc": probe_acc, "emb_mean": emb_mean, "emb_sq": emb_sq}


def update(state: dict, batch: dict, *, static, tx, cfg: birdjepa.config.Config):
    """One optimiser update over grad_accum micro-batches (leading axis of every batch array).

    Non-finite loss or gradients skip the update: params and opt state are returned unchanged,
    only `step` advances.
    """
    step, params = state["step"], state["params"]
    key = jax.random.fold_in(state["key"], step)
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
    grads = jax.tree.map(lambda g: g / n_micro, grads)
    parts = jax.tree.map(lambda p: p / n_micro, parts)

    finite = jnp.isfinite(parts["total"]) & jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)])
    )
    lr_factor = birdjepa.optim.schedule(cfg.optim, cfg.n_steps)(step)
    updates, new_opt = tx.update(grads, state["opt"], params)
    updates = jax.tree.map(lambda u: lr_factor * u, updates)
    new_params = optax.apply_updates(params, updates)
    # The probe's input standardisation follows the embedding (micro-batch-averaged statistics).
    new_params["probe"] = birdjepa.objectives.probe.update_stats(
        new_params["probe"], parts.pop("emb_mean"), parts.pop("emb_sq"), first=step == 0)
    keep = functools.partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
    new_params, new_opt = keep(new_params, params), keep(new_opt, state["opt"])
    metrics = {
        **{k: v for k, v in parts.items() if k != "total"},
        "lr": cfg.optim.lr * lr_factor,
        "grad_norm": birdjepa.optim.model_grad_norm(grads),
        "param_norm": optax.tree.norm({k: v for k, v in new_params.items() if k != "probe"}),
        "finite": finite,
    }
    new_state = {**state, "params": new_params, "opt": new_opt, "step": step + 1}
    return new_state, metrics


def eval_step(params, batch, *, static, cfg: birdjepa.config.Config):
    """Sums over one eval batch: valid rows, probe correct and CE, supervised head correct."""
    m = eqx.combine(params, static)
    w = (batch["valid"] & (batch["target"] >= 0)).astype(jnp.float32)
    target = jnp.maximum(batch["target"], 0)
    emb = m["encoder"](batch["data"]).pooled_bd
    logits = m["probe"](emb)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, target)
    out = {
        "n": w.sum(),
        "probe_correct": ((logits.argmax(-1) == target) * w).sum(),
        "probe_loss": (ce * w).sum(),
    }
    if cfg.objective.name == "supervised":
        out["head_correct"] = ((m["heads"].head(emb).argmax(-1) == target) * w).sum()
    return out


def shard_batch(batch: dict, cfg: birdjepa.config.Config, mesh) -> dict:
    """Host batch -> global arrays with a leading micro-batch axis, sharded on the batch axis."""
    n_micro = cfg.optim.grad_accum
    out = {}
    for k in ("data", "target", "valid"):
        if k not in batch:
            continue
        x = np.asarray(batch[k])
        b_axis = 1 if (k == "data" and x.ndim == 4) else 0
        b = x.shape[b_axis]
        x = x.reshape(*x.shape[:b_axis], n_micro, b // n_micro, *x.shape[b_axis + 1:])
        x = np.moveaxis(x, b_axis, 0)  # (n_micro, [V,] b, ...)
        spec = P(*([None] * (b_axis + 1)), "data")
        out[k] = jax.make_array_from_process_local_data(NamedSharding(mesh, spec), x)
    return out


def shard_eval_batch(batch: dict, batch_size: int, mesh) -> dict:
    """Pad this process's slice of an eval batch to `batch_size` (the per-process eval batch,
    eval_batch_size // process_count; valid False on padding) and build global arrays from it.
    Every process pads to the same size and runs the same number of batches (the loader pads a
    process whose slice ran out), so the collective eval step lines up."""
    b = len(batch["target"])
    valid = np.asarray(batch.get("valid", np.ones(b, bool)), bool)
    out = {"data": np.asarray(batch["data"]), "target": np.asarray(batch["target"]),
           "valid": valid}
    if b < batch_size:
        out = {k: np.concatenate([v, np.zeros((batch_size - b, *v.shape[1:]), v.dtype)])
               for k, v in out.items()}
    sharding = NamedSharding(mesh, P("data"))
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in out.items()}


def check_batch(batch: dict, cfg: birdjepa.config.Config) -> None:
    b = cfg.batch_size // jax.process_count()
    want = (b, cfg.data.n_frames, cfg.data.n_mels)
    if cfg.data.n_views > 1:
        want = (cfg.data.n_views, *want)
    got = tuple(np.shape(batch["data"]))
    if got != want:
        raise ValueError(f"train batch 'data': expected shape {want} from the config, got {got}")


def make_mesh(n_devices: int | None = None):
    """A 1-D "data" mesh over the global devices (every process's), or the first `n_devices`."""
    devices = jax.devices()[: n_devices or jax.device_count()]
    return jax.sharding.Mesh(np.array(devices), ("data",))


def init_state(cfg: birdjepa.config.Config, mesh):
    """(state, static, tx), with the state replicated over the mesh.

    The state is built inside one jit whose outputs are replicated over the (possibly
    multi-process) mesh: every process computes the same values and the leaves, PRNG key
    included, are global arrays (Orbax refuses a host-local key with several processes)."""
    shapes, static = eqx.filter_eval_shape(lambda k: init_params(cfg, key=k), jax.random.key(0))
    tx = birdjepa.optim.make(cfg.optim, shapes)

    def make_state():
        k_init, k_train = jax.random.split(jax.random.key(cfg.seed))
        params, _ = init_params(cfg, key=k_init)
        return {"params": params, "opt": tx.init(params), "key": k_train,
                "step": jnp.zeros((), jnp.int32)}

    state = jax.jit(make_state, out_shardings=NamedSharding(mesh, P()))()
    return state, static, tx


def _encoder_shaping(cfg_dict: dict) -> dict:
    """The config entries the encoder's parameters depend on."""
    data = cfg_dict.get("data") or {}
    return {"model": cfg_dict.get("model"), "data.n_frames": data.get("n_frames"),
            "data.n_mels": data.get("n_mels")}


def load_encoder(cfg: birdjepa.config.Config, state: dict, mesh) -> dict:
    """`state` with its encoder replaced by the encoder in the latest checkpoint of the run
    `cfg.init_encoder` (optimiser state, heads and probe stay freshly initialised)."""
    src = pathlib.Path(cfg.init_encoder)
    ckpt_dir = src / "checkpoints" if (src / "checkpoints").is_dir() else src
    if not ckpt_dir.is_dir():
        raise birdjepa.config.ConfigError(
            f"init_encoder: expected a run directory or its checkpoints/ directory, "
            f"got {str(src)!r}, which does not exist")
    with birdjepa.checkpoint.Checkpointer(ckpt_dir, every=1, keep=1, read_only=True) as ck:
        step = ck.latest_step()
        if step is None:
            raise birdjepa.config.ConfigError(
                f"init_encoder: no complete checkpoint in {ckpt_dir}")
        saved = ck.read_meta(step).get("config", {})
        diff = birdjepa.checkpoint.config_diff(_encoder_shaping(saved),
                                               _encoder_shaping(dataclasses.asdict(cfg)))
        if diff:
            lines = "; ".join(f"{k}: checkpoint has {a!r}, config has {b!r}" for k, a, b in diff)
            raise birdjepa.config.ConfigError(
                f"init_encoder: {ckpt_dir} step {step} holds another model ({lines})")
        src_cfg = birdjepa.config.from_dict(birdjepa.config.Config,
                                            birdjepa.config.strip_none(saved))
        like, _ = birdjepa.encoder.abstract_state(src_cfg, sharding=NamedSharding(mesh, P()))
        encoder = ck.restore(like, step=step).state["params"]["encoder"]
    params = {**state["params"], "encoder": encoder}
    print(f"encoder initialised from {ckpt_dir} step {step}", flush=True)
    return {**state, "params": params}


def jit_update(cfg: birdjepa.config.Config, *, static, tx):
    """The jitted train step (the state argument is donated)."""
    return jax.jit(functools.partial(update, static=static, tx=tx, cfg=cfg), donate_argnums=0)


def evaluate(eval_fn, state, eval_loader, batch_size: int, mesh) -> dict:
    totals: dict[str, float] = {}
    for batch in eval_loader:
        out = jax.device_get(eval_fn(state["params"], shard_eval_batch(batch, batch_size, mesh)))
        for k, v in out.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    n = max(totals.get("n", 0.0), 1.0)
    row = {"eval/probe_acc": totals.get("probe_correct", 0.0) / n,
           "eval/probe_loss": totals.get("probe_loss", 0.0) / n, "eval/n": totals.get("n", 0.0)}
    if "head_correct" in totals:
        row["eval/head_acc"] = totals["head_correct"] / n
    return row


NOT_SHAPING = (
    "n_steps", "run_id", "run_dir", "resume", "eval_every", "log_every", "ckpt_every",
    "ckpt_keep", "wandb", "max_nonfinite", "distributed", "data.n_workers", "data.eval_shards",
    "data.eval_batch_size",
)
"""Config keys that change neither the model nor the training stream: a checkpoint written under
one value resumes under another (e.g. raise n_steps to extend a run)."""


def code_version() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=5, cwd=pathlib.Path(__file__).parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def read_complete(run_dir: pathlib.Path) -> dict | None:
    """The summary in run_dir/COMPLETE, written only when training finished; None if absent."""
    path = run_dir / "COMPLETE"
    if not path.exists():
        return None
    text = path.read_text().strip()
    return json.loads(text) if text else {"steps": None}


def open_checkpoints(cfg, run_dir: pathlib.Path, cfg_dict: dict):
    """(Checkpointer, latest step to resume from or None), applying cfg.resume."""
    ckpt_dir = run_dir / "checkpoints"
    ckpt = birdjepa.checkpoint.Checkpointer(ckpt_dir, every=cfg.ckpt_every, keep=cfg.ckpt_keep)
    latest = ckpt.latest_step()
    if latest is None:
        return ckpt, None
    if cfg.resume == "never":
        ckpt.close()
        if jax.process_index() == 0:
            aside = run_dir / f"checkpoints.old-{time.strftime('%Y%m%d-%H%M%S')}"
            shutil.move(ckpt_dir, aside)
            if (run_dir / "metrics.jsonl").exists():  # the old run's rows go with its checkpoints
                shutil.move(run_dir / "metrics.jsonl", aside / "metrics.jsonl")
            print(f"resume=never: moved existing checkpoints to {aside}", flush=True)
        birdjepa.distributed.barrier("resume-never")
        ckpt = birdjepa.checkpoint.Checkpointer(ckpt_dir, every=cfg.ckpt_every,
                                                keep=cfg.ckpt_keep)
        return ckpt, None
    saved = ckpt.read_meta(latest).get("config", {})
    diff = birdjepa.checkpoint.config_diff(saved, cfg_dict, ignore=NOT_SHAPING)
    if diff and cfg.resume != "force":
        lines = "; ".join(f"{k}: checkpoint has {a!r}, config has {b!r}" for k, a, b in diff)
        raise birdjepa.config.ConfigError(
            f"{ckpt_dir} holds step {latest} of a run with a different config ({lines}). "
            "Use --resume=force to continue anyway, --resume=never to start over, or another "
            "--run_dir."
        )
    return ckpt, latest


def open_loaders(cfg: birdjepa.config.Config, loaders, train_state: dict | None):
    """(train, eval) loaders, the train stream resumed from `train_state`.

    With resume="force" and a config that changed the stream (seed, batch size, shards...), the
    saved position does not fit the new stream: the new stream is entered at the same step.
    """
    if loaders is not None and not callable(loaders):
        if train_state is not None:
            raise ValueError("resuming needs `loaders` as a callable (cfg, train_state=...)")
        return loaders
    build = make_loaders if loaders is None else loaders
    try:
        return build(cfg, train_state=train_state)
    except birdjepa.StateMismatchError as e:
        if cfg.resume != "force":
            raise
        print(f"resume=force: {e}; entering the new stream at step {train_state['step']}",
              flush=True)
    train, evals = build(cfg, train_state=None)
    moved = {**train.state_dict(), "step": int(train_state["step"])}
    train.close()
    evals.close()
    return build(cfg, train_state=moved)


def main(cfg: birdjepa.config.Config, *, loaders=None, should_stop=None) -> dict:
    """Train and return a summary dict.

    `loaders` = (train, eval) replaces make_loaders(cfg) (tests, benchmarks). `should_stop()` is
    polled at every step boundary; when true the run stops there with summary["preempted"].
    """
    cfg = finalize(cfg)
    birdjepa.distributed.initialize(cfg.distributed)
    is_main = jax.process_index() == 0
    run_dir = pathlib.Path(cfg.run_dir)
    done_before = read_complete(run_dir)
    if (done_before is not None and cfg.resume != "never"
            and (done_before.get("steps") or 0) >= cfg.n_steps):
        if is_main:
            print(f"run {cfg.run_id} is already complete ({done_before.get('steps')} steps) "
                  f"in {run_dir}; nothing to do", flush=True)
        return {**done_before, "already_complete": True, "preempted": False}
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_dict = dataclasses.asdict(cfg)
    if is_main:
        (run_dir / "COMPLETE").unlink(missing_ok=True)  # n_steps was raised: train on
        (run_dir / "config.toml").write_text(birdjepa.config.to_toml(cfg))
    ckpt, resume_step = open_checkpoints(cfg, run_dir, cfg_dict)
    meta = {"config": cfg_dict, "config_hash": birdjepa.checkpoint.config_hash(
        cfg_dict, ignore=NOT_SHAPING), "code_version": code_version(), "wandb_id": cfg.run_id}

    # Data parallel over every process's devices: each process feeds its batch_size //
    # process_count slice of every global batch (its own loader) into global arrays. With
    # grad_accum > 1 a global micro-batch is the concatenation of the processes' local
    # micro-batches: the same clips per update as one process, grouped differently.
    mesh = make_mesh()
    n_dev = mesh.devices.size
    micro = cfg.batch_size // cfg.optim.grad_accum
    eval_bs = cfg.data.eval_batch_size or cfg.batch_size
    if micro % n_dev or eval_bs % n_dev:
        raise birdjepa.config.ConfigError(
            f"micro-batch {micro} and eval batch {eval_bs} must be divisible by the "
            f"{n_dev} devices"
        )
    state, static, tx = init_state(cfg, mesh)
    train_state = None
    if resume_step is not None:
        t0 = time.perf_counter()
        restored = ckpt.restore(state, step=resume_step)
        state, train_state = restored.state, restored.loader
        if is_main:
            print(f"resumed from step {resume_step} ({time.perf_counter() - t0:.2f} s)",
                  flush=True)
            birdjepa.metrics.truncate(run_dir / "metrics.jsonl", after_step=resume_step)
    else:
        if cfg.init_encoder:
            state = load_encoder(cfg, state, mesh)
        if is_main:
            # Rows of a run killed before its first checkpoint committed: logged from step 1.
            birdjepa.metrics.truncate(run_dir / "metrics.jsonl", after_step=0)
    train_loader, eval_loader = open_loaders(cfg, loaders, train_state)
    n_params = sum(x.size for x in jax.tree.leaves(state["params"]["encoder"]))
    print(f"run {cfg.run_id} -> {run_dir} | {cfg.objective.name} | encoder {n_params:,} params "
          f"| {n_dev} device(s)", flush=True)

    update_fn = jit_update(cfg, static=static, tx=tx)
    eval_fn = jax.jit(functools.partial(eval_step, static=static, cfg=cfg))
    logger = birdjepa.metrics.Logger(run_dir, cfg, config_dict=cfg_dict, enabled=is_main)

    nonfinite_run, nonfinite_total, first_bad, last_finite = 0, 0, None, None
    preempted = False
    last_row, eval_row = {}, {}
    window = {"t": 0.0, "wait": 0.0, "n": 0}
    t_start = time.perf_counter()
    train_iter = iter(train_loader)
    start = int(state["step"])
    try:
        for step in range(start, cfg.n_steps):
            t0 = time.perf_counter()
            batch = next(train_iter)
            t_data = time.perf_counter()
            if step == start:
                check_batch(batch, cfg)
            state, m = update_fn(state, shard_batch(batch, cfg, mesh))
            # Fetching the small metrics dict syncs every step; this keeps timing honest and
            # lets the non-finite guard react at once. Step times dominate at these sizes.
            m = {k: v.item() for k, v in jax.device_get(m).items()}
            done = step + 1
            t_end = time.perf_counter()
            window["t"] += t_end - t0
            window["wait"] += t_data - t0
            window["n"] += 1

            finite = bool(m.pop("finite"))
            if finite:
                nonfinite_run, last_finite = 0, (done, m)
            else:
                nonfinite_total += 1
                nonfinite_run += 1
                first_bad = done if nonfinite_run == 1 else first_bad
                logger.log(done, {**m, "nonfinite": 1, "nonfinite_total": nonfinite_total})
                print(f"step {done}: non-finite loss/grads, update skipped "
                      f"({nonfinite_run} in a row, {nonfinite_total} total)", flush=True)
                if nonfinite_run >= cfg.max_nonfinite:
                    last = (f"last finite step {last_finite[0]}: loss={last_finite[1]['loss']:.6g}"
                            f", grad_norm={last_finite[1]['grad_norm']:.6g}"
                            if last_finite else "no finite step yet")
                    raise NonFiniteError(
                        f"{nonfinite_run} consecutive non-finite updates, steps {first_bad}.."
                        f"{done} (max_nonfinite={cfg.max_nonfinite}); {last}"
                    )

            if finite and (done % cfg.log_every == 0 or done in (1, cfg.n_steps)):
                rate = {"steps_per_s": window["n"] / window["t"],
                        "clips_per_s": window["n"] * cfg.batch_size / window["t"],
                        "data_wait_frac": window["wait"] / window["t"]}
                last_row = {**m, **rate, "nonfinite_total": nonfinite_total}
                logger.log(done, last_row)
                print(birdjepa.metrics.console_line(done, cfg.n_steps, m, rate), flush=True)
                window = {"t": 0.0, "wait": 0.0, "n": 0}

            if (cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.n_steps:
                eval_row = evaluate(eval_fn, state, eval_loader,
                                    eval_bs // jax.process_count(), mesh)
                logger.log(done, eval_row)
                print(f"step {done} eval | " + " | ".join(
                    f"{k} {v:.4g}" for k, v in eval_row.items()), flush=True)
            stop = should_stop is not None and birdjepa.distributed.any_process(should_stop())
            final = done == cfg.n_steps or (stop and done < cfg.n_steps)
            # A collective: every process calls save. The loader state is global (the next
            # global step of the stream, not this process's slice), so the JSON item that Orbax
            # keeps, process 0's, resumes every process.
            if final or done % cfg.ckpt_every == 0:
                ckpt.save(done, state, loader=train_loader.state_dict(),
                          meta={**meta, "step": done}, force=final)
            if stop and done < cfg.n_steps:
                ckpt.wait()
                preempted = True
                if is_main:
                    print(f"step {done}: stop requested; checkpoint saved", flush=True)
                break
    finally:
        ckpt.close()  # waits for an async save in flight: a completed step is never lost
        logger.close()
        if not (loaders is not None and not callable(loaders)):
            train_loader.close()
            eval_loader.close()

    if is_main and not preempted:  # a preempted job's grace period is for the requeue
        birdjepa.metrics.plot(run_dir / "metrics.jsonl", run_dir / "curves.png")
    summary = {
        "run_dir": str(run_dir),
        "steps": int(state["step"]),
        "final_loss": last_row.get("loss", float("nan")),
        "train_probe_acc": last_row.get("probe_acc", float("nan")),
        "eval_probe_acc": eval_row.get("eval/probe_acc", float("nan")),
        "nonfinite_total": nonfinite_total,
        "preempted": preempted,
        "seconds": time.perf_counter() - t_start,
    }
    if "eval/head_acc" in eval_row:
        summary["eval_head_acc"] = eval_row["eval/head_acc"]
    if not preempted and is_main:
        # Written last, after the final checkpoint committed: birdjepa.launch skips such runs.
        (run_dir / "COMPLETE").write_text(json.dumps(summary))
    print("done | " + " | ".join(
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()),
        flush=True)
    return summary


EXIT_PREEMPTED = 75
"""Exit status of a run stopped by SIGTERM/SIGUSR2 after saving its checkpoint (EX_TEMPFAIL)."""


def cli_main(argv: list[str]) -> int:
    """Command line: SIGTERM and SIGUSR2 stop the run at the next step boundary with a saved
    checkpoint; starting the same command again resumes it."""
    import signal

    import birdjepa.job

    try:
        cfg = birdjepa.config.cli(argv)
        stop = birdjepa.job.Preemption()
        for sig in (signal.SIGTERM, signal.SIGUSR2):
            stop.install(sig)
        summary = main(cfg, should_stop=stop.is_set)
    except birdjepa.config.ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    return EXIT_PREEMPTED if summary.get("preempted") else 0


if __name__ == "__main__":
    sys.exit(cli_main(sys.argv[1:]))
