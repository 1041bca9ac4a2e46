"""Helpers for the resume proofs (tests/test_resume.py, docs/issues/005-resume-is-exact): their
demo corpus, CLI runs in subprocesses, and bitwise comparison of runs (the tiny config itself is
tests/support/tiny.py's tiny_toml)."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import jax
import numpy as np

import birdjepa.launch.job
import birdjepa.pretrain
import birdjepa.runtime.preemption
import birdjepa.train.loaders

ROOT = pathlib.Path(__file__).resolve().parents[2]

DETERMINISTIC = ("loss", "probe_loss", "probe_acc", "train_acc", "lr", "grad_norm", "param_norm",
                 "eval/probe_acc", "eval/probe_loss", "eval/n", "eval/head_acc")
"""metrics.jsonl keys that are functions of the training stream (not of wall-clock time)."""


CORPUS = dict(n_recordings=24, n_shards=2, min_s=5.0, max_s=8.0)
"""The resume proofs' corpus (conftest's demo_corpus(**CORPUS)): 24 recordings of 5-8 s in 2
shards, seconds to write; tests/fixtures/pre-schema-run was trained on it."""


JAX_CACHE: str | None = None
"""A persistent compilation cache shared by the subprocesses (set by the test session): a
restarted process loads the executables the first one compiled (same HLO, same bits)."""


def cache_env() -> dict:
    if JAX_CACHE is None:
        return {}
    return {"JAX_COMPILATION_CACHE_DIR": JAX_CACHE,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}


def env(n_devices: int = 1) -> dict:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "support"),
                            os.environ.get("PYTHONPATH", "")])
    e = {**os.environ, "WANDB_MODE": "disabled", "JAX_PLATFORMS": "cpu", "PYTHONPATH": path,
         **cache_env()}
    if n_devices > 1:
        e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n_devices}"
    else:
        e.pop("XLA_FLAGS", None)
    return e


def cli(cfg_path, run_dir, *extra) -> list[str]:
    return [sys.executable, "-m", "birdjepa.pretrain", "--cfg", str(cfg_path),
            f"--run_dir={run_dir}", *extra]


def run(cfg_path, run_dir, *extra, n_devices: int = 1, timeout: float = 300):
    """Run the CLI to the end; CompletedProcess with text stdout/stderr."""
    return subprocess.run(cli(cfg_path, run_dir, *extra), env=env(n_devices), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


class Proc:
    """A CLI run whose stdout lines are read by a thread, so the test can wait for a line."""

    def __init__(self, cfg_path, run_dir, *extra, n_devices: int = 1):
        self.p = subprocess.Popen(cli(cfg_path, run_dir, *extra), env=env(n_devices), cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.err: list[str] = []
        self.cond = threading.Condition()
        self._threads = [threading.Thread(target=self._read, args=(self.p.stdout, self.lines),
                                          daemon=True),
                         threading.Thread(target=self._read, args=(self.p.stderr, self.err),
                                          daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self, stream, out):
        for line in stream:
            with self.cond:
                out.append(line)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, pred, timeout: float = 240) -> str | None:
        """The first stdout line satisfying `pred`, or None if the process ended first."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self.cond:
            while True:
                for line in self.lines[seen:]:
                    if pred(line):
                        return line
                seen = len(self.lines)
                if self.p.poll() is not None and not self._threads[0].is_alive():
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise TimeoutError(f"no matching line in {timeout} s:\n{self.text()}")
                self.cond.wait(min(left, 0.5))

    def wait_step(self, k: int, timeout: float = 240) -> bool:
        """Wait until step >= k is printed; False if the process ended first."""
        return self.wait_for(lambda s: (n := step_of(s)) is not None and n >= k, timeout) is not None

    def signal(self, sig) -> None:
        self.p.send_signal(sig)

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
        self.p.wait(timeout=60)

    def wait(self, timeout: float = 300) -> int:
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        for t in self._threads:
            t.join(timeout=10)
        return rc

    def text(self) -> str:
        return "".join(self.lines) + "\n--- stderr ---\n" + "".join(self.err)[-4000:]


