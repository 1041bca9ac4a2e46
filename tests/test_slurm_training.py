"""Training on the real single-node Slurm cluster: a sweep through `python -m birdjepa.launch`,
preemption with `scancel --signal=USR2` (checkpoint, requeue, resume bitwise), and a 2-task job
(2 JAX processes on the one node) that survives the same preemption."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest
import runs
import submitit  # noqa: F401 - imported before output capture: its logger binds sys.stderr
from slurm_cluster import MARKER_ENV, SlurmCluster
from slurm_cluster import slurm_cluster as _slurm_cluster_fixture  # noqa: F401 - registers it
from test_distributed import SlowJob

import birdjepa.demo_data
import birdjepa.launch
import birdjepa.runtime.checkpoint
import birdjepa.train.state

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
N_STEPS = 10


class SlowJob05(SlowJob):
    step_s = 0.5


@pytest.fixture
def env(slurm_cluster: SlurmCluster, tiny_corpus, monkeypatch) -> dict:
    """os.environ for submitit and the launcher: our SLURM_CONF, tests/ importable in jobs."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    monkeypatch.setenv(MARKER_ENV, slurm_cluster.env[MARKER_ENV])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(TESTS / "support"), str(ROOT / "src")]))
    monkeypatch.setenv("TINY_DATA", str(tiny_corpus))
    monkeypatch.setenv("TINY_STEPS", str(N_STEPS))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return dict(os.environ)


def losses(run_dir: pathlib.Path) -> list[float]:
    return runs.train_losses(run_dir, N_STEPS)


def final_params(cfg) -> list[np.ndarray]:
    return runs.final_params(cfg, N_STEPS)


def wait_for(pred, timeout: float, what: str, cluster: SlurmCluster, logs: pathlib.Path):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in logs.rglob("*.err"))
            pytest.fail(f"{what}: not after {timeout} s\n{tails}\n{cluster.log_tails()}")
        time.sleep(0.5)


def sweep_cfgs() -> list:
    return birdjepa.launch.resolve(ROOT / "sweeps" / "tiny.py")


def test_sweep_runs_to_completion_and_resubmitting_does_nothing(env, slurm_cluster, tmp_path):
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "birdjepa.launch", "--sweep", str(ROOT / "sweeps" / "tiny.py"),
           "--executor", "slurm", "--slurm.partition", "debug", "--slurm.cpus-per-task", "1",
           "--slurm.mem-gb", "1", "--n-hours", "0.25"]
    p = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    run_dirs = [tmp_path / "runs" / c.run_id for c in sweep_cfgs()]
    assert len(run_dirs) == 2 and all(f"run_dir={d}" in p.stdout for d in run_dirs), p.stdout
    wait_for(lambda: all((d / "COMPLETE").exists() for d in run_dirs), 300, "sweep complete",
             slurm_cluster, tmp_path / "logs")
    for d in run_dirs:
        assert json.loads((d / "COMPLETE").read_text())["steps"] == N_STEPS
        assert len(losses(d)) == N_STEPS
    assert losses(run_dirs[0]) != losses(run_dirs[1])  # two learning rates
    assert list((tmp_path / "logs" / "tiny").glob("*_0_log.out"))  # logs/<sweep>/<jobid>_0_log.out
    again = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0 and "nothing submitted" in again.stdout, again.stdout
    print(f"[slurm-training] sweep of 2 on Slurm: {time.monotonic() - t0:.1f} s")


def submit(tmp_path, cfg, tasks: int):
    lc = birdjepa.launch.LaunchConfig(
        sweep="tiny", executor="slurm", n_hours=0.25, log_dir=str(tmp_path / "logs"),
        slurm=birdjepa.launch.SlurmConfig(partition="debug", cpus_per_task=1, mem_gb=1,
                                          tasks_per_node=tasks),
    )
    ex = birdjepa.launch.make_executor(lc, job_name="tiny", n_workers=1)
    return ex.submit(SlowJob05(cfg))


def preempt_and_finish(job, cfg, cluster: SlurmCluster, tmp_path, tasks: int) -> float:
    run_dir = pathlib.Path(cfg.run_dir)
    metrics = run_dir / "metrics.jsonl"
    wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 2, 240,
             "2 steps", cluster, tmp_path / "logs")
    assert not job.done()
    t0 = time.monotonic()
    cluster.run(["scancel", "--signal=USR2", job.job_id])
    wait_for(lambda: all(job.task(i).done() for i in range(tasks)), 400, "requeued job done",
             cluster, tmp_path / "logs")
    elapsed = time.monotonic() - t0
    summaries = job.results()
    assert len(summaries) == tasks  # every rank finished the requeued attempt
    assert all(s["steps"] == N_STEPS and not s["preempted"] for s in summaries), summaries
    assert cluster.wait_job(job.job_id, timeout=60) == "COMPLETED"
    p = cluster.run(["sacct", "-D", "-X", "-n", "-P", "-o", "State", "-j", job.job_id])
    assert p.stdout.split() == ["REQUEUED", "COMPLETED"], p.stdout
    log = pathlib.Path(job.paths.stdout).read_text()
    assert f"| {tasks} device(s)" in log, log  # really `tasks` JAX processes of 1 device
    resumed = [ln for ln in log.splitlines() if ln.startswith("resumed from step")]
    assert len(resumed) == 1 and 2 <= int(resumed[0].split()[3]) < N_STEPS, log
    return elapsed


def test_preempted_job_requeues_and_ends_bitwise_equal(env, slurm_cluster, tmp_path):
    cfgs = sweep_cfgs()
    ref = dataclasses.replace(cfgs[0], run_dir=str(tmp_path / "ref"))
    pre = dataclasses.replace(cfgs[0], run_dir=str(tmp_path / "pre"))
    t0 = time.monotonic()
    ref_job = submit(tmp_path, ref, tasks=1)
    job = submit(tmp_path, pre, tasks=1)  # both fit: 1 CPU each
    took = preempt_and_finish(job, pre, slurm_cluster, tmp_path, tasks=1)
    wait_for(ref_job.done, 300, "reference done", slurm_cluster, tmp_path / "logs")
    assert losses(tmp_path / "pre") == losses(tmp_path / "ref")
    for a, b in zip(final_params(pre), final_params(ref), strict=True):
        np.testing.assert_array_equal(a, b)
    print(f"[slurm-training] USR2 -> finished {took:.1f} s; total {time.monotonic() - t0:.1f} s")


def test_two_task_job_trains_and_survives_preemption(env, slurm_cluster, tmp_path):
    cfg = dataclasses.replace(sweep_cfgs()[0], run_dir=str(tmp_path / "two"))
    t0 = time.monotonic()
    job = submit(tmp_path, cfg, tasks=2)
    took = preempt_and_finish(job, cfg, slurm_cluster, tmp_path, tasks=2)
    assert (tmp_path / "two" / "COMPLETE").exists()
    assert len(losses(tmp_path / "two")) == N_STEPS
    print(f"[slurm-training] 2-task USR2 -> finished {took:.1f} s; "
          f"total {time.monotonic() - t0:.1f} s")
