"""`DistributedConfig`: `jax.distributed` timeouts as plain data (birdjepa.runtime.distributed
uses them)."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    init_timeout_s: int = 300
    """Seconds to wait for every process to reach the coordinator."""
    heartbeat_timeout_s: int = 120
    """Seconds without a heartbeat before a peer counts as dead and the survivors abort."""
    shutdown_timeout_s: int = 60
    """Seconds a process waits at exit for its peers (JAX's default of 300 s hides failures)."""
