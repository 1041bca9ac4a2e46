"""Where a stored audio path points on this machine: the one resolver of the Python side, the
same rule as the Rust loader's (rust/src/shards/paths.rs `ReadOptions::resolve`; a parity test
runs the same cases through both):

1. `path_map` {stored prefix: local prefix} replaces leading path *components*: the longest
   matching key wins, trailing '/'s ignored; `{"/old/run1": NEW}` maps `/old/run1/x.wav` to
   `NEW/x.wav` and leaves `/old/run10/x.wav` alone. The key "/" maps every absolute path.
2. A relative path is joined to `audio_root`, or, when that is empty, to the directory of the
   shard that stores it.

Reading the file a path names (`read_file`, `open_regular`, `check_file`: every Python reader of
path-only audio, i.e. pack, embed, predict and evaluate, goes through them) follows the Rust
loader's rule too: only a regular file of at most `max_audio_mb` MB is read; a FIFO, a device
(/dev/zero) or a directory is a one-line birdjepa.DatasetError at once, never a hang.
"""

import io
import json
import os
from collections.abc import Mapping

import birdjepa._rs
import birdjepa.common.errors as errors


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


# -- reading the file a path names: regular files only, bounded -------------------------------

MAX_AUDIO_MB: float = json.loads(birdjepa._rs.loader_config_defaults())["max_audio_mb"]
"""Default bound of one path-only audio file, MB (10^6 bytes): the loader's max_audio_mb
default, declared in rust/src/loader/config.rs."""


def utf8_named(paths: list) -> tuple[list, list[bytes]]:
    """(the paths whose names are UTF-8, the other names as bytes). Linux names are bytes; one
    that is not UTF-8 (Latin-1 `caf\\xe9.wav` from an old recorder card) reaches Python with
    surrogate escapes, and no table, log or Rust string can hold it: its file is skipped by
    name (`not_utf8_words`), never a codec error that stops a whole command."""
    ok, bad = [], []
    for p in paths:
        try:
            os.fspath(p).encode("utf-8")
        except UnicodeEncodeError:
            bad.append(os.fsencode(p))
        else:
            ok.append(p)
    return ok, bad


def not_utf8_words(bad: list[bytes]) -> str:
    """The one line that names the files `utf8_named` set aside."""
    return (f"skipped {len(bad)} file(s) whose name is not UTF-8 (first: {bad[0]!r}); rename "
            "them to read them (e.g. `convmv -f latin1 -t utf8 --notest`)")


def kind_of(st: os.stat_result) -> str:
    """What a file that is not a regular file is, in words ("a FIFO (named pipe)", ...): the
    loader's rule and words, asked of it (rust/src/shards/audio_file.rs `file_kind`)."""
    return birdjepa._rs.file_kind(st.st_mode) or "a regular file"


def usable(path: str | os.PathLike, st: os.stat_result,
           max_audio_mb: float = MAX_AUDIO_MB) -> None:
    """Nothing if `st` (of `path`) is a regular file of at most `max_audio_mb` MB (<= 0: no
    bound), else a one-line birdjepa.DatasetError naming the file: the Rust loader's rule and
    words, asked of it (rust/src/shards/audio_file.rs `check_audio_file`: a FIFO, a device or a
    directory is never read)."""
    birdjepa._rs.check_audio_file(path, st.st_mode, st.st_size, max_audio_mb)


def check_file(path: str | os.PathLike, max_audio_mb: float = MAX_AUDIO_MB) -> int:
    """The size of the audio file at `path` without opening it (stat only: a FIFO cannot
    block); FileNotFoundError (an OSError) if it is missing, `usable`'s DatasetError if it is
    not a regular file or too large."""
    st = os.stat(path)
    usable(path, st, max_audio_mb)
    return st.st_size


def open_regular(path: str | os.PathLike, max_audio_mb: float = MAX_AUDIO_MB
              ) -> tuple[io.FileIO, int]:
    """(unbuffered file, size) of a `usable` audio file: opened without blocking (a FIFO with
    no writer would block a plain open) and checked with fstat before a byte is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        usable(path, st, max_audio_mb)
        os.set_blocking(fd, True)
        return io.FileIO(fd, "rb", closefd=True), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | os.PathLike, max_audio_mb: float = MAX_AUDIO_MB) -> bytes:
    """The bytes of the audio file at `path` (`open_regular`'s checks); never more than the size
    fstat gave: a file that grows or shrinks while it is read is a DatasetError."""
    f, size = open_regular(path, max_audio_mb)
    with f:
        data = f.read(size + 1)
    if len(data) != size:
        raise errors.DatasetError(f"{os.fspath(path)}: the file changed while it was read "
                                        f"({size} bytes at open, {len(data)} read)")
    return data
