"""Multi-process data parallelism on CPU (gloo over 127.0.0.1), through the real loader.

Processes are started by submitit's LocalExecutor with tasks_per_node=2 (which gives
TorchDistributedEnvironment), except for the dead-peer test, which starts them itself with the
same environment variables so that it can read their exit codes.

Equality findings: with the same global batch, per-step losses and final parameters of
2 processes x 1 device and 2 x 2 equal the 1 process x 1 device run to float32 tolerance, not
bitwise (the gradient is reduced per device, then across devices: another summation order; even
2 x 1 against 1 process x 2 devices differed in the last bit from step 3). A preempted 2-process
run that resumes equals the uninterrupted 2-process run *bitwise*.
"""

import dataclasses
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import runs
import submitit
import tiny

import birdjepa.config
import birdjepa.demo_data
import birdjepa.launch.job
import birdjepa.runtime.checkpoint
import birdjepa.runtime.distributed
import birdjepa.train.loop
import birdjepa.train.state

TESTS = pathlib.Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
PYTHONPATH = os.pathsep.join([str(TESTS), str(TESTS / "support"), str(SRC)])
N_STEPS = 8


def make_cfg(corpus: pathlib.Path, run_dir: pathlib.Path, **overrides):
    kw = dict(n_steps=N_STEPS, batch_size=8, run_id=run_dir.name, run_dir=str(run_dir),
              ckpt_every=1000, eval_every=0, log_every=1, n_classes=12)
    cfg = tiny.tiny_config(**{**kw, **overrides})
    data = dataclasses.replace(cfg.data, train_shards=str(corpus / "train"),
                               eval_shards=str(corpus / "eval"), n_workers=1, eval_batch_size=4)
    dist = birdjepa.runtime.distributed.DistributedConfig(init_timeout_s=120, heartbeat_timeout_s=15,
                                                  shutdown_timeout_s=15)
    return dataclasses.replace(cfg, data=data, distributed=dist)


class SlowJob(birdjepa.launch.job.TrainingJob):
    """A TrainingJob whose step boundary takes `step_s` longer and that records its pid per
    rank, so that tests can signal or kill a process mid-run."""

    step_s = 0.0

    def stop_poll(self, preemption):
        pid_file = pathlib.Path(self.cfg.run_dir) / f"pid.{submitit.JobEnvironment().global_rank}"

        def poll():
            if not pid_file.exists():  # the run directory exists by the first step boundary
                pid_file.write_text(str(os.getpid()))
            time.sleep(self.step_s)
            return preemption.is_set()

        return poll


class SlowJob03(SlowJob):
    step_s = 0.3


def losses(run_dir: pathlib.Path) -> list[float]:
    return runs.train_losses(run_dir, N_STEPS)


def final_params(cfg) -> list[np.ndarray]:
    return runs.final_params(tiny.finalize(cfg), N_STEPS)


