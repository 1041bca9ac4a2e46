"""The local Slurm cluster: plain sbatch, concurrency, submitit preemption/requeue, 2-task jobs."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
import submitit
from slurm_cluster import MARKER_ENV, SlurmCluster, SlurmClusterError
from slurm_cluster import slurm_cluster as _slurm_cluster_fixture  # noqa: F401 - registers it

# The first test's budget includes the fixture's package install (~70 s from a clean machine).
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.timeout(600)]

TESTS_DIR = str(Path(__file__).resolve().parent)


def _log(msg: str) -> None:
    print(f"[slurm-test] {msg}", flush=True)


@pytest.fixture
def slurm_env(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """os.environ set for submitit: our SLURM_CONF, and tests/ importable inside jobs
    (submitit pickles this module's classes by reference)."""
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.env["SLURM_CONF"])
    monkeypatch.setenv(MARKER_ENV, slurm_cluster.env[MARKER_ENV])  # teardown finds strays by it
    path = os.environ.get("PYTHONPATH")
    here = os.pathsep.join([TESTS_DIR, os.path.join(TESTS_DIR, "support")])
    monkeypatch.setenv("PYTHONPATH", here + (os.pathsep + path if path else ""))
    return slurm_cluster


def _executor(folder: Path, cluster: SlurmCluster, **params) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(
        slurm_partition=cluster.partition,
        timeout_min=15,  # > 10 min, or submitit counts every preemption as a timeout
        mem_gb=1,
        cpus_per_task=1,
        nodes=1,
        **params,
    )
    return ex


def _wait_done(job, cluster: SlurmCluster, timeout: float, tasks: int = 1) -> None:
    """Bounded wait for a submitit job (job.result() alone can wait forever)."""
    deadline = time.monotonic() + timeout
    while not all(job.task(i).done() for i in range(tasks)):
        if time.monotonic() > deadline:
            state = cluster.job_state(job.job_id)
            pytest.fail(
                f"submitit job {job.job_id} not done after {timeout} s (sacct {state!r})\n"
                f"stdout:\n{job.stdout()}\nstderr:\n{job.stderr()}\n{cluster.log_tails()}"
            )
        time.sleep(0.5)


