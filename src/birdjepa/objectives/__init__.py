"""Training objectives. Each is a module with a frozen-dataclass config and two functions:

- `init_heads(cfg, encoder, n_classes, *, key) -> eqx.Module`: the objective's trainable heads;
- `loss(cfg, encoder, heads, batch, *, key) -> (loss, metrics, emb_nd, target_n, weight_n)`:
  the scalar loss, a dict of scalar parts, and the pooled embeddings with their labels and
  weights for the online probe (views flattened view-major, N = V * B).
"""

import types
import typing

import birdjepa.config.losses
import birdjepa.objectives.lejepa as _lejepa
import birdjepa.objectives.mae as _mae
import birdjepa.objectives.probe_only as _probe_only
import birdjepa.objectives.supervised as _supervised

ObjectiveConfig = birdjepa.config.losses.ObjectiveConfig


MODULES: dict[str, types.ModuleType] = {
    "supervised": _supervised,
    "lejepa": _lejepa,
    "mae": _mae,
    "probe_only": _probe_only,
}


def get(cfg: ObjectiveConfig) -> tuple[types.ModuleType, typing.Any]:
    """The objective's module and its sub-config."""
    if cfg.name not in MODULES:
        raise ValueError(f"objective.name: expected one of {sorted(MODULES)}, got {cfg.name!r}")
    return MODULES[cfg.name], getattr(cfg, cfg.name)
