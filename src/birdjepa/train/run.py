"""A run directory's life: open it, decide where the train state comes from, save, finish.

Where the state comes from, in this order (the whole resume policy):
1. Resume. run_dir/checkpoints holds a complete step: restore it (model, optimiser, PRNG key,
   step) and the loader position, and continue bit-exactly. A config that changed a key that
   shapes the run (everything but `config.identity.NOT_SHAPING`) is refused, naming the keys, unless
   `resume="force"` (continue anyway; a loader stream that changed is entered at the saved
   step) or `resume="never"` (move the checkpoints and metrics aside, then start over).
2. Init-from. `init_encoder` names another run: its latest checkpoint's encoder replaces the
   fresh one (read-only: that run may still be writing); heads, probe and optimiser are fresh.
3. Scratch: everything from `seed`.
A run whose COMPLETE marker records at least n_steps returns at once, after the same config check
as a resume (against run_dir/config.toml). Process 0 holds the run lock (rundir.Lock) for the
whole run and alone writes files beside the checkpoints, once the restore and the loaders work.
"""

import dataclasses
import pathlib
import shutil
import subprocess
import time
import tomllib

import jax

import birdjepa.config
import birdjepa.config.identity as identity
import birdjepa.data
import birdjepa.data.table
import birdjepa.models
import birdjepa.models.artifact
import birdjepa.optim
import birdjepa.runtime.checkpoint
import birdjepa.runtime.compiles
import birdjepa.runtime.distributed
import birdjepa.runtime.rundir
import birdjepa.train.init_encoder
import birdjepa.train.loaders
import birdjepa.train.log
import birdjepa.train.soundness
import birdjepa.train.state
import birdjepa.train.step


@dataclasses.dataclass
class Run:
    """An opened run: its config, directory, checkpoints, loaders and initial state."""

    cfg: birdjepa.config.Config
    dir: pathlib.Path
    is_main: bool
    ckpt: birdjepa.runtime.checkpoint.Checkpointer
    state: dict
    static: dict
    tx: object
    mesh: jax.sharding.Mesh
    train_loader: object
    eval_loader: object
    meta: dict
    owns_loaders: bool
    lock: birdjepa.runtime.rundir.Lock | None
    compile_cache: str | None = None
    """JAX's persistent compilation cache directory (None: off; birdjepa.runtime.compiles)."""

    def save(self, step: int, state: dict, *, loader_state: dict, final: bool) -> None:
        """A collective: every process calls it. `loader_state` is the train loader's state
        after the last batch that went into `state` (birdjepa.train.feed.Fed). It is global
        (the next global step of the stream), so process 0's JSON item resumes every process."""
        self.ckpt.save(step, state, loader=loader_state, meta={**self.meta, "step": step},
                       force=final)

    def close(self) -> None:
        """Waits for an async save in flight (a completed step is never lost), then closes."""
        self.ckpt.close()
        if self.owns_loaders:
            self.train_loader.close()
            self.eval_loader.close()
        if self.lock is not None:
            self.lock.release()


