"""Where a stored audio path points on this machine: the one resolver of the Python side, the
same rule as the Rust loader's (rust/src/shards/paths.rs `ReadOptions::resolve`; a parity test
runs the same cases through both):

1. `path_map` {stored prefix: local prefix} replaces leading path *components*: the longest
   matching key wins, trailing '/'s ignored; `{"/old/run1": NEW}` maps `/old/run1/x.wav` to
   `NEW/x.wav` and leaves `/old/run10/x.wav` alone. The key "/" maps every absolute path.
2. A relative path is joined to `audio_root`, or, when that is empty, to the directory of the
   shard that stores it.
"""

import os
from collections.abc import Mapping


def _strip_components(stored: str, prefix: str) -> str | None:
    """The rest of `stored` after the leading components `prefix` ("" or starting with "/"), or
    None when `prefix` is not a whole-component prefix of `stored`."""
    prefix = prefix.rstrip("/")
    if not prefix and not stored.startswith("/"):
        return None
    if not stored.startswith(prefix):
        return None
    rest = stored[len(prefix):]
    return rest if rest == "" or rest.startswith("/") else None


def map_path(stored: str, path_map: Mapping[str, str] | None) -> str:
    """`stored` with the longest matching `path_map` key's components replaced (see above)."""
    hits = [(len(k.rstrip("/")), k, v, rest) for k, v in (path_map or {}).items()
            if (rest := _strip_components(stored, k)) is not None]
    if not hits:
        return stored
    _, _, to, rest = max(hits)  # ties ("/a" and "/a/"): the greater key, as Rust's BTreeMap
    return to.rstrip("/") + rest


def resolve(stored: str, shard_dir: str, audio_root: str = "",
            path_map: Mapping[str, str] | None = None) -> str:
    """The file a row's stored audio path names: `path_map` applied, then a relative path joined
    to `audio_root` (or `shard_dir`, the directory of the shard that stores it)."""
    p = map_path(stored, path_map)
    return p if os.path.isabs(p) else os.path.join(audio_root or shard_dir, p)
