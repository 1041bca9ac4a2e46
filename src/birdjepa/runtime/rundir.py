"""The run directory: its layout, its identity and who owns it. No JAX here, so the launcher and
notebooks can read a run directory cheaply. This module is the one place that spells the names
inside a run (tests/test_structure.py checks that no other module does):

    <run_dir>/run_id                    the run's id (the wandb id), kept across resumes
    <run_dir>/lock                      flock'ed by the process that trains in it (pid, host)
    <run_dir>/config.toml               the finalized config
    <run_dir>/metrics.jsonl             one JSON row per logged step
    <run_dir>/curves.png                the loss/accuracy plot
    <run_dir>/checkpoints/<step>/       Orbax steps (birdjepa.runtime.checkpoint)
    <run_dir>/checkpoints/<step>/birdjepa-integrity.json   the step's manifest (size, sha256)
    <run_dir>/checkpoints.old-<time>/   checkpoints set aside by resume="never"
    <run_dir>/COMPLETE                  written last, with the summary, once training finished

A checkpoint's identity is the sha256 of its manifest
(`birdjepa.runtime.integrity.checkpoint_digest`): evaluate's cache and exports name a step by it.
"""

import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import socket
import time

import birdjepa.common.outputs as outputs
import birdjepa.config
import birdjepa.config.identity as identity

COMPLETE = "COMPLETE"
"""Marker file written into a run directory when its training has finished."""
RUN_ID = "run_id"
LOCK = "lock"
CONFIG = "config.toml"
METRICS = "metrics.jsonl"
CURVES = "curves.png"
CHECKPOINTS = "checkpoints"
MANIFEST = "birdjepa-integrity.json"
"""The integrity manifest inside each step directory (written by birdjepa.runtime.integrity)."""


def config_file(run_dir: str | pathlib.Path) -> pathlib.Path:
    return pathlib.Path(run_dir) / CONFIG


def metrics_file(run_dir: str | pathlib.Path) -> pathlib.Path:
    return pathlib.Path(run_dir) / METRICS


def curves_file(run_dir: str | pathlib.Path) -> pathlib.Path:
    return pathlib.Path(run_dir) / CURVES


def checkpoints_dir(run_dir: str | pathlib.Path) -> pathlib.Path:
    return pathlib.Path(run_dir) / CHECKPOINTS


def step_dir(ckpt_dir: str | pathlib.Path, step: int) -> pathlib.Path:
    """The directory of checkpoint `step` inside a checkpoints directory."""
    return pathlib.Path(ckpt_dir) / str(step)


def old_checkpoints_dir(run_dir: str | pathlib.Path) -> pathlib.Path:
    """Where resume="never" moves a run's checkpoints (and their metrics) aside."""
    return pathlib.Path(run_dir) / f"{CHECKPOINTS}.old-{time.strftime('%Y%m%d-%H%M%S')}"


def is_run_dir(path: str | pathlib.Path) -> bool:
    """Whether `path` is a training run directory (its config.toml or checkpoints/)."""
    return config_file(path).is_file() or checkpoints_dir(path).is_dir()


def find_checkpoints(path: str | pathlib.Path) -> pathlib.Path:
    """The checkpoints directory of a run directory, or `path` itself (already one)."""
    ckpt = checkpoints_dir(path)
    return ckpt if ckpt.is_dir() else pathlib.Path(path)



class RunDirBusy(birdjepa.config.ConfigError):
    """Another live process trains in this run directory."""


ID_HEX = 16
"""Hex digits of a generated run id: 64 bits, so two configs sharing an id is no practical
worry (40-bit ids, before issue 30, collided for seeds 240427 and 417092 of one config)."""
OLD_ID_HEX = 10
"""Hex digits of the ids made before issue 30; runs/run-<10 hex> directories are still found."""


def default_run_id(cfg: birdjepa.config.Config) -> str:
    """A stable id from the config keys that shape the run: the same command finds the same
    run directory (runs/<id>) again (and resumes it), another seed or model gets another one."""
    d = dataclasses.asdict(dataclasses.replace(cfg, run_id="", run_dir=""))
    return "run-" + identity.config_hash(d)[:ID_HEX]


def default_run_dir(run_id: str) -> str:
    """runs/<run_id>, or the runs/<old 40-bit id> directory of the same config made before the
    ids grew to 64 bits (its id is a prefix of the new one)."""
    old = f"runs/{run_id[:len('run-') + OLD_ID_HEX]}"
    if not pathlib.Path(f"runs/{run_id}").exists() and pathlib.Path(old).is_dir():
        return old
    return f"runs/{run_id}"


