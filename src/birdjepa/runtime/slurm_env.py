"""What Slurm gave this task, read from the environment alone (no JAX: the launcher imports
it): tasks on the node, the GPUs the task drives, and whether a coordinator address can serve a
job that spans hosts. birdjepa.runtime.distributed applies them at start."""

import ipaddress
import socket
from collections.abc import Mapping


class SlurmEnvError(RuntimeError):
    """What Slurm gave this task cannot work (GPUs that do not divide over the node's tasks, a
    coordinator this host cannot reach): reported in one line at start."""


def _gpu_list(value: str | None) -> list[str] | None:
    """A CUDA_VISIBLE_DEVICES / SLURM_STEP_GPUS value as its entries (None: unset or empty)."""
    items = [v.strip() for v in (value or "").split(",") if v.strip()]
    return items or None


def tasks_on_node(environ: Mapping[str, str]) -> int:
    """Tasks of this step on this node: SLURM_STEP_TASKS_PER_NODE ("2(x3)" or "2,1", this
    node's entry by SLURM_NODEID), else SLURM_NTASKS_PER_NODE, else 1."""
    spec = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    if spec:
        counts = []
        for part in spec.split(","):
            n, _, rep = part.partition("(x")
            counts += [int(n)] * (int(rep.rstrip(")")) if rep else 1)
        node = int(environ.get("SLURM_NODEID", "0"))
        return counts[min(node, len(counts) - 1)]
    return int(environ.get("SLURM_NTASKS_PER_NODE", "1"))


def local_device_ids(environ: Mapping[str, str]) -> list[int] | None:
    """The device ordinals (as this process numbers its visible GPUs) that this Slurm task
    drives, for `jax.distributed.initialize(local_device_ids=...)`; None: every visible one.

    * One task on the node: None.
    * CUDA_VISIBLE_DEVICES narrower than the step's GPUs on the node (SLURM_STEP_GPUS; Slurm
      bound GPUs to tasks, `--gpus-per-task`): the task owns what it sees, ordinals 0..k-1 (CUDA
      numbers visible devices from 0, whatever their physical ids, e.g. GPUs 2,3 -> [0, 1]).
    * Every GPU of the node visible to every task (CUDA_VISIBLE_DEVICES the step's whole set,
      or no SLURM_STEP_GPUS to compare with; or only SLURM_STEP_GPUS set): an equal share by
      SLURM_LOCALID, e.g. 4 GPUs, 2 tasks, local task 1 -> [2, 3];
      GPUs that do not divide evenly over the tasks are a SlurmEnvError naming both counts."""
    n_tasks = tasks_on_node(environ)
    if n_tasks <= 1:
        return None
    visible = _gpu_list(environ.get("CUDA_VISIBLE_DEVICES"))
    step = _gpu_list(environ.get("SLURM_STEP_GPUS")) or _gpu_list(environ.get("SLURM_JOB_GPUS"))
    if visible is not None and step is not None and len(visible) < len(step):
        return list(range(len(visible)))
    gpus = visible or step
    if gpus is None:
        return None  # no GPUs named: CPU processes, nothing to split
    if len(gpus) % n_tasks:
        raise SlurmEnvError(f"GPUs per task: expected the node's {len(gpus)} GPUs ({','.join(gpus)}) "
                         f"to divide evenly over its {n_tasks} tasks, got a remainder of "
                         f"{len(gpus) % n_tasks}; ask Slurm for --gpus-per-task")
    k = len(gpus) // n_tasks
    local = int(environ.get("SLURM_LOCALID", "0"))
    return list(range(local * k, (local + 1) * k))


def on_coordinator_host(environ: Mapping[str, str]) -> bool:
    """Whether this task runs on the coordinator's host: the first host of
    SLURM_JOB_NODELIST, Slurm's node 0 (SLURM_NODEID), whatever the task distribution (a
    rank's number says nothing of its host under --distribution=cyclic)."""
    return int(environ.get("SLURM_NODEID", "0")) == 0


def n_nodes(environ: Mapping[str, str], *, default: int) -> int:
    """The job's hosts (SLURM_JOB_NUM_NODES, else SLURM_NNODES), or `default` outside Slurm."""
    value = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
    return int(value) if value else default


def check_coordinator(address: str, n_nodes: int, *, coordinator_node: bool) -> None:
    """Refuse, on a host other than the coordinator's (`coordinator_node` False) of a job that
    spans `n_nodes` > 1 hosts, a coordinator name that resolves to a loopback address there: this
    process would wait on a coordinator of its own until the start times out. On the
    coordinator's own host loopback reaches it (the service listens on every interface; a Debian
    /etc/hosts maps the machine's own name to 127.0.1.1, and that works:
    docs/issues/025-many-hosts)."""
    if n_nodes <= 1 or coordinator_node:
        return
    try:
        resolved = socket.gethostbyname(address)
    except OSError as e:
        raise SlurmEnvError(f"coordinator {address!r}: cannot be resolved ({e}); every host "
                           "must reach the first host of SLURM_JOB_NODELIST") from None
    if ipaddress.ip_address(resolved).is_loopback:
        raise SlurmEnvError(f"coordinator {address!r}: expected the address of the job's first "
                           f"host (of {n_nodes}), got loopback {resolved} on this host, "
                           f"{socket.gethostname()}; map the name to that host's network "
                           "address (/etc/hosts, DNS)")
