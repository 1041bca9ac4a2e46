"""`TrainingJob`: a training run that submitit can submit, preempt and requeue.

submitit handles the preemption/timeout signal (USR2) inside its own signal handler, on rank 0
only, and exits right after it has requeued the job: the training loop would be cut wherever it
happened to be, and other ranks would block in JAX's shutdown barrier. So the job swaps that
handler for one that only raises a flag. The loop checks the flag at every step boundary; all
processes agree on it (an all-gather), save collectively, wait for the save and shut
`jax.distributed` down. Then rank 0 hands over to submitit's own handler, which calls
`checkpoint()` (a new `TrainingJob` with the same config, hence the same run id and run
directory), requeues and exits; the requeued job resumes from the checkpoint it just wrote.
"""

import logging
import signal
import threading
import time

import submitit
import submitit.helpers

logger = logging.getLogger(__name__)


class Preemption:
    """A flag raised by the preemption signal, read at step boundaries."""

    def __init__(self):
        self._event = threading.Event()
        self.signum: int | None = None
        self.submitit_handler = None

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self, signum: int = signal.SIGUSR2) -> None:
        self.signum = signum
        self._event.set()

    def install(self, signum: int) -> None:
        """Replace the current handler of `signum` (submitit's) with one that sets the flag."""
        self.submitit_handler = signal.getsignal(signum)

        def on_signal(sig, frame):
            logger.warning("signal %d: stopping at the next step boundary to checkpoint", sig)
            self.set(sig)

        signal.signal(signum, on_signal)


class TrainingJob:
    """Run `birdjepa.pretrain.main(cfg)` under submitit; requeue on preemption or timeout.

    The config must carry a fixed `run_id` (the launcher sets one) so that the requeued job finds
    the same run directory and resumes from its latest checkpoint.
    """

    def __init__(self, cfg):
        self.cfg = cfg

    def __call__(self):
        import birdjepa.distributed
        import birdjepa.pretrain

        preemption = Preemption()
        in_submitit = _inside_submitit()
        if in_submitit:
            preemption.install(submitit.JobEnvironment._usr_sig())
        summary = birdjepa.pretrain.main(self.cfg, should_stop=preemption.is_set)
        if not summary.get("preempted"):
            return summary
        birdjepa.distributed.shutdown()
        handler = preemption.submitit_handler
        if not in_submitit or not callable(handler):
            return summary  # stopped cleanly with a checkpoint; nothing to requeue through
        if submitit.JobEnvironment().global_rank != 0:
            # Rank 0 requeues the whole job; this task is killed by the requeue.
            time.sleep(120)
            raise SystemExit(1)
        handler(preemption.signum, None)  # calls self.checkpoint(), requeues, exits
        return summary

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """The job to requeue: the same config, so the same run id, run dir and wandb run."""
        return submitit.helpers.DelayedSubmission(TrainingJob(self.cfg))


def _inside_submitit() -> bool:
    try:
        submitit.JobEnvironment()
    except RuntimeError:
        return False
    return True
