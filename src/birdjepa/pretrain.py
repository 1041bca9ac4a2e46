"""`python -m birdjepa.pretrain --cfg FILE.toml [--n_steps=40 ...]`: the command line of training
(birdjepa.train.loop.main; on Slurm, birdjepa.launch).

Exit status: 0 trained (or already complete); 2 a configuration error, one line naming the key;
75 stopped by SIGTERM, SIGUSR2 or Ctrl-C at a step boundary after saving a checkpoint (starting
the same command again resumes); 130 a second Ctrl-C, which aborts at once; 1 a run that ended
without a sound model (diverged, non-finite) or whose evaluation failed (its checkpoint is
saved: the same command evaluates again), whose data yields no valid sample, whose checkpoint
could not be written (a full disk), or whose every checkpoint is corrupt (set aside; the
next start refuses to begin from step 0 unless --resume=never), one line saying why; 1 with a
traceback: a crash. A signal that arrives while the process exits does not change its status
(see `exit_with`).
"""

import logging
import os
import signal
import sys
import typing

import birdjepa.common.cli_args
import birdjepa.common.errors as errors
import birdjepa.config
import birdjepa.config.command_line
import birdjepa.runtime.checkpoint
import birdjepa.runtime.distributed
import birdjepa.runtime.preemption
import birdjepa.runtime.save_failure
import birdjepa.runtime.slurm_env
import birdjepa.train.feed
import birdjepa.train.loop
import birdjepa.train.soundness
import birdjepa.train.step

EXIT_USAGE = birdjepa.common.cli_args.EXIT_USAGE
EXIT_FAILED = 1
EXIT_PREEMPTED = 75
"""Exit status of a run stopped by a signal after saving its checkpoint (EX_TEMPFAIL)."""
EXIT_INTERRUPTED = birdjepa.runtime.preemption.EXIT_INTERRUPTED

FAILURES = (birdjepa.train.loop.EvaluationError, birdjepa.train.soundness.UnsoundRunError,
            birdjepa.train.step.NonFiniteError, birdjepa.runtime.checkpoint.CorruptCheckpointError,
            birdjepa.runtime.save_failure.CheckpointWriteError, birdjepa.train.feed.EmptyBatchError,
            errors.TooManyFailuresError, birdjepa.runtime.slurm_env.SlurmEnvError)
"""Run outcomes reported in one line (exit 1), not as a crash."""


def main(argv: list[str], *, prog: str = "python -m birdjepa.pretrain") -> int:
    birdjepa.common.cli_args.survive_closed_output()  # `| tee log` and Ctrl-C: still saves
    try:
        cfg = birdjepa.config.command_line.cli(argv, prog=prog)
        stop = birdjepa.runtime.preemption.Preemption()
        for sig in (signal.SIGTERM, signal.SIGUSR2):
            stop.install(sig)
        stop.install(signal.SIGINT, second_aborts=True)
        summary = birdjepa.train.loop.main(cfg, should_stop=stop.is_set)
    except birdjepa.config.ConfigError as e:
        return birdjepa.common.cli_args.fail(e)
    except FAILURES as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:  # a full disk, a quota, a lost mount while writing the run's files
        if e.errno is None:
            raise
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e} (errno {e.errno}); the checkpoints saved before "
              "are kept: fix it and run the same command again", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted twice: aborted without saving", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_PREEMPTED if summary.get("preempted") else 0


def exit_with(code: int) -> typing.NoReturn:
    """Leave the process with `code` now, without interpreter finalization. Finalization resets
    the signal handlers to the defaults before JAX and its threads take seconds to tear down, so
    a second Ctrl-C or a SIGTERM in that window killed the process by the signal (exit -2 or
    -15) instead of 130, 75 or 0. Everything a run writes is closed by then (checkpoint saves
    waited for, wandb finished); here jax.distributed is shut down and stdio and logging are
    flushed, with the run's handlers still in place (a second Ctrl-C still exits 130)."""
    try:
        birdjepa.runtime.distributed.shutdown()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def entry() -> typing.NoReturn:
    """The `birdjepa-pretrain` script ([project.scripts]): `python -m birdjepa.pretrain`."""
    exit_with(main(sys.argv[1:], prog="birdjepa-pretrain"))


if __name__ == "__main__":
    exit_with(main(sys.argv[1:]))