def test_sbatch_completes_and_sacct_reports_it(slurm_cluster: SlurmCluster, tmp_path: Path):
    t0 = time.monotonic()
    out = tmp_path / "out.txt"
    script = (
        '#!/bin/bash\necho "batch $SLURM_JOB_ID"\nsrun -n1 bash -c \'echo "step $SLURM_STEP_ID"\'\n'
    )
    job_id = slurm_cluster.sbatch(script, f"--output={out}", "--time=2")
    state = slurm_cluster.wait_job(job_id, timeout=60)
    assert state == "COMPLETED", slurm_cluster.log_tails()
    assert out.read_text().split("\n")[:2] == [f"batch {job_id}", "step 0"]
    # sacct also has the steps, with their exit codes.
    p = slurm_cluster.run(["sacct", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", job_id])
    rows = {r.split("|")[0]: r.split("|")[1:] for r in p.stdout.split()}
    assert rows[job_id] == ["COMPLETED", "0:0"]
    assert rows[f"{job_id}.0"] == ["COMPLETED", "0:0"]
    _log(
        f"sbatch round trip {time.monotonic() - t0:.1f} s; cluster timings {slurm_cluster.timings}"
    )


def test_two_one_cpu_jobs_run_concurrently(slurm_cluster: SlurmCluster, tmp_path: Path):
    t0 = time.monotonic()
    # Each job marks itself started, then waits for the other's mark: both can complete only
    # if they run at the same time.
    script = (
        "#!/bin/bash\ntouch {me}\n"
        "for i in $(seq 300); do [ -e {other} ] && exit 0; sleep 0.1; done\nexit 1\n"
    )
    a, b = tmp_path / "a", tmp_path / "b"
    ids = [
        slurm_cluster.sbatch(script.format(me=a, other=b), "-n1", "-c1", "--time=2"),
        slurm_cluster.sbatch(script.format(me=b, other=a), "-n1", "-c1", "--time=2"),
    ]
    states = [slurm_cluster.wait_job(i, timeout=60) for i in ids]
    assert states == ["COMPLETED", "COMPLETED"], slurm_cluster.log_tails()
    _log(f"two concurrent jobs {time.monotonic() - t0:.1f} s")


class StepCounter:
    """Counts `n_steps` steps into `steps_file`, one line each; resumes from the file.

    checkpoint() runs on rank 0 inside submitit's USR2 handler: it records the call and
    resubmits itself; the next attempt continues after the last step written."""

    def __init__(self, steps_file: str, events_file: str, n_steps: int, step_s: float):
        self.steps_file = steps_file
        self.events_file = events_file
        self.n_steps = n_steps
        self.step_s = step_s

    def _event(self, what: str) -> None:
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        with open(self.events_file, "a") as f:
            f.write(f"{what} restart={restart} t={time.time():.3f}\n")

    def __call__(self) -> int:
        done = 0
        if os.path.exists(self.steps_file):
            with open(self.steps_file) as f:
                done = sum(1 for _ in f)
        self._event(f"start from={done}")
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        for step in range(done, self.n_steps):
            time.sleep(self.step_s)
            with open(self.steps_file, "a") as f:
                f.write(f"{step} {restart}\n")
        return sum(range(self.n_steps))

    def checkpoint(self) -> submitit.helpers.DelayedSubmission:
        self._event("checkpoint")
        return submitit.helpers.DelayedSubmission(self)


def _events(path: Path) -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in path.read_text().splitlines():
        words = line.split()
        kinds = [w for w in words if "=" not in w]
        out.append((" ".join(kinds), dict(w.split("=", 1) for w in words if "=" in w)))
    return out


def test_submitit_job_preempted_with_usr2_is_requeued_and_resumes(
    slurm_env: SlurmCluster, tmp_path: Path
):
    cluster = slurm_env
    t0 = time.monotonic()
    steps, events = tmp_path / "steps.txt", tmp_path / "events.txt"
    n_steps = 16
    ex = _executor(tmp_path / "submitit", cluster)
    job = ex.submit(StepCounter(str(steps), str(events), n_steps=n_steps, step_s=0.5))

    # Preempt mid-run, once a few steps are written.
    deadline = time.monotonic() + 90
    while not (steps.exists() and len(steps.read_text().splitlines()) >= 4):
        assert time.monotonic() < deadline, f"no steps\n{job.stderr()}\n{cluster.log_tails()}"
        assert not job.done(), f"job ended early\n{job.stderr()}"
        time.sleep(0.2)
    t_signal = time.time()
    cluster.run(["scancel", "--signal=USR2", job.job_id])
    _wait_done(job, cluster, timeout=150)
    assert job.result() == sum(range(n_steps))
    t_total = time.monotonic() - t0

    # The steps file: each step exactly once and in order, first by attempt 0 then attempt 1.
    rows = [line.split() for line in steps.read_text().splitlines()]
    assert [int(r[0]) for r in rows] == list(range(n_steps))
    attempts = [int(r[1]) for r in rows]
    k = attempts.index(1)
    assert 4 <= k < n_steps and attempts == [0] * k + [1] * (n_steps - k), attempts

    ev = _events(events)
    kinds = [kind for kind, _ in ev]
    assert kinds == ["start", "checkpoint", "start"], ev
    assert ev[0][1] == {"from": "0", "restart": "0", "t": ev[0][1]["t"]}
    assert ev[1][1]["restart"] == "0"  # checkpoint() ran in the preempted attempt
    assert ev[2][1]["restart"] == "1" and ev[2][1]["from"] == str(k)

    # Slurm's own record: requeued once, then completed (the result is written before the end).
    assert cluster.wait_job(job.job_id, timeout=30) == "COMPLETED"
    p = cluster.run(["sacct", "-D", "-X", "-n", "-P", "-o", "State", "-j", job.job_id])
    assert p.stdout.split() == ["REQUEUED", "COMPLETED"], p.stdout
    gap = float(ev[2][1]["t"]) - float(ev[1][1]["t"])
    _log(
        f"preempt/requeue: signal->checkpoint {float(ev[1][1]['t']) - t_signal:.1f} s, "
        f"requeue gap (checkpoint->restart) {gap:.1f} s, total {t_total:.1f} s"
    )
    assert gap < 60


def distributed_env_probe(timeout: float = 30.0) -> dict:
    """Inside a 2-task job: read the torch-style distributed env; rank 0 listens on
    master_addr:master_port and rank 1 connects to it, so the address is usable."""
    env = submitit.helpers.TorchDistributedEnvironment()
    info = {
        "rank": env.rank,
        "local_rank": env.local_rank,
        "world_size": env.world_size,
        "master_addr": env.master_addr,
        "master_port": env.master_port,
    }
    if env.rank == 0:
        with socket.create_server((env.master_addr, env.master_port)) as srv:
            srv.settimeout(timeout)
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(timeout)
                info["peer"] = conn.recv(64).decode()
                conn.sendall(b"0")
    else:
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = socket.create_connection((env.master_addr, env.master_port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with conn:
            conn.settimeout(timeout)
            conn.sendall(str(env.rank).encode())
            info["peer"] = conn.recv(64).decode()
    return info


def test_two_task_job_sees_torch_distributed_environment(slurm_env: SlurmCluster, tmp_path: Path):
    cluster = slurm_env
    t0 = time.monotonic()
    ex = _executor(tmp_path / "submitit", cluster, tasks_per_node=2)
    job = ex.submit(distributed_env_probe)
    _wait_done(job, cluster, timeout=90, tasks=2)
    infos = sorted(job.results(), key=lambda i: i["rank"])
    assert [i["rank"] for i in infos] == [0, 1]
    assert [i["local_rank"] for i in infos] == [0, 1]
    assert {i["world_size"] for i in infos} == {2}
    assert len({(i["master_addr"], i["master_port"]) for i in infos}) == 1
    assert [i["peer"] for i in infos] == ["1", "0"]  # they reached each other
    # The results are written before the job ends; Slurm's record follows.
    assert cluster.wait_job(job.job_id, timeout=30) == "COMPLETED"
    _log(f"2-task job {time.monotonic() - t0:.1f} s; master {infos[0]['master_addr']}")


class _BrokenCtldCluster(SlurmCluster):
    """slurmctld alone gets a slurm.conf it rejects (the other daemons start normally)."""

    def _start_slurmctld(self) -> None:
        with self.conf_path.open("a") as f:
            f.write("NoSuchOption=1\n")
        super()._start_slurmctld()


def test_failed_start_reports_daemon_log_and_leaves_nothing(slurm_cluster: SlurmCluster):
    t0 = time.monotonic()
    broken = _BrokenCtldCluster(startup_timeout=30)
    with pytest.raises(SlurmClusterError) as err:
        broken.start()
    msg = str(err.value)
    assert msg.startswith("slurmctld exited with"), msg
    assert "NoSuchOption" in msg  # the daemon's own words, from its log tail
    assert broken._stray_pids() == []
    assert not broken.root.exists()
    assert not broken._procs
    _log(f"failed start reported in {time.monotonic() - t0:.1f} s")
