"""The training loop: `birdjepa.train.loop.main(cfg)`. Read `main` top to bottom.

Set-up (directory, resume policy, state, loaders) is birdjepa.train.run; the jitted update and
eval step are birdjepa.train.step. Each periodic action below is one line gated by `itstime`.
"""

import functools
import time

import jax

import birdjepa.config
import birdjepa.runtime.compiles
import birdjepa.runtime.distributed
import birdjepa.runtime.rundir
import birdjepa.train.feed
import birdjepa.train.flops
import birdjepa.train.log
import birdjepa.train.run
import birdjepa.train.state
import birdjepa.train.step


def itstime(step: int, every: int, *, last: int, first: bool = False) -> bool:
    """True at multiples of `every` (0 = never), at the final step, and at step 1 if `first`."""
    return (every > 0 and step % every == 0) or step == last or (first and step == 1)


class RateWindow:
    """Steps, seconds and data-wait seconds since the last log line; with the model FLOPs of
    one update (birdjepa.train.flops) also TFLOP/s, and MFU where the devices' peak is known."""

    def __init__(self, flops_per_update: float = 0.0, peak_flops: float | None = None):
        self.flops, self.peak = flops_per_update, peak_flops
        self.t = self.wait = 0.0
        self.n = 0

    def add(self, seconds: float, wait: float) -> None:
        self.t, self.wait, self.n = self.t + seconds, self.wait + wait, self.n + 1

    def pop(self, batch_size: int) -> dict:
        flops_s = self.flops * self.n / self.t
        out = {"steps_per_s": self.n / self.t, "clips_per_s": self.n * batch_size / self.t,
               "data_wait_frac": self.wait / self.t, "tflops": flops_s / 1e12}
        if self.peak:
            out["mfu"] = flops_s / self.peak
        self.t = self.wait = 0.0
        self.n = 0
        return out


def make_rate_window(cfg: birdjepa.config.Config) -> RateWindow:
    """Model FLOPs per update and the peak of all devices (cfg.peak_tflops, else the table)."""
    override = cfg.peak_tflops * 1e12 if cfg.peak_tflops else None
    peak = birdjepa.train.flops.peak_flops(jax.devices()[0], dtype=cfg.model.compute_dtype,
                                           override=override)
    return RateWindow(birdjepa.train.flops.flops_per_update(cfg),
                      peak * jax.device_count() if peak else None)


def main(cfg: birdjepa.config.Config, *, loaders=None, should_stop=None) -> dict:
    """Train and return a summary dict.

    `loaders` = (train, eval) replaces the configured loaders (tests, benchmarks). `should_stop()`
    is polled at step boundaries; when true the run stops there with summary["preempted"].

    The host never makes the device wait: the next batches are read and copied by a prefetch
    thread (birdjepa.train.feed), and the metrics of update t are fetched after update t+1 has
    been dispatched. So the non-finite guard sees update t one update later: after `max_nonfinite`
    bad updates in a row the run raises with update t+1 already computed (and never saved).
    """
    run = birdjepa.train.run.open_run(cfg, loaders=loaders)
    if isinstance(run, dict):  # already complete
        return run
    cfg, state, mesh = run.cfg, run.state, run.mesh
    n_params = sum(x.size for x in jax.tree.leaves(state["params"]["encoder"]))
    print(f"run {cfg.run_id} -> {run.dir} | {cfg.objective.name} | encoder {n_params:,} params "
          f"| {mesh.devices.size} device(s)", flush=True)

    # Data parallel over every process's devices: each process feeds its batch_size //
    # process_count slice of every global batch (its own loader) into global arrays.
    update_fn = birdjepa.train.step.jit_update(cfg, static=run.static, tx=run.tx,
                                               lr_cap=run.meta["lr_cap"])
    eval_fn = birdjepa.train.step.jit_eval(cfg, static=run.static)
    eval_bs = (cfg.data.eval_batch_size or cfg.batch_size) // jax.process_count()
    logger = birdjepa.train.log.Logger(run.dir, cfg, run.meta["config"], enabled=run.is_main)
    guard = birdjepa.train.step.NonFiniteGuard(cfg.max_nonfinite)
    rate = make_rate_window(cfg)
    summary = Summary(birdjepa.train.log.last_finite_loss(
        birdjepa.runtime.rundir.metrics_file(run.dir)))
    progress = birdjepa.train.log.Progress(cfg.n_steps, enabled=run.is_main)
    preempted, pending = False, None
    t_start = time.perf_counter()
    feed = birdjepa.train.feed.Prefetcher(run.train_loader, cfg, mesh)
    start = int(state["step"])
    try:
        for step in range(start, cfg.n_steps):
            done = step + 1
            # -- dispatch update `done`, then read update `done - 1`'s metrics -------------
            t0 = time.perf_counter()
            fed = feed.next()
            t_fed = time.perf_counter()
            if done == start + 1:
                progress.compiling()
                seen = len(birdjepa.runtime.compiles.compiles("update"))
            state, m = update_fn(state, fed.batch)
            if done == start + 1:
                jax.block_until_ready(m)
                new = birdjepa.runtime.compiles.compiles("update")[seen:]
                progress.compiled(done, birdjepa.runtime.compiles.describe(
                    new[-1] if new else None, run.compile_cache))
                retrace = birdjepa.runtime.compiles.Retrace("update", enabled=run.is_main)
            retrace.check(done)
            if pending is not None:
                log_update(*pending, cfg, logger, guard, rate, summary, progress)
            pending = (done, m, time.perf_counter() - t0, t_fed - t0)

            # -- periodic actions on the state after update `done` --------------------------
            # One process reads its flag for free; several agree through a tiny all-gather,
            # which waits for update `done` (the next batch is already on the devices).
            stop = should_stop is not None and birdjepa.runtime.distributed.any_process(should_stop())
            final = done == cfg.n_steps or stop
            save = final or itstime(done, cfg.ckpt_every, last=cfg.n_steps)
            evaluate = itstime(done, cfg.eval_every, last=cfg.n_steps)
            if save or evaluate:  # a checkpoint never runs ahead of its metrics row
                log_update(*pending, cfg, logger, guard, rate, summary, progress)
                pending = None
            if save:  # before the evaluation: a failing evaluation never costs a checkpoint
                run.save(done, state, loader_state=fed.loader_state, final=final)
            if evaluate:
                again = functools.partial(run.save, done, state, loader_state=fed.loader_state,
                                          final=True)
                run_eval(run, eval_fn, state, done, eval_bs, logger, summary,
                         saved=None if save else again)
            if stop and done < cfg.n_steps:
                run.ckpt.wait()
                preempted = True
                n_proc = jax.process_count()  # every process says it: its log is its own
                print(f"step {done}: stop requested; checkpoint saved" + (
                    f" (process {jax.process_index()} of {n_proc})" if n_proc > 1 else ""),
                    flush=True)
                break
        if pending is not None:
            log_update(*pending, cfg, logger, guard, rate, summary, progress)
        if start == cfg.n_steps:  # training was done: a rerun evaluates only
            if run.is_main:
                print(f"training is done (step {start} saved): evaluating only", flush=True)
            run_eval(run, eval_fn, state, start, eval_bs, logger, summary, saved=None)
    finally:
        feed.close()
        run.close()
        logger.close()

    out = summary.as_dict(run.dir, int(state["step"]), guard, preempted,
                          time.perf_counter() - t_start)
    birdjepa.train.run.finish(run, state, out, nonfinite_run=guard.run)
    print("done | " + " | ".join(
        f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in out.items()),
        flush=True)
    return out


