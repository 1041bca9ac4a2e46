"""The destination directory of `python -m birdjepa.sources pack` (birdjepa.data.pack): its plan
(sources, row ranges and settings, fixed at the first run), the manifest of the shards it
finished, its lock, and the checks that keep a pack from writing over anything else."""

import fcntl
import hashlib
import json
import os
import threading

import birdjepa.common.errors as errors
import birdjepa.common.outputs as outputs
import birdjepa.data.loader_config as loader_config

PLAN = "pack-plan.json"
MANIFEST = "pack-manifest.json"
LOCK = "pack.lock"
FINAL = ("state.json", "dataset_info.json")


def packed_16bit_at(paths: list[str], sample_rate: int) -> bool:
    """Whether every shard of `paths` was written by a finished `pack --codec wav|flac
    --sample_rate SAMPLE_RATE` (its directory's plan lists it, with that codec and rate, and the
    manifest holds it): every recording that decodes is then 16-bit audio at `sample_rate`,
    exact as int16 (what device features carry from such a corpus)."""
    for path in paths:
        dst, name = os.path.split(os.path.abspath(path))
        try:
            with open(os.path.join(dst, PLAN)) as f:
                plan = json.load(f)
            with open(os.path.join(dst, MANIFEST)) as f:
                done = json.load(f)
        except (OSError, ValueError):
            return False
        if not (isinstance(plan, dict) and isinstance(done, dict) and name in done
                and name in plan.get("names", ()) and plan.get("codec") in ("wav", "flac")
                and plan.get("sample_rate") == sample_rate):
            return False
    return bool(paths)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


class Manifest:
    """DST/pack-manifest.json: {shard name: {"sha256", "size", "sources"}} of the shards pack
    finished; "sources" stamps what the shard was made from (`Source.stamp`)."""

    def __init__(self, dst: str):
        self.path = os.path.join(dst, MANIFEST)
        self.lock = threading.Lock()
        self.done: dict[str, dict] = {}
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.done = json.load(f)

    def add(self, name: str, tmp: str, sources: str, damaged: list | None = None) -> None:
        """Record the finished temporary file `tmp` as shard `name` (before it is renamed),
        made from sources stamped `sources`; `damaged`: [row in the shard, where and why] of
        its recordings whose data stopped early (re-encoded with what they held), kept as
        their mark."""
        entry = {"sha256": _sha256(tmp), "size": os.path.getsize(tmp), "sources": sources,
                 **({"damaged": damaged} if damaged else {})}
        with self.lock:
            self.done[name] = entry
            outputs.write_json(self.path, self.done)

    def holds(self, dst: str, name: str, sources: str) -> bool:
        """Whether DST/name is the shard pack wrote from the sources as they are now: listed,
        same size, same sha256, same source stamp (a manifest from before the stamp: no)."""
        want, path = self.done.get(name), os.path.join(dst, name)
        return (want is not None and want.get("sources") == sources and os.path.isfile(path)
                and os.path.getsize(path) == want["size"] and _sha256(path) == want["sha256"])


def plan_resampler(dst: str, resampler: str | None) -> str:
    """The filter of a pack into `dst`: `config.saved_resampler` against the plan of the pack
    being resumed there, or none (a new pack)."""
    path = os.path.join(dst, PLAN)
    if resampler is not None or not os.path.exists(path):
        return loader_config.saved_resampler(resampler, None)
    with open(path) as f:
        return loader_config.saved_resampler(None, json.load(f))


def check_plan(dst: str, want: dict) -> None:
    path = os.path.join(dst, PLAN)
    if not os.path.exists(path):
        return
    with open(path) as f:
        have = json.load(f)
    if have != want:
        diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        raise errors.BadArgumentError(
            f"bad argument dst: {dst} holds a pack of different sources or settings (differs in "
            f"{', '.join(diff)}); pack into another directory or delete it")


def refuse(msg: str):
    raise errors.BadArgumentError(f"bad argument dst: {msg}")


def check_dst(files: list[str], dst: str, names: list[str]) -> None:
    """DST apart from every source directory, and holding only files pack writes."""
    d = os.path.realpath(dst)
    for s in sorted({os.path.dirname(os.path.realpath(f)) for f in files}):
        if d == s or d.startswith(s + os.sep) or s.startswith(d + os.sep):
            rel = "is" if d == s else "is inside" if d.startswith(s + os.sep) else "contains"
            refuse(f"expected a directory apart from the source, got {dst}, which {rel} the "
                    f"source directory {s}")
    if not os.path.isdir(dst):
        return
    present = set(os.listdir(dst))
    ours = {PLAN, MANIFEST, LOCK, *FINAL, *names}
    if PLAN not in present:
        ours = {LOCK}  # no plan of ours: whatever is there was written by something else
    foreign = sorted(n for n in present - ours if outputs.original(n) not in ours)
    if foreign:
        refuse(f"expected an empty directory or one pack wrote, got {dst} holding "
                f"{len(foreign)} file(s) pack did not write ({', '.join(foreign[:3])}"
                f"{' ...' if len(foreign) > 3 else ''}); pack into another directory")


def lock(dst: str) -> int:
    """An exclusive flock on DST/pack.lock (released when the process ends)."""
    fd = os.open(os.path.join(dst, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        refuse(f"expected no other pack writing into {dst}, but one holds "
                f"{os.path.join(dst, LOCK)}; wait for it or pack into another directory")
    return fd
