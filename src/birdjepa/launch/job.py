"""`TrainingJob`: a training run that submitit can submit, preempt and requeue.

submitit handles the preemption/timeout signal (USR2) inside its own signal handler, on rank 0
only, and exits right after it has requeued the job: the training loop would be cut wherever it
happened to be, and other ranks would block in JAX's shutdown barrier. So the job swaps that
handler for one that only raises a flag. The loop checks the flag at every step boundary; all
processes agree on it (an all-gather), save collectively, wait for the save and shut
`jax.distributed` down. Then rank 0 hands over to submitit's own handler, which calls
`checkpoint()` (a new `TrainingJob` with the same config, hence the same run id and run
directory), requeues and exits; the requeued job resumes from the checkpoint it just wrote.

SIGINT (Ctrl-C) stops the run the same way, but for good: the job returns its summary (a
checkpoint saved, "preempted") and nothing is requeued; a second SIGINT aborts at once, as on the
command line. Local jobs get it from the launcher: `GroupLocalExecutor` runs each job in a process
group of its own, and `Interrupts` forwards the launcher's signals to the jobs it waits for.
"""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

import submitit
import submitit.helpers
import submitit.local.local

import birdjepa.runtime.preemption

LOCAL_REQUEUE_RETURN_CODE = 144
"""submitit.local.local.LOCAL_REQUEUE_RETURN_CODE: a local task exiting with it is requeued."""
REQUEUE_WAIT_S = 60
"""Seconds a non-zero rank waits for Slurm's requeue to kill it before exiting non-zero."""


class TrainingJob:
    """Run `birdjepa.train.loop.main(cfg)` under submitit; requeue on preemption or timeout.

    The config must carry a fixed `run_id` (the launcher sets one) so that the requeued job finds
    the same run directory and resumes from its latest checkpoint.
    """

    def __init__(self, cfg):
        self.cfg = cfg

    def __call__(self):
        preemption = birdjepa.runtime.preemption.Preemption()
        in_submitit = _inside_submitit()
        usr_sig = submitit.JobEnvironment._usr_sig()
        if in_submitit:  # SIGINT first: `previous_handler` is then submitit's requeue handler
            preemption.install(signal.SIGINT, second_aborts=True)
            preemption.install(usr_sig)
            # Blocked since the task started (CONTROLLER): one sent meanwhile is delivered now.
            # Before JAX's import (seconds): a Ctrl-C during it stops the run at its first step.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        # JAX, the model and the loop are imported where the job runs, not where it is
        # submitted: `birdjepa.launch` stays free of JAX (tests/test_structure.py).
        import birdjepa.runtime.distributed as distributed
        import birdjepa.train.loop as loop

        summary = loop.main(self.cfg, should_stop=self.stop_poll(preemption))
        if not summary.get("preempted"):
            return summary
        distributed.shutdown()
        handler = preemption.previous_handler
        if not in_submitit or not callable(handler) or preemption.signum == signal.SIGINT:
            return summary  # stopped with a checkpoint; nothing to (or not to) requeue through
        env = submitit.JobEnvironment()
        if env.global_rank != 0:
            # Rank 0 requeues the whole job. The local controller requeues when a task exits
            # with its requeue code and waits for every task first: leave now. Under Slurm the
            # requeue kills this task; exit non-zero if that has not happened in time.
            if type(env).__name__ == "LocalJobEnvironment":
                raise SystemExit(LOCAL_REQUEUE_RETURN_CODE)
            time.sleep(REQUEUE_WAIT_S)
            raise SystemExit(1)
        # The signal may have reached only another process (agreed through any_process).
        handler(preemption.signum or usr_sig, None)  # calls checkpoint(), requeues, exits
        return summary

    def stop_poll(self, preemption: birdjepa.runtime.preemption.Preemption):
        """The `should_stop` callable polled at every step boundary (tests slow it down)."""
        return preemption.is_set

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """The job to requeue: the same config, so the same run id, run dir and wandb run."""
        return submitit.helpers.DelayedSubmission(type(self)(self.cfg))


def _inside_submitit() -> bool:
    try:
        submitit.JobEnvironment()
    except RuntimeError:
        return False
    return True


