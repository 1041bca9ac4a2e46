"""Launching, the floor above training: `sweep` (a sweep file -> one run per config, on Slurm or
local processes; `python -m birdjepa.launch --sweep FILE`), `job` (`TrainingJob`, the submitit
job that runs `birdjepa.train.loop.main` and requeues itself on preemption) and `gpuplan` (will a
config fit a GPU kind, read by `--dry_run`). Nothing below imports this package; it imports no
JAX until a job runs on its node (tests/test_structure.py checks both)."""

from birdjepa.launch.dry_run import check_shards
from birdjepa.launch.launch_config import LaunchConfig, SlurmConfig, SweepError
from birdjepa.launch.sweep import (
    is_complete,
    launch,
    load_sweep,
    make_executor,
    resolve,
    run_id_for,
)

__all__ = ["LaunchConfig", "SlurmConfig", "SweepError", "check_shards", "is_complete", "launch",
           "load_sweep", "make_executor", "resolve", "run_id_for"]
