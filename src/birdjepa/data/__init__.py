"""Data: the deterministic loader (`loader`, settings in `config`), where shards come from
(`sources`), the audio transforms (`audio`, also `birdjepa.audio`), synthetic batches
(`synthetic`) and the shuffle-quality report (`quality`).

`import birdjepa.data` then `birdjepa.data.Loader(...)`: the names below are the public surface.
None of these modules imports JAX.
"""

import birdjepa.data.loader as loader
import birdjepa.data.loader_config as loader_config
import birdjepa.data.quality as quality
import birdjepa.data.sources as sources  # noqa: F401  (birdjepa.data.sources)

DEFAULT_MEAN = loader_config.DEFAULT_MEAN
DEFAULT_STD = loader_config.DEFAULT_STD
LoaderConfig = loader_config.LoaderConfig
Loader = loader.Loader
_DebugLoader = loader._DebugLoader
resolve_shards = loader.resolve_shards
check_labels = loader.check_labels
label_problem = loader.label_problem
shuffle_quality = quality.shuffle_quality

__all__ = ["DEFAULT_MEAN", "DEFAULT_STD", "Loader", "LoaderConfig", "check_labels",
           "label_problem", "resolve_shards", "shuffle_quality"]