def run_local(tmp_path, monkeypatch, cfg, *, tasks: int, devices: int, job_cls=SlowJob,
              timeout: float = 400, during=None):
    """Run `job_cls(cfg)` as a LocalExecutor job of `tasks` processes x `devices` CPU devices;
    `during(job)` is called once while it runs. Returns the rank-0 result."""
    monkeypatch.setenv("PYTHONPATH", PYTHONPATH)
    monkeypatch.setenv("XLA_FLAGS", f"--xla_force_host_platform_device_count={devices}")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    ex = submitit.LocalExecutor(folder=tmp_path / "submitit" / cfg.run_id)
    ex.update_parameters(timeout_min=30, tasks_per_node=tasks)
    job = ex.submit(job_cls(cfg))
    if during is not None:
        during(job)
    deadline = time.monotonic() + timeout
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel()
            pytest.fail(f"job not done after {timeout} s\n{job.stdout()}\n{job.stderr()}")
        time.sleep(0.5)
    try:
        result = job.results()[0]
    except Exception as e:
        raise AssertionError(f"{e}\n--- stdout\n{job.stdout()}\n--- stderr\n{job.stderr()}") from e
    # Really tasks x devices (a job environment that is not recognised runs single-process).
    assert f"| {tasks * devices} device(s)" in job.stdout(), job.stdout()
    return result


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_two_processes_equal_one_process(tiny_corpus, tmp_path, monkeypatch):
    runs = {}
    for tasks, devices in ((1, 1), (2, 1), (2, 2)):
        cfg = make_cfg(tiny_corpus, tmp_path / f"p{tasks}d{devices}")
        t0 = time.monotonic()
        summary = run_local(tmp_path, monkeypatch, cfg, tasks=tasks, devices=devices)
        print(f"{tasks} process(es) x {devices} device(s): {time.monotonic() - t0:.1f} s")
        assert summary["steps"] == N_STEPS and not summary["preempted"]
        assert (tmp_path / cfg.run_id / "COMPLETE").exists()
        runs[tasks, devices] = (losses(tmp_path / cfg.run_id), final_params(cfg), summary)
    # Float32 tolerance, not bitwise: the global batch's gradient is reduced per device then
    # across devices, another summation order than one device's (even 2 processes x 1 device
    # against 1 process x 2 devices differed in the last bit from step 3 on).
    ref_loss, ref_params, ref_summary = runs[1, 1]
    for multi in ((2, 1), (2, 2)):
        loss, params, summary = runs[multi]
        dl = np.max(np.abs(np.subtract(loss, ref_loss)))
        dp = max(float(np.max(np.abs(a - b))) for a, b in zip(params, ref_params, strict=True))
        print(f"{multi} vs (1, 1): max |loss diff| {dl:.2e}, max |param diff| {dp:.2e}")
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
        for a, b in zip(params, ref_params, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        assert summary["eval_probe_acc"] == ref_summary["eval_probe_acc"]
    # The model did train: a loss trajectory, not a constant.
    assert runs[1, 1][0][0] != runs[1, 1][0][-1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_two_processes_preempted_resume_equal(tiny_corpus, tmp_path, monkeypatch):
    ref_cfg = make_cfg(tiny_corpus, tmp_path / "ref")
    run_local(tmp_path, monkeypatch, ref_cfg, tasks=2, devices=1)
    cfg = make_cfg(tiny_corpus, tmp_path / "pre")
    run_dir = tmp_path / "pre"
    signalled = {}

    def preempt_rank1(job):
        # USR2 to rank 1 only: rank 0 learns of it through the all-gather at the step boundary.
        deadline = time.monotonic() + 300
        while True:
            assert time.monotonic() < deadline, f"no progress\n{job.stderr()}"
            assert not job.done(), f"ended before preemption\n{job.stderr()}"
            metrics = run_dir / "metrics.jsonl"
            n = len(metrics.read_text().splitlines()) if metrics.exists() else 0
            if n >= 3 and (run_dir / "pid.1").exists():
                break
            time.sleep(0.1)
        os.kill(int((run_dir / "pid.1").read_text()), signal.SIGUSR2)
        signalled["at"] = n

    summary = run_local(tmp_path, monkeypatch, cfg, tasks=2, devices=1, job_cls=SlowJob03,
                        during=preempt_rank1)
    assert summary["steps"] == N_STEPS and not summary["preempted"]
    steps = birdjepa.runtime.checkpoint.Checkpointer(run_dir / "checkpoints", every=1000,
                                             keep=2).all_steps()
    assert N_STEPS in steps
    out = (tmp_path / "submitit" / "pre").glob("*_0_log.out")
    log = "".join(p.read_text() for p in out)
    resumed = [int(w.split()[3]) for w in log.splitlines() if w.startswith("resumed from step")]
    assert len(resumed) == 1 and signalled["at"] <= resumed[0] < N_STEPS, log
    assert losses(run_dir) == losses(tmp_path / "ref")
    for a, b in zip(final_params(cfg), final_params(ref_cfg), strict=True):
        np.testing.assert_array_equal(a, b)


DRIVER = """
import pickle, sys, time
import birdjepa.train.loop
cfg = pickle.load(open(sys.argv[1], "rb"))
def slow():
    time.sleep(0.3)
    return False
birdjepa.train.loop.main(cfg, should_stop=slow)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dead_peer_makes_survivor_exit_nonzero(tiny_corpus, tmp_path):
    cfg = make_cfg(tiny_corpus, tmp_path / "dead", n_steps=10_000)
    (tmp_path / "cfg.pkl").write_bytes(pickle.dumps(cfg))
    procs = []
    for rank in range(2):
        env = {**os.environ, "PYTHONPATH": PYTHONPATH,
               "XLA_FLAGS": "--xla_force_host_platform_device_count=1", "WANDB_MODE": "disabled",
               "SUBMITIT_EXECUTOR": "local",
            "SUBMITIT_LOCAL_JOB_ID": str(os.getpid()), "SUBMITIT_LOCAL_NTASKS": "2",
               "SUBMITIT_LOCAL_JOB_NUM_NODES": "1", "SUBMITIT_LOCAL_NODEID": "0",
               "SUBMITIT_LOCAL_GLOBALID": str(rank), "SUBMITIT_LOCAL_LOCALID": str(rank)}
        log = open(tmp_path / f"rank{rank}.log", "w")  # noqa: SIM115 - closed with the test
        procs.append(subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "cfg.pkl")],
                                      env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        metrics = tmp_path / "dead" / "metrics.jsonl"
        deadline = time.monotonic() + 200
        while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
            assert time.monotonic() < deadline, (tmp_path / "rank0.log").read_text()
            assert all(p.poll() is None for p in procs), (tmp_path / "rank0.log").read_text()
            time.sleep(0.1)
        procs[1].kill()
        t_kill = time.monotonic()
        hb = cfg.distributed.heartbeat_timeout_s
        rc = procs[0].wait(timeout=hb + cfg.distributed.shutdown_timeout_s + 120)
        elapsed = time.monotonic() - t_kill
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    log = (tmp_path / "rank0.log").read_text()
    print(f"survivor exited {rc} after {elapsed:.1f} s (heartbeat timeout {hb} s)")
    assert "| 2 device(s)" in log, log  # a 2-process run
    # It died of the peer: gloo reports the closed connection (a Python error at the next
    # collective: the update's all-reduce or the stop vote's all-gather, "closed" or "reset"),
    # then jax.distributed's shutdown fails in C++ and aborts.
    assert "non-finite" not in log, log
    assert "Connection closed by peer" in log or "Connection reset by peer" in log, log
    assert rc == -signal.SIGABRT, log  # aborted from C++ (exit status 134 in a shell)
    assert elapsed < hb + 15, log


def test_a_run_outside_submitit_never_imports_it_and_keeps_the_users_logging():
    """Importing submitit runs `logging.config.dictConfig`, which closes every logging handler
    of the process: a training started in a notebook (or under pytest) outside a submitit job
    had its log handlers closed and, through absl's handler, the stderr it wrote to (pytest's
    capture: "I/O operation on closed file"). Outside a job submitit is not imported at all."""
    code = """
import logging, sys, io
stream = io.StringIO()
logging.getLogger().addHandler(logging.StreamHandler(stream))
import birdjepa.config, birdjepa.runtime.distributed as d
topo = d.initialize(birdjepa.config.Config().distributed)
logging.getLogger().warning("still here")
print(topo.process_count, "submitit" in sys.modules, stream.getvalue().strip())
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUBMITIT_", "SLURM_"))}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**env, "JAX_PLATFORMS": "cpu"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[0] == "1 False still here", p.stdout
