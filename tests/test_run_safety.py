"""Runs refuse what would lose or corrupt work: a second process on one run directory, bad
config values (one line, exit 2), a run id that changes across resumes, a Ctrl-C that loses
steps."""

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import tiny

import birdjepa.config as config
import birdjepa.data.loader_config
import birdjepa.runtime.preemption
import birdjepa.runtime.rundir

ROOT = pathlib.Path(__file__).resolve().parents[1]

HOLD = textwrap.dedent("""
    import pathlib, sys, time
    import birdjepa.runtime.rundir
    lock = birdjepa.runtime.rundir.Lock(pathlib.Path(sys.argv[1])).acquire()
    print("locked", flush=True)
    time.sleep(600)
""")


def test_run_lock_refuses_a_second_process_and_is_freed_when_the_holder_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(birdjepa.runtime.rundir.RunDirBusy,
                           match=rf"expected no other run in it, but one holds .*lock "
                                 rf"\(pid {holder.pid} on host "):
            birdjepa.runtime.rundir.Lock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)  # as a preempted job dies: no clean-up runs
        holder.wait(timeout=30)
    lock = birdjepa.runtime.rundir.Lock(tmp_path).acquire()  # the kernel released it
    assert f"pid {os.getpid()}" in (tmp_path / "lock").read_text()
    lock.release()