def open_run(cfg: birdjepa.config.Config, *, loaders=None) -> Run | dict:
    """The run for `cfg` (see the module docstring), or the COMPLETE summary of a finished one.

    `loaders` = (train, eval) replaces make_loaders(cfg) (tests, benchmarks); a callable
    `loaders(cfg, train_state=...)` builds them and lets a run resume with them."""
    cfg = birdjepa.runtime.rundir.assign(birdjepa.config.finalize(cfg))
    birdjepa.runtime.distributed.initialize(cfg.distributed)
    compile_cache = birdjepa.runtime.compiles.enable(cfg.compile_cache)
    is_main = jax.process_index() == 0
    run_dir = pathlib.Path(cfg.run_dir)
    done = birdjepa.runtime.rundir.read_complete(run_dir)
    if done is not None and cfg.resume != "never" and (done.get("steps") or 0) >= cfg.n_steps:
        _check_complete(cfg, run_dir)
        if is_main:
            print(f"run {cfg.run_id} is already complete ({done.get('steps')} steps) in "
                  f"{run_dir}; nothing to do", flush=True)
        return {**done, "already_complete": True, "preempted": False}
    mesh = birdjepa.train.state.make_mesh()
    birdjepa.config.check_layout(cfg, n_devices=mesh.devices.size,
                                 process_count=jax.process_count())
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = birdjepa.runtime.rundir.Lock(run_dir).acquire() if is_main else None
    except OSError as e:
        raise birdjepa.config.ConfigError(
            f"run_dir: expected a directory this process can write, got {str(run_dir)!r} "
            f"({type(e).__name__}: {e.strerror or e})") from None
    try:
        run = _open_locked(cfg, run_dir, is_main, mesh, loaders, lock)
    except BaseException as e:
        if lock is not None:
            lock.release()
        if created and is_main and isinstance(e, birdjepa.config.ConfigError):
            shutil.rmtree(run_dir, ignore_errors=True)  # a refused start leaves nothing behind
        raise
    run.compile_cache = compile_cache
    return run


def _check_complete(cfg: birdjepa.config.Config, run_dir: pathlib.Path) -> None:
    """Refuse (ConfigError, naming the keys) a config that shapes the run differently from the
    one the finished run in `run_dir` trained under (its config.toml), unless resume="force"."""
    path = birdjepa.runtime.rundir.config_file(run_dir)
    if cfg.resume == "force" or not path.is_file():
        return
    with open(path, "rb") as f:
        saved = identity.read(tomllib.load(f))
    identity.check_same(
        saved, identity.with_resampler(cfg, saved), ignore=identity.NOT_SHAPING,
        what=f"{run_dir} holds a finished run with a different config; use --resume=never to "
             "train again from scratch, or another --run_dir")


def _open_locked(cfg, run_dir: pathlib.Path, is_main: bool, mesh, loaders, lock) -> Run:
    ckpt, resume_step, cfg = _open_checkpoints(cfg, run_dir)
    try:
        return _open_state(cfg, run_dir, is_main, mesh, loaders, lock, ckpt, resume_step)
    except BaseException:
        ckpt.close()  # e.g. the shards cannot be opened: nothing is left running
        raise


def _open_state(cfg, run_dir, is_main, mesh, loaders, lock, ckpt, resume_step) -> Run:
    cfg_dict = dataclasses.asdict(cfg)
    meta = {"config": cfg_dict, "config_hash": identity.config_hash(cfg_dict),
            "code_version": code_version(), "wandb_id": cfg.run_id, "lr_cap": 1.0}
    state, static, tx = birdjepa.train.state.init_state(cfg, mesh)
    train_state = None
    if resume_step is not None:
        t0 = time.perf_counter()
        try:  # the newest intact step: corrupt ones are set aside
            restored = ckpt.restore(state)
        except birdjepa.runtime.checkpoint.CorruptCheckpointError as e:
            raise birdjepa.runtime.checkpoint.CorruptCheckpointError(f"{e}{RESTART_HINT}") from None
        except birdjepa.runtime.checkpoint.ShapeMismatchError as e:
            raise birdjepa.config.ConfigError(_model_changed(cfg, ckpt, e)) from None
        state, train_state, resume_step = restored.state, restored.loader, restored.step
        meta["lr_cap"] = lr_cap(cfg, restored.meta, resume_step, is_main)
        if is_main:
            print(f"resumed from step {resume_step} ({time.perf_counter() - t0:.2f} s)", flush=True)
    elif cfg.init_encoder:
        state = birdjepa.train.init_encoder.init_from(cfg, state, mesh)
    owns = loaders is None or callable(loaders)
    train, evals = birdjepa.train.loaders.open_loaders(cfg, loaders, train_state)
    if owns:
        birdjepa.train.loaders.check_against_labels(cfg, train, evals)
    if is_main:  # a start that failed before here left the run directory as it was
        birdjepa.runtime.rundir.clear_complete(run_dir)  # n_steps was extended: train on
        birdjepa.runtime.rundir.keep_run_id(run_dir, cfg.run_id)
        birdjepa.runtime.rundir.config_file(run_dir).write_text(birdjepa.config.to_toml(cfg))
        birdjepa.train.log.truncate(birdjepa.runtime.rundir.metrics_file(run_dir),  # rows of
                                    after_step=resume_step or 0)  # a lost future go
    if resume_step is None and getattr(train, "multilabel", False):  # sigmoid heads: a prior
        state = birdjepa.train.state.with_prior_bias(state, cfg.n_classes, mesh)
    return Run(cfg=cfg, dir=run_dir, is_main=is_main, ckpt=ckpt, state=state, static=static,
               tx=tx, mesh=mesh, train_loader=train, eval_loader=evals, meta=meta,
               owns_loaders=owns, lock=lock)


