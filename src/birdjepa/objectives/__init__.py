"""Training objectives. Each is a module with a frozen-dataclass config and two functions:

- `init_heads(cfg, encoder, n_classes, *, key) -> eqx.Module`: the objective's trainable heads;
- `loss(cfg, encoder, heads, batch, *, key) -> (loss, metrics, emb_nd, target_n, weight_n)`:
  the scalar loss, a dict of scalar parts, and the pooled embeddings with their labels and
  weights for the online probe (views flattened view-major, N = V * B).
"""

import types
import typing

import birdjepa.config.losses
import birdjepa.objectives.lejepa as lejepa
import birdjepa.objectives.mae as mae
import birdjepa.objectives.probe_only as probe_only
import birdjepa.objectives.supervised as supervised

ObjectiveConfig = birdjepa.config.losses.ObjectiveConfig


MODULES: dict[str, types.ModuleType] = {
    "supervised": supervised,
    "lejepa": lejepa,
    "mae": mae,
    "probe_only": probe_only,
}


def get(cfg: ObjectiveConfig) -> tuple[types.ModuleType, typing.Any]:
    """The objective's module and its sub-config."""
    if cfg.name not in MODULES:
        raise ValueError(f"objective.name: expected one of {sorted(MODULES)}, got {cfg.name!r}")
    return MODULES[cfg.name], getattr(cfg, cfg.name)
