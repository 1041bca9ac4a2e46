"""Trainings over simulated hosts with a fault injected mid-run (issue 37): what
tests/test_host_faults.py asserts and docs/issues/025-many-hosts/faults.py prints.

A tiny supervised run (tests/support/tiny.py, `n_steps` steps, a checkpoint every 10) over
`hosts` x `procs` processes of one CPU device each; once the run has logged `after` steps, one
fault; every process's exit status and seconds from the fault to its exit. One process of n
devices follows n processes of one device step for step, bitwise (tests/test_many_hosts.py), so
a run resumed under any layout is compared with a one-process run of as many devices.
"""

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import sim_hosts
import tiny

HEARTBEAT_S = 10
"""distributed.heartbeat_timeout_s of these runs (default 120)."""
FAULTS = ("usr2", "term", "kill", "stop", "down")
"""usr2 / term: the signal to every process of host 1 only; kill / stop: SIGKILL / SIGSTOP to
host 1's first process; down: host 0 (the coordinator's) leaves the network (link down)."""


def write_config(path: pathlib.Path, corpus: pathlib.Path, n_steps: int, *,
                 frozen: bool = False) -> pathlib.Path:
    """The tiny config; `frozen`: learning rates 0, so that each loss is a function of its batch
    alone (four processes sum gradients in another order than one process of four devices)."""
    toml = tiny.tiny_toml(corpus, n_steps=n_steps, ckpt_every=10)
    if frozen:
        toml = toml.replace("lr = 2e-3\n", "lr = 0.0\nprobe_lr = 0.0\n")
        assert "lr = 0.0" in toml
    path.write_text(toml)
    return path


def argv(cfg: pathlib.Path, run: pathlib.Path) -> list[str]:
    return [sys.executable, "-m", "birdjepa.pretrain", "--cfg", str(cfg), "--run_dir", str(run),
            "--distributed.init_timeout_s=60", f"--distributed.heartbeat_timeout_s={HEARTBEAT_S}",
            "--distributed.shutdown_timeout_s=10"]


def environ(devices: int) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SUBMITIT_"))}
    return base | {"WANDB_MODE": "disabled",
                   "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}


def losses(run: pathlib.Path) -> dict[int, float]:
    """Step -> loss of the run's metrics rows (a step trained again after a resume: its last)."""
    path = run / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    return {r["step"]: r["loss"] for r in rows if "grad_norm" in r}


def checkpoints(run: pathlib.Path) -> list[int]:
    d = run / "checkpoints"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.exists() else []


def one_process(cfg: pathlib.Path, run: pathlib.Path, devices: int, *, stop_after: int = 0,
                log: pathlib.Path) -> tuple[int, str]:
    """Run (or resume) as one process of `devices` devices; with `stop_after`, SIGTERM once the
    run has logged that many more steps. Returns (exit status, its output)."""
    before = len(losses(run))
    with open(log, "w") as out:
        p = subprocess.Popen(argv(cfg, run), env=environ(devices), stdout=out,
                             stderr=subprocess.STDOUT)
        if stop_after:
            _wait_steps(run, before + stop_after, [p], log)
            p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=300)
    return rc, log.read_text()


def _wait_steps(run: pathlib.Path, n: int, procs: list, log: pathlib.Path) -> int:
    deadline = time.monotonic() + 240
    while len(losses(run)) < n:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise AssertionError(f"{run}: {len(losses(run))} of {n} steps\n{log.read_text()}")
        time.sleep(0.05)
    return max(losses(run))


@dataclasses.dataclass
class Outcome:
    exits: list[tuple[int, float]]
    """Per process (rank order): exit status, seconds from the fault to the exit."""
    logs: list[str]
    after_step: int
    """The last step logged when the fault was injected."""


def on_hosts(cfg: pathlib.Path, run: pathlib.Path, work: pathlib.Path, corpus: pathlib.Path, *,
             hosts: int, procs: int, fault: str | None = None, after: int = 25) -> Outcome:
    """Run (or resume) over `hosts` x `procs` simulated processes; with `fault` (one of FAULTS),
    inject it once `after` more steps are logged and wait for every process to exit."""
    n, before = hosts * procs, len(losses(run))
    logs = [work / f"{run.name}.{hosts}x{procs}.rank{r}.log" for r in range(n)]
    with sim_hosts.SimHosts(hosts, shared=[work, corpus]) as sim:
        ps = [sim.popen(r // procs, argv(cfg, run),
                        env=environ(1) | sim_hosts.slurm_env(sim, r, procs), log=logs[r])
              for r in range(n)]
        at, t0 = 0, time.monotonic()
        if fault is not None:
            at = _wait_steps(run, before + after, ps, logs[0])
            t0 = time.monotonic()
            host1 = [r for r in range(n) if r // procs == 1]
            if fault in ("usr2", "term"):
                for r in host1:
                    sim.signal(r, signal.SIGUSR2 if fault == "usr2" else signal.SIGTERM)
            elif fault in ("kill", "stop"):
                sim.signal(host1[0], signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            else:
                sim.link(0, up=False)
        exits: dict[int, tuple[int, float]] = {}
        while len(exits) < n:
            for r, p in enumerate(ps):
                if r not in exits and p.poll() is not None:
                    exits[r] = (p.returncode, round(time.monotonic() - t0, 1))
            if time.monotonic() - t0 > 300:
                break  # SimHosts kills what is left
            if fault == "stop" and len(exits) == n - 1 and host1[0] not in exits:
                sim.signal(host1[0], signal.SIGKILL)  # the stopped one: as Slurm ends the step
            time.sleep(0.05)
    return Outcome(exits=[exits.get(r, (None, None)) for r in range(n)],
                   logs=[p.read_text() for p in logs], after_step=at)