def step_of(line: str) -> int | None:
    """The k of a console line 'step k/N | ...'."""
    if line.startswith("step ") and "/" in line.split(" |")[0]:
        return int(line.split()[1].split("/")[0])
    return None


def metrics(run_dir) -> dict[int, dict]:
    """step -> the deterministic metrics of that step (train and eval rows merged); a duplicate
    step is an error."""
    out: dict[int, dict] = {}
    seen: set[tuple[int, str]] = set()
    for line in (pathlib.Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        kind = "eval" if any(k.startswith("eval/") for k in row) else "train"
        assert (row["step"], kind) not in seen, f"step {row['step']} logged twice ({kind})"
        seen.add((row["step"], kind))
        out.setdefault(row["step"], {}).update(
            {k: v for k, v in row.items() if k in DETERMINISTIC})
    return out


def losses(run_dir) -> tuple[list[int], list[float]]:
    m = metrics(run_dir)
    steps = sorted(s for s in m if "loss" in m[s])
    return steps, [m[s]["loss"] for s in steps]


def final_state(run_dir, step: int | None = None):
    """The restored train state of a run's latest (or `step`) checkpoint, as numpy leaves."""
    import birdjepa.models.artifact

    restored, _, _ = birdjepa.models.artifact.restore_state(run_dir, step=step)
    return restored


def leaves(state) -> list[tuple[str, np.ndarray]]:
    """(path, numpy array) of every leaf; PRNG keys as their key data."""
    out = []
    for path, x in jax.tree_util.tree_flatten_with_path(state)[0]:
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        out.append((jax.tree_util.keystr(path), np.asarray(x)))
    return out


def bitwise_diff(a, b) -> list[str]:
    """Paths of the leaves that differ (shape, dtype or any bit); [] when equal."""
    la, lb = leaves(a), leaves(b)
    if [p for p, _ in la] != [p for p, _ in lb]:
        return ["<tree structure>"]
    return [p for (p, x), (_, y) in zip(la, lb, strict=True)
            if x.dtype != y.dtype or x.shape != y.shape or not np.array_equal(x, y)]


def assert_same_run(ref_dir, run_dir) -> float:
    """Every step's metrics and the final checkpoint (params, optimiser, key, step, loader) are
    bitwise equal; returns max |delta loss| (0.0)."""
    ma, mb = metrics(ref_dir), metrics(run_dir)
    assert sorted(ma) == sorted(mb), (sorted(ma), sorted(mb))
    for s in ma:
        assert ma[s] == mb[s], (s, ma[s], mb[s])
    ra, rb = final_state(ref_dir), final_state(run_dir)
    assert ra.step == rb.step
    diff = bitwise_diff(ra.state, rb.state)
    assert diff == [], f"leaves differ: {diff}"
    assert ra.loader == rb.loader
    return max(abs(ma[s]["loss"] - mb[s]["loss"]) for s in ma if "loss" in ma[s])


class HeldTrainLoader:
    """A train loader that, before yielding batch `hold_at` (counted from this process's start),
    waits until `flag.is_set()`: the run is then mid-way when a preemption signal arrives,
    however long the job took to start. The stream itself is unchanged."""

    def __init__(self, loader, flag, hold_at: int, timeout: float = 300):
        self.loader, self.flag, self.hold_at, self.timeout = loader, flag, hold_at, timeout

    def __iter__(self):
        for i, batch in enumerate(self.loader):
            if i == self.hold_at:
                deadline = time.monotonic() + self.timeout
                while not self.flag.is_set() and time.monotonic() < deadline:
                    time.sleep(0.05)
            yield batch

    def __getattr__(self, name):
        return getattr(self.loader, name)


class HoldUntilPreempted(birdjepa.launch.job.TrainingJob):
    """`birdjepa.launch.job.TrainingJob` whose first attempt holds before step `hold_at` + 1 until the
    preemption flag is raised; its `checkpoint()` requeues a plain TrainingJob."""

    def __init__(self, cfg, hold_at: int):
        super().__init__(cfg)
        self.hold_at = hold_at

    def __call__(self):
        flags = []
        original = birdjepa.runtime.preemption.Preemption

        class Recorded(original):
            def __init__(self):
                super().__init__()
                flags.append(self)

        make_loaders = birdjepa.train.loaders.make_loaders

        def held(cfg, *, train_state=None):
            train, evals = make_loaders(cfg, train_state=train_state)
            print(f"holding at step {self.hold_at} until preempted", flush=True)
            return HeldTrainLoader(train, flags[-1], self.hold_at), evals

        birdjepa.runtime.preemption.Preemption = Recorded
        birdjepa.train.loaders.make_loaders = held
        try:
            return super().__call__()
        finally:
            birdjepa.runtime.preemption.Preemption = original
            birdjepa.train.loaders.make_loaders = make_loaders

    def checkpoint(self, *args, **kwargs):
        import submitit.helpers

        return submitit.helpers.DelayedSubmission(birdjepa.launch.job.TrainingJob(self.cfg))


def split_run(cfg, run_dir, *, at: int, n_devices: int = 1, sig=signal.SIGUSR2) -> int:
    """Stop a CLI run with `sig` (SIGUSR2, SIGTERM or SIGINT: Ctrl-C) once step `at` is logged
    (it saves at the next step boundary and exits 75), then run the same command again to the
    end; returns the step it stopped at."""
    run_dir = pathlib.Path(run_dir)
    p = Proc(cfg, run_dir, n_devices=n_devices)
    assert p.wait_step(at), p.text()
    p.signal(sig)
    assert p.wait() == birdjepa.pretrain.EXIT_PREEMPTED, p.text()
    stopped = [int(line.split()[1].rstrip(":")) for line in p.lines if "stop requested" in line]
    assert len(stopped) == 1 and at <= stopped[0], p.text()
    assert not (run_dir / "COMPLETE").exists(), "a preempted run must not be marked complete"
    r = run(cfg, run_dir, n_devices=n_devices)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert f"resumed from step {stopped[0]} " in r.stdout, r.stdout
    assert "step 1/" not in r.stdout  # nothing before the checkpoint was trained again
    return stopped[0]


def tmp_dirs(run_dir: pathlib.Path) -> list[str]:
    d = pathlib.Path(run_dir) / "checkpoints"
    return [p.name for p in d.iterdir() if "orbax-checkpoint-tmp" in p.name] if d.is_dir() else []


def kill_run(cfg, run_dir, *, n_kills: int, seed: int, n_steps: int) -> dict:
    """Train with the CLI, SIGKILLing the process `n_kills` times at seeded random moments
    (every other kill as soon as an uncommitted save's temporary directory is on disk, the
    others 0-80 ms after a step line) and restarting it after each kill, until it completes.
    Returns {"kills", "mid_save" (kills with an uncommitted save left on disk),
    "resumed_from" (steps)}."""
    run_dir = pathlib.Path(run_dir)
    rng = np.random.default_rng(seed)
    kills, mid_save, resumed_from = 0, 0, []
    for attempt in range(3 * n_kills + 3):
        p = Proc(cfg, run_dir)
        line = p.wait_for(lambda s: s.startswith("resumed from step") or step_of(s) == 1)
        assert line is not None, p.text()
        start = int(line.split()[3]) if line.startswith("resumed") else 0
        if start:
            resumed_from.append(start)
        if kills >= n_kills or start >= n_steps - 2:
            break  # let this one finish
        target = start + int(rng.integers(2, 6))
        if not p.wait_step(target):
            break
        seen = False
        if attempt % 2 == 0:
            deadline = time.monotonic() + 5
            while not tmp_dirs(run_dir) and time.monotonic() < deadline and p.p.poll() is None:
                time.sleep(0.0005)
            seen = bool(tmp_dirs(run_dir))
        else:
            time.sleep(float(rng.uniform(0.0, 0.08)))
        if p.p.poll() is not None:
            break
        p.kill()
        kills += 1
        mid_save += bool(seen and tmp_dirs(run_dir))
        assert not (run_dir / "COMPLETE").exists(), "a killed run must not be marked complete"
    assert p.wait() == 0, p.text()
    assert tmp_dirs(run_dir) == [], "temporary directories of killed saves are removed"
    return {"kills": kills, "mid_save": mid_save, "resumed_from": resumed_from}