def _model_changed(cfg, ckpt, e: Exception) -> str:
    """The one line for a checkpoint whose arrays this config's model cannot hold."""
    saved = identity.read(ckpt.read_meta().get("config", {}))["model"]
    now = dataclasses.asdict(cfg.model)
    diff = "; ".join(f"model.{k}: checkpoint has {saved[k]!r}, config has {now[k]!r}"
                     for k in sorted(set(saved) & set(now)) if saved[k] != now[k])
    return f"model: {e}; {diff or 'the model'} (--resume=force keeps its shape){RESTART_HINT}"


def lr_cap(cfg: birdjepa.config.Config, saved_meta: dict, step: int, is_main: bool) -> float:
    """The schedule cap of a run resumed at `step` from a checkpoint with `saved_meta`: the
    saved one, or with a new n_steps (resume="extend") birdjepa.optim.extension_cap."""
    old_cap = float(saved_meta.get("lr_cap", 1.0))
    old_n = saved_meta.get("config", {}).get("n_steps", cfg.n_steps)
    if old_n == cfg.n_steps:
        return old_cap
    cap = birdjepa.optim.extension_cap(cfg.optim, old_n_steps=old_n, old_cap=old_cap, step=step)
    if is_main:
        print(f"resume=extend: n_steps {old_n} -> {cfg.n_steps} from step {step}; the learning "
              f"rate stays at most {cfg.optim.lr * cap:.4g} (its value at step {step}), then "
              f"follows the {cfg.n_steps}-step schedule down", flush=True)
    return cap


def _open_checkpoints(cfg, run_dir: pathlib.Path):
    """(Checkpointer, the step to resume from or None, `cfg` with its resampler resolved:
    identity.with_resampler, from the checkpoint's config when resuming), applying
    cfg.resume."""
    ckpt_dir = birdjepa.runtime.rundir.checkpoints_dir(run_dir)
    ckpt = birdjepa.runtime.checkpoint.Checkpointer(ckpt_dir, every=cfg.ckpt_every, keep=cfg.ckpt_keep)
    fresh = identity.with_resampler(cfg, None)
    if cfg.resume != "never":
        latest = _latest_or_refuse(ckpt, ckpt_dir)
        if latest is None:
            return ckpt, None, fresh
    elif not ckpt.all_steps() and not _set_aside_steps(ckpt_dir):
        return ckpt, None, fresh
    if cfg.resume == "never":
        ckpt.close()
        if jax.process_index() == 0:
            aside = birdjepa.runtime.rundir.old_checkpoints_dir(run_dir)
            shutil.move(ckpt_dir, aside)
            metrics = birdjepa.runtime.rundir.metrics_file(run_dir)
            if metrics.exists():  # the old run's rows go with its checkpoints
                shutil.move(metrics, birdjepa.runtime.rundir.metrics_file(aside))
            print(f"resume=never: moved existing checkpoints to {aside}", flush=True)
        birdjepa.runtime.distributed.barrier("resume-never")
        return birdjepa.runtime.checkpoint.Checkpointer(ckpt_dir, every=cfg.ckpt_every,
                                                keep=cfg.ckpt_keep), None, fresh
    try:
        saved = identity.read(ckpt.read_meta().get("config", {}))
        cfg = identity.with_resampler(cfg, saved)
        _check_resume(cfg, saved, ckpt_dir, latest)
    except BaseException:
        ckpt.close()
        raise
    return ckpt, latest, cfg


