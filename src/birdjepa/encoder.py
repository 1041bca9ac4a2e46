"""The old import path of `birdjepa.load_encoder` (birdjepa.models.load_encoder: run
directories, exports and "bird-mae-base:WEIGHTS"), `load_config` and `restore_state`
(birdjepa.models.artifact). A plain re-export: the functions are defined there."""

from birdjepa.models import load_encoder
from birdjepa.models.artifact import load_config, restore_state

__all__ = ["load_config", "load_encoder", "restore_state"]
