"""Issue 38 item 6: Ctrl-C on `python -m birdjepa.launch --executor local --max_parallel 1`
killed the launcher and its job with KeyboardInterrupt tracebacks and no checkpoint (submitit's
local controller, in the launcher's process group, died of the Ctrl-C and killed its task a
second later), and a SIGINT to the launcher alone left its job running and the next entry
unstarted. Now the running job saves a checkpoint at its next step boundary, the launcher waits
for it, says where it stopped in one line and exits 130; a second Ctrl-C aborts at once.

Each test runs the real launcher in a session of its own (its process group stands for the
terminal's foreground group) on a two-entry sweep of tiny runs, and signals it once the first
entry is training."""

import contextlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
import tiny

import birdjepa.runtime.rundir

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def base_toml(tmp_path_factory, demo_corpus):
    """1000 steps (minutes), never checkpointed but by a stop."""
    corpus = demo_corpus(n_recordings=24, n_shards=2, min_s=5.0, max_s=8.0)["out_dir"]
    path = tmp_path_factory.mktemp("launch-interrupt") / "tiny.toml"
    path.write_text(tiny.tiny_toml(corpus, n_steps=1000, ckpt_every=1000))
    return path


class Launcher:
    """`python -m birdjepa.launch` on a two-entry sweep (--executor local --max_parallel 1),
    its stdout and stderr in files (the jobs' controllers inherit them)."""

    def __init__(self, tmp_path: pathlib.Path, base: pathlib.Path):
        self.runs = [tmp_path / "runs" / "a", tmp_path / "runs" / "b"]
        sweep = tmp_path / "sw.py"
        sweep.write_text(f"BASE = {str(base)!r}\n\ndef make_cfgs():\n    return ["
                         + ", ".join(f"{{'optim.lr': {lr}, 'run_dir': {str(d)!r}}}"
                                     for lr, d in zip((1e-3, 2e-3), self.runs, strict=True))
                         + "]\n")
        self.logs = tmp_path / "logs"
        self.out, self.err = tmp_path / "launcher.out", tmp_path / "launcher.err"
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
        env.pop("XLA_FLAGS", None)
        with self.out.open("w") as out, self.err.open("w") as err:
            self.p = subprocess.Popen(
                [sys.executable, "-m", "birdjepa.launch", "--sweep", str(sweep), "--executor",
                 "local", "--max_parallel", "1", "--log_dir", str(self.logs)],
                cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True)

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def job_log(self) -> str:
        return "".join(f.read_text() for f in sorted(self.logs.rglob("*_log.*")))

    def text(self) -> str:
        return (f"--- launcher stdout\n{self.stdout()}\n--- launcher stderr\n{self.stderr()}\n"
                f"--- job logs\n{self.job_log()[-4000:]}")

    def wait_for(self, pred, timeout: float = 120, every: float = 0.1) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if self.p.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"launcher exited ({self.p.returncode}) or timed out\n{self.text()}")
            time.sleep(every)

    def wait_training(self) -> None:
        """Until the first entry has logged step 2 (compiled, training)."""
        self.wait_for(lambda: self.logs.is_dir() and "\nstep 2/" in self.job_log())

    def wait(self, timeout: float = 60) -> tuple[int, float]:
        """(exit status, seconds it took)."""
        t0 = time.monotonic()
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"launcher still running {timeout} s after the signal\n{self.text()}")
        return rc, time.monotonic() - t0

    def job_groups(self) -> list[int]:
        return [int(m) for m in re.findall(r"^job (\d+): ", self.stdout(), re.M)]

    def kill(self) -> None:
        """Whatever is left: the launcher's group and the jobs' (controller pids)."""
        for pgid in [self.p.pid, *self.job_groups()]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.p.wait(timeout=10)


@pytest.fixture
def launcher(tmp_path, base_toml):
    la = Launcher(tmp_path, base_toml)
    yield la
    la.kill()


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` runs (zombies left to a non-reaping pid 1 aside)."""
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def run_ids(launcher: Launcher) -> list[str]:
    return [re.search(rf"^(\S+): to run -> {re.escape(str(d))}$", launcher.stdout(), re.M)[1]
            for d in launcher.runs]


@pytest.mark.heavy
@pytest.mark.parametrize(("target", "when"), [("group", "training"), ("launcher", "training"),
                                             ("group", "starting")])
def test_ctrl_c_saves_a_checkpoint_and_exits_130(launcher, target, when):
    """Ctrl-C (SIGINT to the launcher's whole process group) and `kill -INT` of the launcher
    alone, while the first entry trains or as soon as it is submitted (its process still
    starting, importing JAX): the job stops at a step boundary with a checkpoint, the launcher
    says so in one line and exits 130, and the second entry never starts."""
    if when == "training":
        launcher.wait_training()
    else:
        launcher.wait_for(lambda: "\njob " in launcher.stdout())
    if target == "group":
        os.killpg(launcher.p.pid, signal.SIGINT)
    else:
        os.kill(launcher.p.pid, signal.SIGINT)
    rc, seconds = launcher.wait()
    err = launcher.stderr()
    assert rc == 130, (rc, launcher.text())
    assert "Traceback" not in err + launcher.job_log(), launcher.text()
    a, b = run_ids(launcher)
    m = re.fullmatch(rf"interrupted: {a} stopped at step (\d+) with a checkpoint; run the same "
                     rf"command again to resume; entries not started: {b}\n", err)
    assert m, launcher.text()
    ckpt = birdjepa.runtime.rundir.checkpoints_dir(launcher.runs[0])
    assert birdjepa.runtime.rundir.step_dir(ckpt, int(m[1])).is_dir(), launcher.text()
    assert not launcher.runs[1].exists()
    assert f"signal SIGINT: asked {a} to stop at the next step boundary" in launcher.stdout()
    print(f"{target}, {when}: exit {rc} {seconds:.1f} s after the signal, stopped at step {m[1]}")


def test_a_second_ctrl_c_aborts_at_once(launcher):
    """A second Ctrl-C while the job saves: the launcher leaves at once with 130 and one line;
    the job aborts too (its own second Ctrl-C); the second entry never starts."""
    launcher.wait_training()
    os.killpg(launcher.p.pid, signal.SIGINT)
    # The second only once the launcher has taken the first: two SIGINTs that reach a busy
    # process before its Python handler runs are one (a fixed 50 ms wait lost that race on a
    # loaded machine). The job still has a step and its save ahead of it then.
    launcher.wait_for(lambda: "Ctrl-C again to abort at once" in launcher.stdout(), timeout=60,
                      every=0.005)
    os.killpg(launcher.p.pid, signal.SIGINT)
    rc, seconds = launcher.wait(timeout=20)
    err = launcher.stderr()
    assert rc == 130, (rc, launcher.text())
    assert "Traceback" not in err, launcher.text()
    assert len(err.splitlines()) == 1 and err.startswith("interrupted twice: aborted"), \
        launcher.text()
    assert seconds < 5, (seconds, launcher.text())
    deadline = time.monotonic() + 20  # the job went too (its process group is empty)
    while any(map(group_alive, launcher.job_groups())):
        if time.monotonic() > deadline:
            pytest.fail(f"a job is still running\n{launcher.text()}")
        time.sleep(0.1)
    assert not launcher.runs[1].exists()
    print(f"second Ctrl-C: exit {rc} {seconds:.1f} s after it")