RESTART_HINT = "; use --resume=never to train from step 0 (they stay aside), or another --run_dir"


def _set_aside_steps(ckpt_dir: pathlib.Path) -> list[pathlib.Path]:
    """The steps birdjepa.runtime.checkpoint set aside as corrupt (<step>.corrupt-<time>)."""
    return sorted(ckpt_dir.glob("*.corrupt-*")) if ckpt_dir.is_dir() else []


def _latest_or_refuse(ckpt, ckpt_dir: pathlib.Path) -> int | None:
    """The newest intact step; None for a run that never saved one. A run whose every step is
    corrupt (now, or set aside by an earlier start) is refused in one line: starting over from
    step 0 silently would throw the run away."""
    try:
        latest = ckpt.latest_step()
    except birdjepa.runtime.checkpoint.CorruptCheckpointError as e:
        ckpt.close()
        raise birdjepa.runtime.checkpoint.CorruptCheckpointError(f"{e}{RESTART_HINT}") from None
    aside = _set_aside_steps(ckpt_dir)
    if latest is None and aside:
        ckpt.close()
        raise birdjepa.runtime.checkpoint.CorruptCheckpointError(
            f"checkpoints: expected an intact step to resume from in {ckpt_dir}, got none: "
            f"every step was corrupt and set aside ({', '.join(p.name for p in aside)})"
            f"{RESTART_HINT}")
    return latest


def _check_resume(cfg, saved: dict, ckpt_dir: pathlib.Path, latest: int) -> None:
    """Refuse a resume whose config changed (but with resume="force") or whose n_steps changed
    (but with resume="extend" or "force", and never below the saved step)."""
    if cfg.resume != "force":
        identity.check_same(
            saved, cfg, ignore=identity.NOT_SHAPING,
            what=f"{ckpt_dir} holds step {latest} of a run with a different config; use "
                 "--resume=force to continue anyway, --resume=never to start over, or another "
                 "--run_dir")
    old_n = saved.get("n_steps", cfg.n_steps)
    if old_n != cfg.n_steps and cfg.resume not in ("extend", "force"):
        raise birdjepa.config.ConfigError(
            f"n_steps: expected {old_n} (the run in {ckpt_dir}, at step {latest}, schedules its "
            f"learning rate over {old_n} updates), got {cfg.n_steps}, which changes the "
            f"learning-rate schedule; use --resume=extend to continue with the rate kept "
            f"continuous, --resume=never to start over, or another --run_dir")
    if old_n != cfg.n_steps and cfg.n_steps < latest:
        raise birdjepa.config.ConfigError(
            f"n_steps: expected >= {latest} (the step saved in {ckpt_dir}) to extend the run, "
            f"got {cfg.n_steps}")


def code_version() -> str:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=5, cwd=pathlib.Path(__file__).parent)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def finish(run: Run, state: dict, summary: dict, *, nonfinite_run: int = 0) -> None:
    """After a run that was not preempted: the curves, then COMPLETE, written last, and only for
    a sound model (`unsound`); otherwise UnsoundRunError says why (the checkpoints stay)."""
    if summary["preempted"]:
        return
    why = birdjepa.train.soundness.unsound(run, state, summary, nonfinite_run)
    if why is not None:
        raise birdjepa.train.soundness.UnsoundRunError(f"run {run.cfg.run_id} not marked complete: {why}")
    if run.is_main:
        birdjepa.train.log.plot(birdjepa.runtime.rundir.metrics_file(run.dir),
                                birdjepa.runtime.rundir.curves_file(run.dir),
                                run.cfg.objective.name,
                                multilabel=bool(getattr(run.train_loader, "multilabel", False)))
        birdjepa.runtime.rundir.mark_complete(run.dir, summary)
