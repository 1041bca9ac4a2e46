"""What makes a checkpoint step intact: its integrity manifest (size and sha256 of every file,
`birdjepa.runtime.rundir.MANIFEST` in the step directory), finite arrays, readable metadata; and
`IntactSteps`, the half of `birdjepa.runtime.checkpoint.Checkpointer` that finds the newest
intact step and sets corrupt ones aside. The design is described in birdjepa.runtime.checkpoint.

`checkpoint_digest(run_dir, step)` is a checkpoint's identity: the sha256 of its manifest.
Evaluate's embedding cache and exports name a step by it.
"""

import gc
import hashlib
import inspect
import json
import logging
import os
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

import birdjepa.common.outputs as outputs
import birdjepa.runtime.distributed
import birdjepa.runtime.rundir as rundir

logger = logging.getLogger("birdjepa.runtime.checkpoint")

_REWRITTEN = frozenset({"_CHECKPOINT_METADATA", "commit_success.txt", rundir.MANIFEST})
VERIFIED, UNVERIFIED, CORRUPT = 0, 1, 2
WRITES_MANIFEST = "birdjepa_integrity_manifest"
"""Key of the `meta` item: set (to the manifest version) by every save of this version."""


class CorruptCheckpointError(RuntimeError):
    """A requested step is corrupt, or no intact step remains in a checkpoint directory."""


class NonFiniteStateError(ValueError):
    """`save` was given a state with NaN or infinite values."""


class Corrupt(Exception):
    """Internal: a step failed a check (the message is the one-line reason)."""