class Interrupts:
    """While the launcher waits for local jobs: the first SIGINT (Ctrl-C, or `kill -INT` of the
    launcher alone), SIGTERM or SIGHUP is forwarded as SIGINT to every running job
    (GroupLocalExecutor), whose TrainingJob saves a checkpoint at its next step
    boundary and returns; the launcher waits for them and submits nothing more. A second aborts
    at once: forwarded too (each job aborts, as a second Ctrl-C does), one line, exit 130."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, *, enabled: bool = True):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.signum: int | None = None
        self._jobs: list = []
        self._run_ids: list[str] = []
        self._previous: dict = {}
        self._noticed = False

    def __enter__(self) -> "Interrupts":
        if self.enabled:
            self._previous = {s: signal.signal(s, self._on_signal) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def running(self, jobs: list, run_ids: list[str]) -> None:
        """`jobs` (of runs `run_ids`) now run; a stop signal already received goes to them."""
        self._jobs, self._run_ids = jobs, run_ids
        if self.signum is not None:
            self._forward()

    def notice(self) -> None:
        """Once, after the first signal: say what the launcher is waiting for (not said in the
        handler: a print there could land inside another print)."""
        if self.signum is not None and not self._noticed:
            self._noticed = True
            say(f"signal {signal.Signals(self.signum).name}: asked {', '.join(self._run_ids)} "
                "to stop at the next step boundary and save a checkpoint; waiting (Ctrl-C again "
                "to abort at once)", sys.stdout)

    def _running(self) -> list[tuple[object, str]]:
        """(process, run id) of the jobs not known to have ended (no wait in a handler)."""
        out = [(getattr(job, "_process", None), r) for job, r in zip(self._jobs, self._run_ids,
                                                                      strict=True)]
        return [(p, r) for p, r in out if p is not None and p.returncode is None]

    def _forward(self) -> None:
        for process, _ in self._running():  # the job's controller forwards it to its tasks
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGINT)

    def _on_signal(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
            self._forward()
            return
        self._forward()
        waited = ", ".join(r for _, r in self._running())
        line = "interrupted twice: aborted" + (f"; {waited} stopped without saving" if waited
                                               else "")
        with contextlib.suppress(OSError):
            os.write(2, (line + "\n").encode())
        os._exit(birdjepa.runtime.preemption.EXIT_INTERRUPTED)


def say(line: str, stream) -> None:
    """Print `line` to `stream`, unless the terminal is gone (SIGHUP)."""
    with contextlib.suppress(OSError):
        print(line, file=stream, flush=True)


CONTROLLER = """\
import signal
pending = []
signal.signal(signal.SIGINT, lambda *_: pending.append(signal.SIGINT))
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
import pathlib, sys
from submitit.local.local import Controller

class Forwarding(Controller):
    def start_tasks(self):
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            super().start_tasks()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGINT, self._forward_signal)
        while pending:
            self._forward_signal(pending.pop())

Forwarding(pathlib.Path(sys.argv[1])).run()
"""
"""submitit's local job controller (submitit/local/_local.py), but one that forwards each SIGINT
to its tasks, once, instead of dying of it (and killing them a second later). It starts with
SIGINT blocked (GroupLocalExecutor): one sent before its tasks exist is kept and forwarded when
they start. Its tasks start with SIGINT blocked too, until TrainingJob has installed its handler
(a Ctrl-C then no KeyboardInterrupt in an import, nor lost; a task that is no TrainingJob keeps
it blocked)."""


class GroupLocalExecutor(submitit.LocalExecutor):
    """submitit's LocalExecutor, but each job (controller and tasks) in a process group of its
    own, under the CONTROLLER above. In the launcher's group, Ctrl-C killed submitit's
    controller, which killed its task a second later, before it could save; now Ctrl-C reaches
    the launcher alone, which forwards it to its jobs' controllers (Interrupts), each once to its
    tasks. `job.cancel()` (SIGINT to the controller) then stops a TrainingJob with a checkpoint
    too."""

    def _submit_command(self, command: str) -> submitit.local.local.LocalJob:
        """submitit 1.5.4's LocalExecutor._submit_command and start_controller (no `setup`:
        --executor local sets none), with the controller above in a new process group."""
        p = self.parameters
        n_tasks, n_gpus = p.get("tasks_per_node", 1), p.get("gpus_per_node", 0)
        visible = p.get("visible_gpus", ())
        gpus = range(n_gpus) if visible == () else visible[:n_gpus]
        env = {**os.environ, "SUBMITIT_LOCAL_NTASKS": str(n_tasks),
               "SUBMITIT_LOCAL_COMMAND": command,
               "SUBMITIT_LOCAL_TIMEOUT_S": str(int(60 * p.get("timeout_min", 2.0))),
               "SUBMITIT_LOCAL_SIGNAL_DELAY_S": str(int(p.get("signal_delay_s", 30))),
               "SUBMITIT_LOCAL_NODEID": "0", "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
               "SUBMITIT_STDERR_TO_STDOUT": "1" if p.get("stderr_to_stdout") else "",
               "SUBMITIT_EXECUTOR": "local", "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)),
               "SUBMITIT_LOCAL_WITH_SHELL": ""}
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # inherited
        try:
            process = subprocess.Popen([sys.executable, "-c", CONTROLLER, str(self.folder)],
                                       env=env, process_group=0)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return submitit.local.local.LocalJob(folder=self.folder, job_id=str(process.pid),
                                             process=process, tasks=list(range(n_tasks)))
