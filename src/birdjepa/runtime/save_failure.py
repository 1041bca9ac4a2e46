"""A checkpoint save that fails (a full disk, a quota, a lost mount) as one line.

Orbax commits a save on a background thread; when a write fails it logs the failure on absl's
ERROR log with its traceback (twice, plus the failed thread's own report) and re-raises it from
`wait_until_finished`. `birdjepa.runtime.checkpoint.Checkpointer` turns that into one
`CheckpointWriteError` line naming the step; the absl records are dropped (this module installs
the filter when imported), so the user sees the one line only.
"""

import logging
import pathlib

_SAVE_FAILURE_LOGS = ("Failed to run", "Save Finalize", "_SignalingThread.run() raised")
"""Starts of the absl messages Orbax logs, with a traceback, for a failed background save."""


class CheckpointWriteError(RuntimeError):
    """A save failed: one line naming the step and why; the steps committed before it are
    kept."""


class _DropSaveFailure(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        return not (record.exc_info and any(m in msg for m in _SAVE_FAILURE_LOGS))


def wait(mngr, step: int | None, ckpt_dir: pathlib.Path, on_failure) -> None:
    """`mngr.wait_until_finished()`; a failed save of `step` raises CheckpointWriteError after
    `on_failure()`."""
    try:
        mngr.wait_until_finished()
    except Exception as e:
        on_failure()
        raise error(step, ckpt_dir, e) from None


def error(step: int | None, ckpt_dir: pathlib.Path, e: Exception) -> CheckpointWriteError:
    """The one-line error for a save of `step` into `ckpt_dir` that failed with `e`."""
    why = " ".join(str(e).split())
    why = why if len(why) <= 240 else why[:120] + " … " + why[-117:]  # the cause is at the end
    return CheckpointWriteError(
        f"checkpoint step {step} could not be written to {ckpt_dir} ({type(e).__name__}: "
        f"{why}); the steps saved before it are kept: free space and run the same command "
        "again to resume")


logging.getLogger("absl").addFilter(_DropSaveFailure())
