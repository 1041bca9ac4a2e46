"""The one rule for writing an output file: into a temporary file beside it, then renamed over
it. A write that fails (a full disk, a quota, Ctrl-C) removes its temporary file and leaves an
existing file as it was; a reader never sees half a file. No birdjepa imports: every layer
that writes files uses it.
"""

import contextlib
import json
import os
import pathlib
import re
from collections.abc import Iterator


def temporary(path: str | os.PathLike) -> pathlib.Path:
    """The temporary name of `path` while it is written: hidden, beside it (the same file
    system, so the rename is atomic), and one per process."""
    path = pathlib.Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def original(name: str) -> str | None:
    """The file name whose `temporary` name `name` is, or None (a process killed while writing
    leaves one; a later run of the same command may remove it)."""
    m = re.fullmatch(r"\.(.+)\.\d+\.tmp", name)
    return m.group(1) if m else None


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[pathlib.Path]:
    """`with replacing(p) as tmp:` write `tmp`; on leaving the block `tmp` is renamed to `p`,
    or removed if the block raised."""
    tmp = temporary(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj, **dumps) -> None:
    """`json.dumps(obj, **dumps)` written by `write_text`; the text is made before the file is
    touched, so an unserialisable value leaves nothing behind."""
    write_text(path, json.dumps(obj, **dumps))
