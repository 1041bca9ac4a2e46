"""What `python -m birdjepa.launch` takes: the launcher's settings (`LaunchConfig`, with its
Slurm settings `SlurmConfig`), declared once with a docstring each, and the error a bad sweep or
setting raises (`SweepError`, one line naming the entry and key)."""

import dataclasses
import typing


@dataclasses.dataclass(frozen=True)
class SlurmConfig:
    partition: str | None = None
    """Slurm partition (e.g. a preemptible one)."""
    account: str | None = None
    """Slurm account to charge."""
    qos: str | None = None
    """Slurm quality of service."""
    nodes: int = 1
    """Nodes per run; each node runs `tasks_per_node` JAX processes."""
    tasks_per_node: int = 1
    """JAX processes per node (one process can drive all of a node's GPUs)."""
    gpus_per_node: int = 0
    """GPUs per node."""
    gpu: str | None = None
    """GPU kind (h100, h200, a100-80g, l40s): with --dry_run, whether each entry fits one, read
    from the plan file (`plan`, written by `python -m benchmarks plan`); not sent to Slurm."""
    cpus_per_task: int | None = None
    """CPUs per task; default: loader workers (train + eval) + 2, or 16 with data.n_workers =
    "auto" (the loaders then use what the job gets)."""
    mem_gb: int = 16
    """Memory per node in GB."""
    signal_delay_s: int = 90
    """Seconds before the time limit at which USR2 is sent (`--signal=USR2@90`)."""
    max_num_timeout: int = 20
    """How many times a run may be requeued after a timeout or preemption."""
    setup: tuple[str, ...] = ()
    """Shell lines run before the job (e.g. `module load cuda`)."""
    array_parallelism: int = 64
    """Most array tasks running at once."""
    additional_parameters: str = "{}"
    """Extra sbatch parameters as a JSON object, e.g. '{"constraint": "a100"}'."""


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    sweep: str
    """Path to the sweep file (defines make_cfgs(), optionally BASE)."""
    executor: typing.Literal["slurm", "local"] = "slurm"
    """Where to run: a Slurm cluster, or local subprocesses."""
    n_hours: float = 4.0
    """Time limit per job in hours (requeued runs get a fresh limit)."""
    log_dir: str = "logs"
    """submitit's folder (scripts, stdout/stderr, pickles); one sub-folder per sweep."""
    dry_run: bool = False
    """Print the resolved configs, open every entry's train and eval shards (columns and labels
    against n_classes; no pipelines started) and submit nothing; exit 2 if a check fails."""
    max_parallel: int = 0
    """--executor local only: run at most this many of the sweep's runs at once, waiting for
    each group to end before the next starts, and return when all have ended, printing how each
    ended (1: one after another, as on a small machine). 0: start every run at once and return
    right after submitting. (Slurm: --slurm.array_parallelism.)"""
    entries: tuple[int, ...] = ()
    """Run only these entries of the sweep, by their index in make_cfgs() (repeat the flag:
    `--entries 3 --entries 5`); each keeps the run id it has in the whole sweep. Empty: all."""
    slurm: SlurmConfig = SlurmConfig()
    plan: str = "runs/gpu-plan.json"
    """Plan file that --dry_run reads with --slurm.gpu (rows of `python -m benchmarks plan`)."""


class SweepError(ValueError):
    pass