def test_a_second_run_on_a_busy_run_dir_is_refused_in_one_line(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with birdjepa.runtime.rundir.Lock(run_dir):
        r = subprocess.run([sys.executable, "-m", "birdjepa.pretrain", "--cfg", "configs/demo.toml",
                            f"--run_dir={run_dir}", "--data.train_shards", str(tmp_path),
                            "--data.eval_shards", str(tmp_path)],
                           capture_output=True, text=True, timeout=300, cwd=ROOT,
                           env={**os.environ, "WANDB_MODE": "disabled"})
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {os.getpid()}" in lines[0], r.stderr


BAD = [
    ({"batch_size": 0}, "batch_size: expected an int >= 1, got 0"),
    ({"batch_size": -8}, "batch_size: expected an int >= 1, got -8"),
    ({"n_steps": 0}, "n_steps: expected an int >= 1, got 0"),
    ({"n_steps": -3}, "n_steps: expected an int >= 1, got -3"),
    ({"log_every": 0}, "log_every: expected an int >= 1, got 0"),
    ({"ckpt_every": 0}, "ckpt_every: expected an int >= 1, got 0"),
    ({"ckpt_keep": 0}, "ckpt_keep: expected an int >= 1, got 0"),
    ({"max_nonfinite": 0}, "max_nonfinite: expected an int >= 1, got 0"),
    ({"eval_every": -1}, "eval_every: expected an int >= 0 .*, got -1"),
    ({"data.n_views": 0}, "data.n_views: expected >= 1, got 0"),
    ({"data.view_window_s": 4.5}, r"data.view_window_s: expected 0 \(one decode per view\) or "
                                  r"seconds in \[clip_s=5, 3600\], got 4.5"),
    ({"optim.grad_accum": 0}, "optim.grad_accum: expected an int >= 1, got 0"),
    ({"optim.warmup": -1}, "optim.warmup: expected an int >= 0, got -1"),
    ({"optim.lr": -1e-3}, "optim.lr: expected a finite number >= 0, got -0.001"),
    ({"optim.lr": float("nan")}, "optim.lr: expected a finite number >= 0, got nan"),
    ({"optim.lr": float("inf")}, "optim.lr: expected a finite number >= 0, got inf"),
    ({"optim.probe_lr": float("nan")}, "optim.probe_lr: expected a finite number >= 0, got nan"),
    ({"data.n_frames": 500}, r"data.n_frames: expected a multiple of model.patch\[0\]=16, got 500"),
]


def _override(cfg, key: str, value):
    if "." not in key:
        return dataclasses.replace(cfg, **{key: value})
    section, leaf = key.split(".")
    return dataclasses.replace(
        cfg, **{section: dataclasses.replace(getattr(cfg, section), **{leaf: value})})


@pytest.mark.parametrize("override, message", BAD, ids=[next(iter(o)) for o, _ in BAD])
def test_bad_values_are_config_errors_naming_key_expected_and_actual(override, message):
    cfg = tiny.tiny_config(model=dataclasses.replace(tiny.tiny_config().model, patch=(16, 16)),
                           data=dataclasses.replace(tiny.tiny_config().data, n_frames=32))
    (key, value), = override.items()
    with pytest.raises(config.ConfigError, match=message):
        config.finalize(_override(cfg, key, value))


@pytest.mark.parametrize("args, message", [
    (["--cfg", "configs/nope.toml"], "--cfg: expected an existing TOML file, got 'configs/nope"),
    (["--cfg", "configs/demo.toml", "--batch_size=0"], "batch_size: expected an int >= 1, got 0"),
    (["--cfg", "configs/demo.toml", "--optim.grad_accum=0"],
     "optim.grad_accum: expected an int >= 1, got 0"),
    (["--cfg", "configs/demo.toml", "--data.train_shards=/nonexistent/x"],
     "data.train_shards: expected an existing path, got '/nonexistent/x'"),
])
def test_cli_config_errors_are_one_line_with_exit_status_2(tmp_path, args, message):
    r = subprocess.run([sys.executable, "-m", "birdjepa.pretrain", *args,
                        f"--run_dir={tmp_path / 'r'}"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env={**os.environ, "WANDB_MODE": "disabled"})
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_run_id_is_stable_and_kept_in_the_run_dir(tmp_path):
    cfg = tiny.tiny_config(run_id="")
    a = birdjepa.runtime.rundir.assign(cfg)
    assert a.run_id == birdjepa.runtime.rundir.assign(cfg).run_id  # same command, same run
    assert a.run_dir == f"runs/{a.run_id}"
    assert birdjepa.runtime.rundir.assign(dataclasses.replace(cfg, seed=1)).run_id != a.run_id
    # n_steps does not shape the run: extending it finds the same run directory
    assert birdjepa.runtime.rundir.assign(dataclasses.replace(cfg, n_steps=99)).run_id == a.run_id
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    birdjepa.runtime.rundir.keep_run_id(run_dir, "my-run-7")
    resumed = birdjepa.runtime.rundir.assign(dataclasses.replace(cfg, run_dir=str(run_dir)))
    assert resumed.run_id == "my-run-7"  # the wandb id of every attempt


def test_second_ctrl_c_aborts_at_once():
    aborted = []
    stop = birdjepa.runtime.preemption.Preemption(abort=lambda: aborted.append(True))
    previous = signal.getsignal(signal.SIGINT)
    try:
        stop.install(signal.SIGINT, second_aborts=True)
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.is_set() and stop.signum == signal.SIGINT  # first: stop at the boundary
        assert not aborted
        os.kill(os.getpid(), signal.SIGINT)
        assert aborted
        time.sleep(0.3)  # the watcher thread has read the same second signal by now
        assert aborted == [True]  # once: CI saw the abort line twice when both paths aborted
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.set_wakeup_fd(-1)


def test_auto_loader_workers_follow_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))  # --cpus-per-task 16
    assert birdjepa.data.loader_config.resolve_workers("auto") == 16  # all of them: measured best
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert birdjepa.data.loader_config.resolve_workers("auto") == 2
    assert birdjepa.data.loader_config.resolve_workers(5) == 5
    assert config.Config().data.n_workers == "auto"


@pytest.mark.heavy
def test_a_run_whose_latest_checkpoint_is_bit_flipped_resumes_from_the_previous_one(tmp_path):
    """Issue 15 item 2 end to end: the corrupt step is named in one line, set aside (not
    deleted), the run continues from the newest intact step and finishes; rotation kept it."""
    import test_checkpoint_integrity as integrity

    import birdjepa.train.loop

    run_dir = tmp_path / "run"
    cfg = tiny.tiny_config(n_steps=4, ckpt_every=1, ckpt_keep=2, run_dir=str(run_dir))
    birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    integrity.bitflip(run_dir / "checkpoints" / "4")
    summary = birdjepa.train.loop.main(dataclasses.replace(cfg, n_steps=6, resume="extend"),
                                       loaders=tiny.tiny_loaders)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4, 5, 6]  # 4 trained again
    assert summary["steps"] == 6 and (run_dir / "COMPLETE").exists()
    aside = [p.name for p in (run_dir / "checkpoints").iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].startswith("4.corrupt-"), aside