class EvaluationError(RuntimeError):
    """The evaluation after a step failed; that step's checkpoint is on disk."""


def run_eval(run, eval_fn, state, done: int, eval_bs: int, logger, summary, *, saved) -> None:
    """Evaluate the state after update `done`, log and print the row. On failure the state is
    saved first (`saved()`, None where it already is), then EvaluationError names the step."""
    try:
        summary.eval_row = birdjepa.train.step.evaluate(eval_fn, state, run.eval_loader,
                                                        eval_bs, run.mesh)
    except Exception as e:
        if saved is not None:
            saved()
        run.ckpt.wait()
        raise EvaluationError(
            f"evaluation after step {done} failed ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:300]}); step {done} is saved in {run.dir}/checkpoints: "
            f"fix the eval data and run the same command again to evaluate it") from e
    logger.log(done, summary.eval_row)
    print(f"step {done} eval | " + " | ".join(
        f"{k} {v:.4g}" for k, v in summary.eval_row.items()), flush=True)


class Summary:
    """The last logged train row, the eval row and the last finite loss, for the summary."""

    def __init__(self, last_finite: tuple[int, float] | None = None):
        self.last_row: dict = {}
        self.eval_row: dict = {}
        self.last_finite = last_finite
        """(step, loss) of the newest finite update (seeded from metrics.jsonl on resume)."""

    def as_dict(self, run_dir, steps: int, guard, preempted: bool, seconds: float):
        step, loss = self.last_finite or (None, float("nan"))
        out = {
            "run_dir": str(run_dir),
            "steps": steps,
            "final_loss": loss,
            "final_loss_step": step,
            "train_probe_acc": self.last_row.get("probe_acc", float("nan")),
            "eval_probe_acc": self.eval_row.get("eval/probe_acc", float("nan")),
            "nonfinite_total": guard.total,
            "preempted": preempted,
            "seconds": seconds,
        }
        if "eval/head_acc" in self.eval_row:
            out["eval_head_acc"] = self.eval_row["eval/head_acc"]
        return out


def log_update(done: int, m_device: dict, seconds: float, wait: float, cfg, logger, guard,
               rate: RateWindow, summary: Summary, progress) -> None:
    """Fetch update `done`'s metrics (it has finished by now), feed the non-finite guard, log
    every `log_every` updates (and the first and last)."""
    m = {k: v.item() for k, v in jax.device_get(m_device).items()}
    rate.add(seconds, wait)
    finite = bool(m.pop("finite"))
    if not finite:
        logger.log(done, {**m, "nonfinite": 1, "nonfinite_total": guard.total + 1})
    guard.observe(done, finite, m)
    if finite:
        summary.last_finite = (done, m["loss"])
    if finite and itstime(done, cfg.log_every, last=cfg.n_steps, first=True):
        r = rate.pop(cfg.batch_size)
        summary.last_row = {**m, **r, "nonfinite_total": guard.total}
        logger.log(done, summary.last_row)
        print(birdjepa.train.log.console_line(done, cfg.n_steps, m, r,
                                              eta_s=progress.eta(done)), flush=True)