def one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _sha256(path: pathlib.Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def hash_files(step_dir: pathlib.Path) -> dict[str, list]:
    """{relative path: [size, sha256]} of the files of a step, Orbax's rewritten ones excepted."""
    paths = {p.relative_to(step_dir).as_posix(): p for p in step_dir.rglob("*") if p.is_file()}
    return {rel: [p.stat().st_size, _sha256(p)] for rel, p in sorted(paths.items())
            if rel not in _REWRITTEN}




def digest(step_dir: pathlib.Path) -> str:
    """The content identity of a step directory: its manifest's sha256 (a step written before
    manifests existed: the sha256 of its files' hashes, computed here)."""
    manifest = step_dir / rundir.MANIFEST
    if manifest.is_file():
        return hashlib.sha256(manifest.read_bytes()).hexdigest()
    blob = json.dumps(hash_files(step_dir), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def checkpoint_digest(run_dir: str | pathlib.Path, step: int) -> str:
    """The identity of checkpoint `step` of the run in `run_dir` (see `digest`)."""
    return digest(rundir.step_dir(rundir.checkpoints_dir(run_dir), step))


def write_manifest(step_dir: pathlib.Path) -> None:
    """Hash the step's files into `step_dir/birdjepa-integrity.json` (birdjepa.common.outputs)."""
    outputs.write_json(step_dir / rundir.MANIFEST, {"version": 1, "files": hash_files(step_dir)},
                       indent=0, sort_keys=True)


def check_files(step_dir: pathlib.Path) -> tuple[int, str]:
    """(verdict, reason): files against the manifest; `UNVERIFIED` when there is none."""
    path = step_dir / rundir.MANIFEST
    if not path.exists():
        return (UNVERIFIED, "no integrity manifest") if step_dir.is_dir() else (
            CORRUPT, "step directory vanished")
    try:
        files = sorted(json.loads(path.read_text())["files"].items())
        files = [(rel, int(size), str(digest)) for rel, (size, digest) in files]
    except Exception as e:
        return CORRUPT, f"unreadable {rundir.MANIFEST}: {type(e).__name__}"
    for rel, size, digest in files:
        f = step_dir / rel
        if not f.is_file():
            return CORRUPT, f"{rel} is missing"
        if f.stat().st_size != size:
            return CORRUPT, f"{rel} has {f.stat().st_size} bytes, {size} were saved"
        if _sha256(f) != digest:
            return CORRUPT, f"sha256 mismatch in {rel}"
    return (VERIFIED, "sha256 verified") if files else (CORRUPT, f"empty {rundir.MANIFEST}")


@jax.jit
def _finite_flags(leaves):
    return jnp.stack([jnp.isfinite(x).all() for x in leaves])


def nonfinite_leaf(tree) -> str | None:
    """The path of the first float leaf of `tree` with a NaN or inf, or None (one device call)."""
    paths, leaves = [], []
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact):
            paths.append(path)
            leaves.append(x)
    flags = np.asarray(_finite_flags(leaves)) if leaves else []
    bad = [jax.tree_util.keystr(p) for p, ok in zip(paths, flags, strict=True) if not ok]
    return bad[0] if bad else None


def all_finite(tree) -> bool:
    """Whether every float leaf of `tree` is finite (a jitted reduction; a collective)."""
    return nonfinite_leaf(tree) is None


def same_shapes(state_dir: pathlib.Path, state_like) -> bool:
    """Whether the saved arrays have `state_like`'s shapes (True if unreadable: then a failed
    restore is the checkpoint's fault, not the caller's)."""
    try:
        md = ocp.StandardCheckpointHandler().metadata(state_dir)
        saved = sorted(tuple(x.shape) for x in jax.tree.leaves(getattr(md, "tree", md)))
    except Exception:
        return True
    keys = jax.dtypes.prng_key
    like = [jax.eval_shape(jax.random.key_data, x) if jnp.issubdtype(x.dtype, keys) else x
            for x in jax.tree.leaves(state_like)]
    return saved == sorted(tuple(x.shape) for x in like)


def quiet_closed_loop() -> None:
    """After a failed read, tensorstore's callbacks reach Orbax's closed per-call asyncio loop
    and Python prints "Event loop is closed" tracebacks, harmless and misleading: drop exactly
    those (every other unraisable exception goes to the previous hook) until the Checkpointer
    closes (`loud_closed_loop`), so no stale hook outlives it."""
    previous = sys.unraisablehook
    if not getattr(previous, "birdjepa_quiet", False):
        def hook(args):
            if repr(args.exc_value) != "RuntimeError('Event loop is closed')":
                previous(args)
        hook.birdjepa_quiet = True
        hook.previous = previous
        sys.unraisablehook = hook


def loud_closed_loop() -> None:
    current = sys.unraisablehook
    if getattr(current, "birdjepa_quiet", False):
        sys.unraisablehook = current.previous


class _FailedReadEchoes(logging.Filter):
    """A failed read leaves Orbax's sibling read tasks and futures holding errors about the same
    step, never retrieved. asyncio logs each one, traceback and all, whenever it is finalised:
    later, under another message, maybe from another thread, and (CPython 3.11 formats
    tracebacks with `ast.parse`, whose depth counter is one per interpreter) maybe inside someone
    else's `ast.parse`, which then fails: "AST constructor recursion depth mismatch" (seen in
    CI). This filter, on the asyncio logger once a read has failed, drops exactly the records
    whose error names a step directory already reported as unreadable."""

    def __init__(self):
        super().__init__()
        self.step_dirs: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if "exception was never retrieved" not in str(record.msg) or not record.exc_info:
            return True
        text = str(record.exc_info[1])
        return not any(d in text for d in self.step_dirs)


_ECHOES = _FailedReadEchoes()


def collect_failed_reads() -> None:
    """Orbax's suspended read coroutines of a failed read: closed by the collector, they raise
    from `GeneratorExit`, printed as unraisable exceptions (tracebacks again). The failed read's
    exception reaches them through its traceback's frames, so once it is gone (the step reported
    once as corrupt), collect them here and drop exactly those."""
    previous = sys.unraisablehook

    def hook(args):
        if not _orbax_coroutine(args.object):
            previous(args)

    sys.unraisablehook = hook
    try:
        gc.collect()
    finally:
        sys.unraisablehook = previous


def _orbax_coroutine(obj) -> bool:
    return inspect.iscoroutine(obj) and f"{os.sep}orbax{os.sep}" in obj.cr_code.co_filename


def unreadable(e: Exception, step_dir: pathlib.Path, what: str = "unreadable") -> Corrupt:
    """The `Corrupt` for a step whose read raised `e`; what is left of that read stays quiet."""
    quiet_closed_loop()
    _ECHOES.step_dirs.add(f"{step_dir}{os.sep}")
    logging.getLogger("asyncio").addFilter(_ECHOES)  # once: addFilter keeps no duplicates
    return Corrupt(f"{what}: {type(e).__name__}: {one_line(e, 100)}")


def _broadcast(value: int) -> int:
    """Process 0's `value` on every process (a collective)."""
    if jax.process_count() == 1:
        return value
    import jax.experimental.multihost_utils as mhu

    return int(mhu.broadcast_one_to_all(np.int32(value)))


def agreed(fn):
    """fn(), re-raising its exception; a failure on any process fails every process."""
    try:
        out, err = fn(), None
    except Exception as e:
        out, err = None, e
    if birdjepa.runtime.distributed.any_process(err is not None):
        raise err if err is not None else RuntimeError("failed on another process")
    return out


class IntactSteps:
    """Which steps of a checkpoint directory are intact: verdicts on steps (agreed by every
    process), the newest intact step, setting corrupt ones aside. A Checkpointer holds one over
    its `ocp.CheckpointManager`; everything it reads is its own."""

    def __init__(self, mngr: ocp.CheckpointManager, ckpt_dir: pathlib.Path, *, read_only: bool):
        self.mngr, self.ckpt_dir, self.read_only = mngr, ckpt_dir, read_only
        self.verified: set[int] = set()  # process 0: steps known to match their manifest
        self._agreed_ok: set[int] = set()  # the same, as agreed by every process
        self._corrupt: dict[int, str] = {}  # read-only: corrupt steps left in place, and why

    def first_intact(self, load):
        """(step, load(step, verified)) for the newest step that passes every check, setting
        aside the corrupt ones on the way; (None, None) when there are no steps."""
        rejected, new = [], []
        for step in sorted(self.mngr.all_steps(), reverse=True):
            if step in self._corrupt:  # read-only: found before, already named
                rejected.append((step, self._corrupt[step], None))
                continue
            try:
                out = self.check(step, load)
            except Corrupt as e:
                rejected.append((step, str(e), self.set_aside(step, str(e))))
                new.append(rejected[-1])
                continue
            if new:
                collect_failed_reads()  # now that the failed reads' exceptions are gone
            if jax.process_index() == 0:
                for s, reason, where in new:
                    logger.warning(self.line(s, reason, where, f"; falling back to step {step}"))
            return step, out
        if not rejected:
            return None, None
        if new:
            collect_failed_reads()
        tried = "; ".join(f"step {s}: {reason}" for s, reason, _ in rejected)
        aside = "left in place (read-only)" if self.read_only else "moved aside to *.corrupt-*"
        raise CorruptCheckpointError(
            f"no intact checkpoint in {self.ckpt_dir}: {tried} ({aside}); nothing was restored")

    def check(self, step: int, load):
        """load(step, verified) after the file check; raises `Corrupt` on every process."""
        verdict, reason = self._verdict(step)
        if verdict == CORRUPT:
            raise Corrupt(reason)
        meta = self.read_json(step, verdict == VERIFIED)[1]
        if verdict == UNVERIFIED and WRITES_MANIFEST in meta:
            raise Corrupt(f"no {rundir.MANIFEST}, though its metadata says this version saved it")
        if meta.get("step", step) != step:  # a step directory copied under another number
            raise Corrupt(f"its metadata says step {meta['step']}: a copy of that step, not "
                          f"step {step}")
        return load(step, verdict == VERIFIED)

    def _verdict(self, step: int) -> tuple[int, str]:
        """Process 0's verdict on the step's files, agreed by every process (its cache too)."""
        if step in self._agreed_ok:
            return VERIFIED, ""
        verdict, reason = check_files(self.step_dir(step)) if jax.process_index() == 0 else (
            0, "see process 0's log")
        verdict = _broadcast(verdict)
        if verdict == VERIFIED:
            self._agreed_ok.add(step)
        return verdict, reason

    def read_json(self, step: int, verified: bool) -> tuple[dict, dict]:
        """(loader, meta) of a step; unreadable JSON (or, unverified, state metadata) is
        corruption."""
        def read():
            out = self.mngr.restore(step, args=ocp.args.Composite(
                loader=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore()))
            if not verified:
                ocp.StandardCheckpointHandler().metadata(self.step_dir(step) / "state")
            if not isinstance(out["meta"], dict) or not isinstance(out["loader"], dict):
                raise ValueError("JSON items are not objects")
            return out["loader"], out["meta"]
        try:
            return agreed(read)
        except Exception as e:
            raise unreadable(e, self.step_dir(step)) from None

    def step_dir(self, step: int) -> pathlib.Path:
        return rundir.step_dir(self.ckpt_dir, step)

    def line(self, step: int, reason: str, where: pathlib.Path | None, then: str) -> str:
        done = "left in place (read-only)" if where is None else f"moved aside to {where}"
        return f"checkpoint step {step} in {self.ckpt_dir} is corrupt ({reason}): {done}{then}"

    def set_aside(self, step: int, reason: str) -> pathlib.Path | None:
        """Rename a corrupt step out of Orbax's sight (never deleted); None when read-only."""
        self.verified.discard(step)
        self._agreed_ok.discard(step)
        if self.read_only:
            self._corrupt[step] = reason
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        where = self.ckpt_dir / f"{step}.corrupt-{stamp}"
        if jax.process_index() == 0:
            n = 0
            while where.exists():
                n += 1
                where = self.ckpt_dir / f"{step}.corrupt-{stamp}-{n}"
            self.step_dir(step).rename(where)
        self.resync(f"ckpt-set-aside-{step}")
        return where

    def resync(self, name: str) -> None:
        birdjepa.runtime.distributed.barrier(name)
        self.mngr.reload()
        self._agreed_ok &= set(self.mngr.all_steps())

    def newest_verified(self, steps: list[int]) -> int | None:
        for step in reversed(steps):
            if step in self.verified or check_files(self.step_dir(step))[0] == VERIFIED:
                self.verified.add(step)
                return step
        return None

