"""Multi-process set-up: `jax.distributed` from the submitit/Slurm environment, and agreement.

Outside a submitit job, or inside one with a single task, nothing is initialised. With several
tasks the coordinator is taken explicitly from `submitit.helpers.TorchDistributedEnvironment()`
(JAX's own Slurm auto-detection picks a coordinator port the tasks do not agree on, and jobs died
at the heartbeat timeout in the system this replaces). Only its attributes are read: in
submitit 1.5.4 `set_cuda_visible_devices` is an argument of `export()`, which would also rewrite
CUDA_VISIBLE_DEVICES per rank, and is not called. Which GPUs a process drives follows what Slurm
gave it (`slurm_env.local_device_ids`); a coordinator that resolves to a loopback address is refused when
the job spans hosts (`slurm_env.check_coordinator`).

JAX's own preemption service is turned off: its SIGTERM handler replaced the run's.

Failure modes (measured on CPU/gloo): a peer that dies makes the survivor's next collective raise
("Connection closed by peer"), and its exit then aborts in C++ (SIGABRT, status 134) when the
coordination service's shutdown barrier fails: ~10 s with a 15 s heartbeat timeout.
"""

import dataclasses
import logging
import os
import socket

import jax
import numpy as np

import birdjepa.config.cluster
import birdjepa.runtime.slurm_env as slurm_env

DistributedConfig = birdjepa.config.cluster.DistributedConfig

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Topology:
    process_index: int
    process_count: int
    coordinator: str | None
    """`host:port` of the coordinator, or None for a single process."""


SUBMITIT_MARKERS = ("SUBMITIT_EXECUTOR", "SUBMITIT_DEBUG_JOB_ID", "_TEST_CLUSTER_")
"""The variables one of which submitit's job environments need (submitit/core/plugins.py):
without them this is no submitit job."""


def _submitit_env():
    """The torch-style distributed environment of the current submitit job, or None. Outside a
    job submitit is not imported: its import runs `logging.config.dictConfig`, which closes
    every logging handler of the process (a notebook's, absl's and the stderr it writes to)."""
    if not any(k in os.environ for k in SUBMITIT_MARKERS):
        return None
    import submitit.helpers

    try:
        return submitit.helpers.TorchDistributedEnvironment()
    except RuntimeError:
        return None  # not inside a submitit job


def initialize(cfg: DistributedConfig) -> Topology:
    """Initialise `jax.distributed` when this is one task of several; idempotent."""
    env = _submitit_env()
    if env is None or env.world_size == 1:
        return Topology(process_index=0, process_count=1, coordinator=None)
    coordinator = f"{env.master_addr}:{env.master_port}"
    hosts = slurm_env.n_nodes(os.environ, default=env.world_size // max(env.local_world_size, 1))
    slurm_env.check_coordinator(env.master_addr, hosts,
                                coordinator_node=slurm_env.on_coordinator_host(os.environ))
    if not jax.distributed.is_initialized():
        logger.info("jax.distributed: rank %d of %d via %s", env.rank, env.world_size, coordinator)
        # JAX's preemption service installs a SIGTERM handler of its own over ours: the rank
        # that got SIGTERM logged "SIGTERM caught" and trained on (docs/issues/025-many-hosts).
        # Preemption here is our handlers and the stop vote at step boundaries.
        jax.config.update("jax_enable_preemption_service", False)
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=env.world_size,
            process_id=env.rank,
            initialization_timeout=cfg.init_timeout_s,
            heartbeat_timeout_seconds=cfg.heartbeat_timeout_s,
            shutdown_timeout_seconds=cfg.shutdown_timeout_s,
            local_device_ids=slurm_env.local_device_ids(os.environ),
        )
    if jax.process_count() != env.world_size or jax.process_index() != env.rank:
        raise RuntimeError(
            f"jax.distributed disagrees with submitit: expected process {env.rank} of "
            f"{env.world_size}, got {jax.process_index()} of {jax.process_count()}"
        )
    print(f"jax.distributed: process {env.rank} of {env.world_size} on {socket.gethostname()}, "
          f"coordinator {coordinator}; a process silent for {cfg.heartbeat_timeout_s} s "
          "(distributed.heartbeat_timeout_s) ends every process, and the next start resumes "
          "from the latest checkpoint", flush=True)
    return Topology(process_index=env.rank, process_count=env.world_size, coordinator=coordinator)


def shutdown() -> None:
    if jax.distributed.is_initialized():
        jax.distributed.shutdown()


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier `name` (no-op for one process)."""
    if jax.process_count() > 1:
        import jax.experimental.multihost_utils as mhu

        mhu.sync_global_devices(name)


def any_process(flag: bool) -> bool:
    """True on every process if `flag` is True on any process (a collective: call on all)."""
    if jax.process_count() == 1:
        return flag
    import jax.experimental.multihost_utils as mhu

    flags = mhu.process_allgather(np.asarray([flag], np.int32))
    return bool(np.asarray(flags).any())
