"""The one rule for writing an output file or directory: into a temporary one beside it, then
renamed over it (`replacing`, `replacing_dir`). A write that fails (a full disk, a quota,
Ctrl-C) removes its temporary and leaves what existed as it was; a reader never sees half a file
or a directory without its last file. Every temporary is named by `temporary`, so `original`
knows each one a killed process left. No birdjepa imports: every layer that writes files uses
it.

And the one rule for knowing a file is ours to replace: a command that may replace its own
outputs later `record`s each one in a ledger beside it (LEDGER: name, size, sha256), and a file
is `ours` only while it is listed there unchanged. A file a user wrote, a copy, or one of ours
that a user has since edited (a reviewed table) is not.
"""

import contextlib
import glob
import hashlib
import json
import os
import pathlib
import re
import shutil
from collections.abc import Iterator


def temporary(path: str | os.PathLike) -> pathlib.Path:
    """The temporary name of `path` while it is written: hidden, beside it (the same file
    system, so the rename is atomic), and one per process."""
    path = pathlib.Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def aside(path: str | os.PathLike) -> pathlib.Path:
    """The name `replacing_dir` gives an existing output while it renames the new one in: hidden,
    beside it, one per process."""
    path = pathlib.Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.old")


def original(name: str) -> str | None:
    """The file name whose `temporary` or `aside` name `name` is, or None (a process killed
    while writing leaves one; a later run of the same command may remove it)."""
    m = re.fullmatch(r"\.(.+)\.\d+\.(?:tmp|old)", name)
    return m.group(1) if m else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def recover(path: str | os.PathLike) -> None:
    """Undo what a process killed inside `replacing_dir(path)` left: an output set `aside` but
    never replaced (`path` missing) is renamed back; one that was replaced is removed. Those
    of a live process are its own business."""
    path = pathlib.Path(path)
    if not path.parent.is_dir():
        return
    for old in sorted(path.parent.glob(f".{glob.escape(path.name)}.*.old")):
        pid = old.name.removeprefix(f".{path.name}.").removesuffix(".old")
        if original(old.name) != path.name or not pid.isdigit() or _alive(int(pid)):
            continue
        if not os.path.lexists(path):
            os.rename(old, path)
        else:
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()


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


@contextlib.contextmanager
def replacing_dir(path: str | os.PathLike, *, last: str | None = None
                  ) -> Iterator[pathlib.Path]:
    """`with replacing_dir(d) as tmp:` write the directory's files into `tmp`; on leaving the
    block they become `d`, or `tmp` is removed if the block raised.
    - `d` missing: `tmp` (beside it) is renamed to `d`.
    - `d` an empty directory (a link to one, the shell's `.`): `tmp` is made inside it and its
      files are moved up, `last` (the file a reader opens the directory by) last, so that the
      directory itself stays what it is.
    - anything else at `d` (its caller has checked that it may go): `d` is renamed `aside`,
      `tmp` renamed to `d`, and the old one removed. A process killed between those renames
      leaves `d` aside: the next `replacing_dir(d)` puts it back first (`recover`)."""
    path = pathlib.Path(os.path.abspath(path))  # `.` has no name of its own
    recover(path)
    inside = path.is_dir() and not any(path.iterdir())
    tmp = path / temporary(path).name if inside else temporary(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if inside:
            for name in sorted(os.listdir(tmp), key=lambda n: n == last):
                os.rename(tmp / name, path / name)
        elif os.path.lexists(path):
            old = aside(path)
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
        else:
            os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj, **dumps) -> None:
    """`json.dumps(obj, **dumps)` written by `write_text`; the text is made before the file is
    touched, so an unserialisable value leaves nothing behind."""
    write_text(path, json.dumps(obj, **dumps))


LEDGER = ".birdjepa-outputs.json"
"""Beside a command's outputs: {file name: {"size", "sha256"}} of each file it wrote there."""


def _digest(path: pathlib.Path) -> dict:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return {"size": path.stat().st_size, "sha256": h.hexdigest()}


def _ledger(directory: pathlib.Path) -> dict:
    try:
        with open(directory / LEDGER) as f:
            entries = json.load(f)
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def record(*paths: str | os.PathLike) -> None:
    """Add each file of `paths` (just written, regular files) to its directory's ledger, with
    its size and sha256 as they are now."""
    by_dir: dict[pathlib.Path, list[pathlib.Path]] = {}
    for p in map(pathlib.Path, paths):
        by_dir.setdefault(p.absolute().parent, []).append(p)
    for directory, files in by_dir.items():
        entries = _ledger(directory)
        entries.update({p.name: _digest(p) for p in files})
        write_json(directory / LEDGER, entries, indent=1, sort_keys=True)


def ours(path: str | os.PathLike) -> bool:
    """Whether `path` is a regular file its directory's ledger lists with its present size and
    sha256: written by the command that recorded it and unchanged since."""
    path = pathlib.Path(path)
    want = _ledger(path.absolute().parent).get(path.name)
    if not isinstance(want, dict) or not path.is_file():
        return False
    return path.stat().st_size == want.get("size") and _digest(path) == want