def dir_run_id(cfg: birdjepa.config.Config, run_dir: str) -> str:
    """The id of a new run in an explicit `run_dir`: the config's and the directory's absolute
    path's hash, so two directories never share an id (even with one config)."""
    d = dataclasses.asdict(dataclasses.replace(cfg, run_id="", run_dir=""))
    blob = identity.config_hash(d) + os.path.abspath(run_dir)
    return "run-" + hashlib.sha256(blob.encode()).hexdigest()[:ID_HEX]


def kept_run_id(run_dir: str | pathlib.Path) -> str:
    """The id kept in run_dir/run_id, or "" if there is none."""
    kept = pathlib.Path(run_dir) / RUN_ID
    return kept.read_text().strip() if kept.is_file() else ""


def assign(cfg: birdjepa.config.Config) -> birdjepa.config.Config:
    """`cfg` with run_id and run_dir filled. A run directory's id is created once, with the
    directory, and kept in it (run_dir/run_id; wandb's id is the same):
    - run_dir given: the id kept there; else an explicit run_id; else `dir_run_id` (never the
      id of another directory). An explicit run_id other than the kept one is refused.
    - run_dir empty: runs/<run_id>, run_id explicit or `default_run_id` (the same command finds
      the same directory; a directory made under a 40-bit id is still found)."""
    if not cfg.run_dir:
        if cfg.run_id:
            return dataclasses.replace(cfg, run_dir=f"runs/{cfg.run_id}")
        run_dir = default_run_dir(default_run_id(cfg))
        return dataclasses.replace(cfg, run_id=kept_run_id(run_dir) or default_run_id(cfg),
                                   run_dir=run_dir)
    kept = kept_run_id(cfg.run_dir)
    if kept and cfg.run_id and cfg.run_id != kept:
        raise birdjepa.config.ConfigError(
            f"run_id: expected {kept!r} (kept in {pathlib.Path(cfg.run_dir) / RUN_ID}: a run "
            f"directory keeps its id) or nothing, got {cfg.run_id!r}; use another --run_dir")
    run_id = kept or cfg.run_id or dir_run_id(cfg, cfg.run_dir)
    return dataclasses.replace(cfg, run_id=run_id)


def enclosing_run_dir(path: str | pathlib.Path) -> pathlib.Path | None:
    """The run directory that `path` is or lies inside (resolved), or None."""
    p = pathlib.Path(path).resolve()
    return next((q for q in (p, *p.parents) if is_run_dir(q)), None)


def keep_run_id(run_dir: pathlib.Path, run_id: str) -> None:
    (run_dir / RUN_ID).write_text(run_id + "\n")


def read_complete(run_dir: str | pathlib.Path) -> dict | None:
    """The summary in run_dir/COMPLETE, written only when training finished; None if absent."""
    path = pathlib.Path(run_dir) / COMPLETE
    if not path.exists():
        return None
    text = path.read_text().strip()
    return json.loads(text) if text else {"steps": None}


def is_complete(run_dir: str | pathlib.Path) -> bool:
    return (pathlib.Path(run_dir) / COMPLETE).exists()


def mark_complete(run_dir: pathlib.Path, summary: dict) -> None:
    """Written last, after the final checkpoint committed (birdjepa.common.outputs: beside, then
    renamed into place)."""
    outputs.write_json(run_dir / COMPLETE, summary)


def clear_complete(run_dir: pathlib.Path) -> None:
    (run_dir / COMPLETE).unlink(missing_ok=True)


def holder(run_dir: str | os.PathLike) -> str | None:
    """Who trains in `run_dir` now: its lock's holder ("pid N on host H") while a live process
    holds it, else None (no lock file: nothing is created). What a launcher asks before
    starting a run a killed launcher left training."""
    path = pathlib.Path(run_dir) / LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)  # our own flock, if taken, goes with it
    return None


class Lock:
    """An exclusive `flock` on run_dir/lock, held while a process trains there. The kernel
    releases it when the process dies, so a requeued job gets it back once the old one is gone;
    a second live run is refused at once, naming the holder's pid and host."""

    def __init__(self, run_dir: pathlib.Path):
        self.path = run_dir / LOCK
        self._fd: int | None = None

    def acquire(self) -> "Lock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirBusy(
                f"run_dir {self.path.parent}: expected no other run in it, but one holds "
                f"{self.path} ({holder}); stop it or use another --run_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
