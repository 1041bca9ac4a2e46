"""Issue 23: runs that tell the truth. A failing final evaluation never costs the checkpoint and
a rerun evaluates only; COMPLETE only for a sound model; the console shows compilation and an
ETA; run ids per directory; extending n_steps; Ctrl-C."""

import contextlib
import dataclasses
import io
import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tiny

import birdjepa
import birdjepa.config as config
import birdjepa.train.loop
import birdjepa.train.soundness

ROOT = pathlib.Path(__file__).resolve().parents[1]


class FailingEval:
    """An eval loader whose every pass fails the way a corrupt eval shard does."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        raise birdjepa.TooManyFailuresError("eval shard: 1 of 8 rows failed to decode")

    def close(self):
        self.loader.close()


def rows(run_dir: pathlib.Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def stdout_of(fn, *args, **kwargs):
    """(fn's result, what it printed)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        out = fn(*args, **kwargs)
    return out, buf.getvalue()


@pytest.mark.slow
def test_a_failing_final_evaluation_keeps_the_checkpoint_and_a_rerun_evaluates_only(tmp_path):
    """Item 1: main saved only step 2 (ckpt_every) and the failing evaluation lost steps 3-4."""
    run_dir = tmp_path / "run"
    cfg = tiny.tiny_config(n_steps=4, ckpt_every=2, run_dir=str(run_dir))

    def failing(c, train_state=None):
        train, evals = tiny.tiny_loaders(c, train_state=train_state)
        return train, FailingEval(evals)

    with pytest.raises(birdjepa.train.loop.EvaluationError,
                       match=r"evaluation after step 4 failed \(TooManyFailuresError: .*\); "
                             r"step 4 is saved in "):
        birdjepa.train.loop.main(cfg, loaders=failing)
    assert 4 in [int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()]
    assert not (run_dir / "COMPLETE").exists()
    summary, out = stdout_of(birdjepa.train.loop.main, cfg, loaders=tiny.tiny_loaders)
    assert "training is done (step 4 saved): evaluating only" in out
    assert "compiling the update" not in out  # no update ran again
    assert summary["steps"] == 4 and 0 <= summary["eval_probe_acc"] <= 1
    assert summary["final_loss_step"] == 4 and np.isfinite(summary["final_loss"])
    assert [r["step"] for r in rows(run_dir) if "loss" in r] == [1, 2, 3, 4]  # none redone
    assert [r["step"] for r in rows(run_dir) if "eval/n" in r] == [4]
    assert (run_dir / "COMPLETE").exists()


@pytest.mark.heavy
def test_a_diverged_run_is_not_complete(tmp_path):
    """Item 3: lr 1e30 leaves finite but huge parameters whose embeddings overflow; main wrote
    COMPLETE and reported step 1's loss."""
    base = tiny.tiny_config(n_steps=3, run_dir=str(tmp_path / "r"))
    cfg = dataclasses.replace(base, optim=dataclasses.replace(base.optim, lr=1e30, warmup=0,
                                                              clip=0.0))
    with pytest.raises(birdjepa.train.soundness.UnsoundRunError, match="not marked complete: "):
        birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    assert not (tmp_path / "r/COMPLETE").exists()


def test_a_run_ending_on_skipped_updates_is_not_complete_and_names_the_last_finite_loss(
        tmp_path):
    """Item 3: updates 3-4 non-finite (below max_nonfinite): main exited 0 with COMPLETE."""
    cfg = tiny.tiny_config(n_steps=4, run_dir=str(tmp_path / "r"))

    def loaders(c, train_state=None):
        train, evals = tiny.tiny_loaders(c, train_state=train_state)
        return tiny.NaNFrom(train, 2), evals

    with pytest.raises(birdjepa.train.soundness.UnsoundRunError,
                       match=r"the last 2 update\(s\) up to step 4 were non-finite and skipped "
                             r"\(last finite loss: [0-9.]+ at step 2\)"):
        birdjepa.train.loop.main(cfg, loaders=loaders)
    assert not (tmp_path / "r/COMPLETE").exists()


def test_the_done_line_reports_the_last_finite_loss_and_its_step(tmp_path):
    """Item 3 and 16: final_loss is the newest finite update's (main: the last logged row's,
    without its step); a compile line with its time; an ETA on step lines after the first."""
    cfg = tiny.tiny_config(n_steps=4, log_every=1, run_dir=str(tmp_path / "r"))
    summary, out = stdout_of(birdjepa.train.loop.main, cfg, loaders=tiny.tiny_loaders)
    last = [r for r in rows(tmp_path / "r") if "loss" in r][-1]
    assert summary["final_loss_step"] == 4 == last["step"]
    assert summary["final_loss"] == last["loss"]
    assert "final_loss_step 4" in out.splitlines()[-1]
    lines = out.splitlines()
    compile_line = next(x for x in lines if x.startswith("compiling the update (first step)..."))
    assert compile_line.split("...")[1].strip().startswith("done in ")
    steps = [x for x in lines if re.match(r"step \d+/4 ", x)]
    assert "ETA" not in steps[0] and all(" | ETA " in x for x in steps[1:]), steps


@pytest.mark.slow
def test_a_step_whose_manifest_was_deleted_is_set_aside_and_the_run_falls_back(tmp_path):
    """Item 2 end to end: 64 bytes of step 4's arrays flipped and its manifest deleted; main
    resumed from the damaged step 4 without a word."""
    import test_checkpoint_integrity as integrity

    import birdjepa.runtime.rundir as rundir

    run_dir = tmp_path / "run"
    cfg = tiny.tiny_config(n_steps=4, ckpt_every=1, ckpt_keep=2, run_dir=str(run_dir))
    birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    f = integrity.largest_array_file(run_dir / "checkpoints" / "4")
    data = bytearray(f.read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = bytes(b ^ 0xFF for b in data[len(data) // 2:
                                                                          len(data) // 2 + 64])
    f.write_bytes(bytes(data))
    (run_dir / "checkpoints" / "4" / rundir.MANIFEST).unlink()
    summary, out = stdout_of(birdjepa.train.loop.main,
                             dataclasses.replace(cfg, n_steps=5, resume="extend"),
                             loaders=tiny.tiny_loaders)
    assert "resumed from step 3" in out
    assert summary["steps"] == 5 and (run_dir / "COMPLETE").exists()
    aside = [p.name for p in (run_dir / "checkpoints").iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].startswith("4.corrupt-"), aside


def cosine(step: int, n: int, *, warmup: int = 2, floor: float = 0.01) -> float:
    """Independent reference of the warmup-cosine factor at 0-based update `step`."""
    if step < warmup:
        return (step + 1) / warmup
    p = min(max((step - warmup) / max(n - warmup, 1), 0.0), 1.0)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))


@pytest.mark.slow
def test_changing_n_steps_is_refused_and_extend_keeps_the_learning_rate_continuous(tmp_path):
    """Item 6: main resumed a finished 6-step run at --n_steps=10 silently, the lr jumping from
    the floor (1e-5) back up to 5e-4."""
    run_dir = tmp_path / "r"
    cfg = tiny.tiny_config(n_steps=6, log_every=1, run_dir=str(run_dir))
    birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    longer = dataclasses.replace(cfg, n_steps=10)
    with pytest.raises(config.ConfigError, match=r"n_steps: expected 6 \(the run in .* at step 6, "
                       r"schedules its learning rate over 6 updates\), got 10, which changes the "
                       r"learning-rate schedule; use --resume=extend"):
        birdjepa.train.loop.main(longer, loaders=tiny.tiny_loaders)
    assert (run_dir / "COMPLETE").exists()  # the refused command changed nothing
    summary, out = stdout_of(birdjepa.train.loop.main,
                             dataclasses.replace(longer, resume="extend"),
                             loaders=tiny.tiny_loaders)
    assert "resume=extend: n_steps 6 -> 10 from step 6" in out
    assert summary["steps"] == 10 and (run_dir / "COMPLETE").exists()
    lr = {r["step"]: r["lr"] for r in rows(run_dir) if "lr" in r}
    assert sorted(lr) == list(range(1, 11))
    peak = cfg.optim.lr
    cap = cosine(6, 6)  # the factor the run had when it was extended (its floor)
    for t in range(1, 11):
        want = cosine(t - 1, 6) if t <= 6 else min(cap, cosine(t - 1, 10))
        assert lr[t] == pytest.approx(peak * want, rel=1e-5), (t, lr)
    assert max(lr[t] for t in range(7, 11)) <= lr[6] * (1 + 1e-6)  # no jump up


@pytest.mark.slow
def test_run_ids_are_per_directory_and_kept(tmp_path):
    """Item 5: main gave --run_dir=a and --run_dir=b (one config) the same id."""
    import birdjepa.runtime.checkpoint
    import birdjepa.runtime.rundir as rundir

    cfg = tiny.tiny_config(n_steps=1, run_id="")
    ids = {}
    for name in ("a", "b"):
        c = dataclasses.replace(cfg, run_dir=str(tmp_path / name))
        _, out = stdout_of(birdjepa.train.loop.main, c, loaders=tiny.tiny_loaders)
        ids[name] = rundir.kept_run_id(tmp_path / name)
        assert f"run {ids[name]} -> {tmp_path / name}" in out
        with birdjepa.runtime.checkpoint.Checkpointer(tmp_path / name / "checkpoints", every=1, keep=1,
                               read_only=True) as c:
            assert c.read_meta()["wandb_id"] == ids[name]  # wandb's id follows the directory
    assert ids["a"] != ids["b"] and ids["a"] != rundir.default_run_id(cfg)
    again = rundir.assign(dataclasses.replace(cfg, run_dir=str(tmp_path / "a"), seed=3))
    assert again.run_id == ids["a"]  # the same directory keeps its id, whatever the config
    with pytest.raises(config.ConfigError, match=rf"run_id: expected '{ids['a']}' \(kept in "):
        rundir.assign(dataclasses.replace(cfg, run_dir=str(tmp_path / "a"), run_id="other"))


CTRL_C = textwrap.dedent("""
    import gc, signal, sys, time
    import numpy as np
    import birdjepa.runtime.preemption
    stop = birdjepa.runtime.preemption.Preemption()
    stop.install(signal.SIGINT, second_aborts=True)
    where = sys.argv[1]
    if where == "gc":  # the handler runs inside a gc callback, where an exception is swallowed
        def spin(phase, info):
            if phase == "start":
                t = time.time()
                while time.time() - t < 20:
                    pass
        gc.callbacks.append(spin)
        print("ready", flush=True)
        gc.collect()
    else:  # the main thread stays in C code (a matmul releases the GIL, checks no signals)
        a = np.ones((1500, 1500), np.float32)
        print("ready", flush=True)
        t = time.time()
        while time.time() - t < 20:
            a @ a
    print("not aborted", flush=True)
""")


def _delivered(pid: int, sig: int, timeout: float = 60.0) -> float:
    """Wait until no thread of `pid` has `sig` pending (the kernel has delivered it: its C
    handler ran); returns when. Two standard signals sent while the first is still pending
    are one signal: on a loaded machine a process not scheduled for 0.5 s received two
    SIGINTs 0.5 s apart as one (issue 47 item 15a), so a second is sent only once the first
    has been delivered."""
    bit = 1 << (sig - 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = 0
        for status in [f"/proc/{pid}/status", *(f"/proc/{pid}/task/{t}/status"
                                                for t in os.listdir(f"/proc/{pid}/task"))]:
            try:
                for line in open(status):
                    if line.startswith(("SigPnd:", "ShdPnd:")):
                        pending |= int(line.split()[1], 16)
            except FileNotFoundError:
                continue
        if not pending & bit:
            return time.perf_counter()
        time.sleep(0.005)
    raise AssertionError(f"signal {sig} still pending in {pid} after {timeout} s")


@pytest.mark.parametrize("where", ["gc", "c_call"])
def test_a_second_ctrl_c_always_aborts_within_a_second(where):
    """Item 15: on main a KeyboardInterrupt raised inside a gc callback was swallowed
    (`Exception ignored in _xla_gc_callback`) and the run went on; each Ctrl-C printed a WARNING
    log line and a message line. Issue 47 item 15a: on a loaded machine the process ran on
    after two SIGINTs 0.5 s apart: the kernel had merged them (a standard signal still pending
    absorbs the next), so the process saw one. The second is now sent once the first is
    delivered, and the second's abort is timed from its delivery: load cannot fake or hide it."""
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C, where], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        _delivered(proc.pid, signal.SIGINT)
        first = proc.stdout.readline()  # its notice: the user has seen it, and presses again
        proc.send_signal(signal.SIGINT)
        t0 = _delivered(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        out = first + out
        seconds = time.perf_counter() - t0
    finally:
        proc.kill()
    assert proc.returncode == 130, (out, err)
    assert seconds < 1.0, seconds
    assert out.splitlines() == ["signal SIGINT: stopping at the next step boundary to save a "
                                "checkpoint (again to abort at once)"], out
    assert err.strip().splitlines() == ["interrupted twice: aborted without saving"], err
