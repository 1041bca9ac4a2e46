"""Orbax checkpoints of a run: the train-state pytree, the loader state and JSON metadata.

Layout of `ckpt_dir/<step>/`: `state` (arrays: model, optimiser state, PRNG key, step), `loader`
(the loader's `state_dict()`, JSON), `meta` (config, its hash, code version, wandb id, JSON) and
`birdjepa-integrity.json` (size and sha256 of every file). Orbax writes
`<step>.orbax-checkpoint-tmp` and renames it once all is on disk: a kill mid-save leaves the
previous step as the latest (a writable `Checkpointer` removes left-over temporary directories).

Integrity (nothing silent, nothing lost):
- The manifest is written by Orbax's `post_finalization_callback`: on process 0, in the
  background save thread, after every process has written its files and before the rename that
  commits the step. It is part of the atomic commit: no committed step lacks one. It covers every
  file but Orbax's step-level `_CHECKPOINT_METADATA` and `commit_success.txt`, rewritten after
  the callback. Hashing files rather than the arrays' values needs no device-to-host copy at
  save, runs off the training thread (hashlib releases the GIL) and verifies a step without
  knowing the state's structure (`latest_step`, `read_meta`). Measured on 2 busy vCPUs for a
  ViT-S-sized state (3 x 22M float32, 240 MB on disk): hashing 0.28 s in the save thread, the
  same again to verify on restore; the finite check at save 0.16 s on CPU (a device reduction).
- A step is *verified* when its files match its manifest, *corrupt* when they do not or when
  it lacks one though its `meta` records (`WRITES_MANIFEST`, set by every save of this version)
  that it had one. A step without manifest or record (older code) is checked by reading it.
  The manifest catches accidents (bit rot, truncation, a kill mid-write), not tampering.
- A restored state must be finite, and `save` refuses a non-finite one (`NonFiniteStateError`):
  a NaN step would become the latest and rotation would delete the good ones.
- `latest_step()`, `read_meta()` and `restore()` give the newest *intact* step. A corrupt step is
  named in one logged line, renamed to `<step>.corrupt-<time>` (Orbax neither lists nor collects
  it; never deleted) and the next older step is tried. Read-only checkpointers (another run's
  directory) move nothing: they log and skip. If steps exist but none is intact,
  `CorruptCheckpointError` names the directory and every step tried; nothing starts over.
- Rotation is ours (Orbax's `max_to_keep` is off): once a save has committed, the newest `keep`
  steps are kept, and the newest verified step too if none of those is verified.
- Several processes: process 0 alone hashes, renames, deletes and writes manifests; its verdict
  is broadcast, a read failure on any process fails all, and a barrier follows every rename or
  deletion, so all restore the same step. Every public method but `all_steps` is a collective.
"""

import contextlib
import dataclasses
import hashlib
import json
import logging
import pathlib
import shutil
import sys
import time
import typing

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

import birdjepa.runtime.distributed
import birdjepa.runtime.save_failure as save_failure

logger = logging.getLogger(__name__)

ITEMS = ("state", "loader", "meta")
MANIFEST = "birdjepa-integrity.json"
_TMP = ".orbax-checkpoint-tmp"
_REWRITTEN = frozenset({"_CHECKPOINT_METADATA", "commit_success.txt", MANIFEST})
_VERIFIED, _UNVERIFIED, _CORRUPT = 0, 1, 2
WRITES_MANIFEST = "birdjepa_integrity_manifest"
"""Key of the `meta` item: set (to the manifest version) by every save of this version."""


class CorruptCheckpointError(RuntimeError):
    """A requested step is corrupt, or no intact step remains in a checkpoint directory."""


class NonFiniteStateError(ValueError):
    """`save` was given a state with NaN or infinite values."""


class _Corrupt(Exception):
    """Internal: a step failed a check (the message is the one-line reason)."""


@dataclasses.dataclass(frozen=True)
class Restored:
    step: int
    state: typing.Any
    loader: dict
    meta: dict


class _DropReadOnlyNotice(logging.Filter):
    """Orbax announces every read-only manager on absl's WARNING log ("Given directory is read
    only=..."): expected here (embed, evaluate, init_encoder read another run), noise to users."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Given directory is read only")


@contextlib.contextmanager
def _quiet_read_only():
    log, f = logging.getLogger("absl"), _DropReadOnlyNotice()
    log.addFilter(f)
    try:
        yield
    finally:
        log.removeFilter(f)


def _one_line(text: str, limit: int = 160) -> str:
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


def write_manifest(step_dir: pathlib.Path) -> None:
    """Hash the step's files into `step_dir/birdjepa-integrity.json` (tmp + rename)."""
    blob = json.dumps({"version": 1, "files": hash_files(step_dir)}, indent=0, sort_keys=True)
    tmp = step_dir / (MANIFEST + ".tmp")
    tmp.write_text(blob)
    tmp.rename(step_dir / MANIFEST)


def check_files(step_dir: pathlib.Path) -> tuple[int, str]:
    """(verdict, reason): files against the manifest; `_UNVERIFIED` when there is none."""
    path = step_dir / MANIFEST
    if not path.exists():
        return (_UNVERIFIED, "no integrity manifest") if step_dir.is_dir() else (
            _CORRUPT, "step directory vanished")
    try:
        files = sorted(json.loads(path.read_text())["files"].items())
        files = [(rel, int(size), str(digest)) for rel, (size, digest) in files]
    except Exception as e:
        return _CORRUPT, f"unreadable {MANIFEST}: {type(e).__name__}"
    for rel, size, digest in files:
        f = step_dir / rel
        if not f.is_file():
            return _CORRUPT, f"{rel} is missing"
        if f.stat().st_size != size:
            return _CORRUPT, f"{rel} has {f.stat().st_size} bytes, {size} were saved"
        if _sha256(f) != digest:
            return _CORRUPT, f"sha256 mismatch in {rel}"
    return (_VERIFIED, "sha256 verified") if files else (_CORRUPT, f"empty {MANIFEST}")


@jax.jit
def _finite_flags(leaves):
    return jnp.stack([jnp.isfinite(x).all() for x in leaves])


def _nonfinite_leaf(tree) -> str | None:
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
    return _nonfinite_leaf(tree) is None


def _same_shapes(state_dir: pathlib.Path, state_like) -> bool:
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


def _quiet_closed_loop() -> None:
    """After a failed read, tensorstore's callbacks reach Orbax's closed per-call asyncio loop
    and Python prints "Event loop is closed" tracebacks, harmless and misleading: drop exactly
    those (every other unraisable exception goes to the previous hook) until the Checkpointer
    closes (`_loud_closed_loop`), so no stale hook outlives it."""
    previous = sys.unraisablehook
    if not getattr(previous, "birdjepa_quiet", False):
        def hook(args):
            if repr(args.exc_value) != "RuntimeError('Event loop is closed')":
                previous(args)
        hook.birdjepa_quiet = True
        hook.previous = previous
        sys.unraisablehook = hook


def _loud_closed_loop() -> None:
    current = sys.unraisablehook
    if getattr(current, "birdjepa_quiet", False):
        sys.unraisablehook = current.previous


def _unreadable(e: Exception, what: str = "unreadable") -> _Corrupt:
    _quiet_closed_loop()
    return _Corrupt(f"{what}: {type(e).__name__}: {_one_line(e, 100)}")


def _broadcast(value: int) -> int:
    """Process 0's `value` on every process (a collective)."""
    if jax.process_count() == 1:
        return value
    import jax.experimental.multihost_utils as mhu

    return int(mhu.broadcast_one_to_all(np.int32(value)))


def _remove_tmp_dirs(ckpt_dir: pathlib.Path) -> None:
    """Delete the temporary directories of uncommitted saves (a kill mid-save) and deletions."""
    if jax.process_index() != 0 or not ckpt_dir.is_dir():
        return
    removed = [p for p in ckpt_dir.iterdir() if p.is_dir() and _TMP in p.name]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    if removed:
        logger.warning("removed %d incomplete checkpoint(s): %s", len(removed), removed)


class Checkpointer:
    """A thin, opinionated wrapper over `ocp.CheckpointManager` for one run directory."""

    def __init__(self, ckpt_dir: str | pathlib.Path, *, every: int, keep: int,
                 async_save: bool = True, read_only: bool = False):
        """`read_only`: another run's checkpoints (e.g. to initialise from): no saves, and
        nothing in the directory is removed or renamed (that run may be writing)."""
        if every < 1:
            raise ValueError(f"ckpt_every must be >= 1, got {every}")
        if keep < 1:
            raise ValueError(f"ckpt_keep must be >= 1, got {keep}")
        self.every, self.keep, self.async_save, self.read_only = every, keep, async_save, read_only
        self.ckpt_dir = pathlib.Path(ckpt_dir).absolute()
        if read_only and not self.ckpt_dir.is_dir():
            raise FileNotFoundError(f"no checkpoint directory {self.ckpt_dir}")
        if not read_only:
            _remove_tmp_dirs(self.ckpt_dir)
        self._saving: int | None = None
        self._verified: set[int] = set()  # process 0: steps known to match their manifest
        self._agreed_ok: set[int] = set()  # the same, as agreed by every process
        self._corrupt: dict[int, str] = {}  # read-only: corrupt steps left in place, and why
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=0 if read_only else 1,  # the interval is ours: see `save`
            max_to_keep=None,  # rotation is ours: see `_rotate`
            enable_async_checkpointing=True,  # the manifest callback needs it; see `save`
            async_options=ocp.AsyncOptions(post_finalization_callback=self._write_manifest),
            create=not read_only, read_only=read_only)
        with _quiet_read_only():
            self._mngr = ocp.CheckpointManager(self.ckpt_dir, options=options,
                                               item_names=ITEMS)

    def all_steps(self) -> list[int]:
        """Every committed step, intact or not, oldest first."""
        return sorted(self._mngr.all_steps())

    def latest_step(self) -> int | None:
        """The newest intact step (corrupt newer ones are set aside), None if there is no step;
        `CorruptCheckpointError` if there are steps but none is intact."""
        return self._first_intact(self._read_json)[0]

    def read_meta(self, step: int | None = None) -> dict:
        """The JSON metadata of `step` (default: the newest intact step), without the arrays."""
        step, (_, meta) = self._load(step, self._read_json)
        return {k: v for k, v in meta.items() if k != WRITES_MANIFEST}  # as the caller saved it

    def restore(self, state_like: typing.Any, *, step: int | None = None) -> Restored:
        """Restore `step` (default: the newest intact one) into the structure of `state_like`,
        a pytree of arrays (or `jax.ShapeDtypeStruct`s) with the target shapes, dtypes and
        shardings; typed PRNG keys are supported. With `step=None` a corrupt step falls back to
        the previous one (see `Restored.step`); an explicit corrupt `step` raises
        `CorruptCheckpointError` (after setting it aside unless read-only)."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)
        step, (state, loader, meta) = self._load(
            step, lambda s, verified: self._restore_arrays(s, verified, abstract))
        meta = {k: v for k, v in meta.items() if k != WRITES_MANIFEST}
        return Restored(step=step, state=state, loader=loader, meta=meta)

    def _load(self, step: int | None, load):
        if step is None:
            found, out = self._first_intact(load)
            if found is None:
                raise FileNotFoundError(f"no complete checkpoint in {self.ckpt_dir}")
            return found, out
        if step not in self._mngr.all_steps():
            raise FileNotFoundError(f"no complete checkpoint of step {step} in {self.ckpt_dir}")
        try:
            return step, self._check(step, load)
        except _Corrupt as e:
            where = self._set_aside(step, str(e))
            raise CorruptCheckpointError(self._line(step, str(e), where, "")) from None

    def _first_intact(self, load):
        """(step, load(step, verified)) for the newest step that passes every check, setting
        aside the corrupt ones on the way; (None, None) when there are no steps."""
        rejected, new = [], []
        for step in sorted(self._mngr.all_steps(), reverse=True):
            if step in self._corrupt:  # read-only: found before, already named
                rejected.append((step, self._corrupt[step], None))
                continue
            try:
                out = self._check(step, load)
            except _Corrupt as e:
                rejected.append((step, str(e), self._set_aside(step, str(e))))
                new.append(rejected[-1])
                continue
            if jax.process_index() == 0:
                for s, reason, where in new:
                    logger.warning(self._line(s, reason, where, f"; falling back to step {step}"))
            return step, out
        if not rejected:
            return None, None
        tried = "; ".join(f"step {s}: {reason}" for s, reason, _ in rejected)
        aside = "left in place (read-only)" if self.read_only else "moved aside to *.corrupt-*"
        raise CorruptCheckpointError(
            f"no intact checkpoint in {self.ckpt_dir}: {tried} ({aside}); nothing was restored")

    def _check(self, step: int, load):
        """load(step, verified) after the file check; raises `_Corrupt` on every process."""
        verdict, reason = self._verdict(step)
        if verdict == _CORRUPT:
            raise _Corrupt(reason)
        if verdict == _UNVERIFIED and WRITES_MANIFEST in self._read_json(step, False)[1]:
            raise _Corrupt(f"no {MANIFEST}, though its metadata says this version saved it")
        return load(step, verdict == _VERIFIED)

    def _verdict(self, step: int) -> tuple[int, str]:
        """Process 0's verdict on the step's files, agreed by every process (its cache too)."""
        if step in self._agreed_ok:
            return _VERIFIED, ""
        verdict, reason = check_files(self._step_dir(step)) if jax.process_index() == 0 else (
            0, "see process 0's log")
        verdict = _broadcast(verdict)
        if verdict == _VERIFIED:
            self._agreed_ok.add(step)
        return verdict, reason

    def _agreed(self, fn):
        """fn(), re-raising its exception; a failure on any process fails every process."""
        try:
            out, err = fn(), None
        except Exception as e:
            out, err = None, e
        if birdjepa.runtime.distributed.any_process(err is not None):
            raise err if err is not None else RuntimeError("failed on another process")
        return out

    def _read_json(self, step: int, verified: bool) -> tuple[dict, dict]:
        """(loader, meta) of a step; unreadable JSON (or, unverified, state metadata) is
        corruption."""
        def read():
            out = self._mngr.restore(step, args=ocp.args.Composite(
                loader=ocp.args.JsonRestore(), meta=ocp.args.JsonRestore()))
            if not verified:
                ocp.StandardCheckpointHandler().metadata(self._step_dir(step) / "state")
            if not isinstance(out["meta"], dict) or not isinstance(out["loader"], dict):
                raise ValueError("JSON items are not objects")
            return out["loader"], out["meta"]
        try:
            return self._agreed(read)
        except Exception as e:
            raise _unreadable(e) from None

    def _restore_arrays(self, step: int, verified: bool, abstract) -> tuple:
        """(state, loader, meta) of a step: read, then checked finite."""
        loader, meta = self._read_json(step, verified)
        try:
            state = self._agreed(lambda: self._mngr.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract)))["state"])
        except Exception as e:
            # The files are as committed, or hold another structure: the caller's mistake.
            if verified or not _same_shapes(self._step_dir(step) / "state", abstract):
                raise
            raise _unreadable(e, "unreadable arrays") from None
        bad = _nonfinite_leaf(state)
        if bad is not None:
            raise _Corrupt(f"non-finite values in state{bad}")
        return state, loader, meta

    def _step_dir(self, step: int) -> pathlib.Path:
        return self.ckpt_dir / str(step)

    def _line(self, step: int, reason: str, where: pathlib.Path | None, then: str) -> str:
        done = "left in place (read-only)" if where is None else f"moved aside to {where}"
        return f"checkpoint step {step} in {self.ckpt_dir} is corrupt ({reason}): {done}{then}"

    def _set_aside(self, step: int, reason: str) -> pathlib.Path | None:
        """Rename a corrupt step out of Orbax's sight (never deleted); None when read-only."""
        self._verified.discard(step)
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
            self._step_dir(step).rename(where)
        self._resync(f"ckpt-set-aside-{step}")
        return where

    def _resync(self, name: str) -> None:
        birdjepa.runtime.distributed.barrier(name)
        self._mngr.reload()
        self._agreed_ok &= set(self._mngr.all_steps())

    def _write_manifest(self) -> None:
        """Orbax's post-finalization callback: process 0, background thread, before the commit."""
        step = self._saving
        try:
            tmp = self.ckpt_dir / f"{step}{_TMP}"
            write_manifest(tmp if tmp.is_dir() else self._step_dir(step))
            self._verified.add(step)
        except Exception as e:  # an exception here would lose the step at once
            logger.warning("checkpoint step %s in %s: no integrity manifest written (%s); a "
                           "restore will set it aside as corrupt", step, self.ckpt_dir,
                           _one_line(e))

    def _newest_verified(self, steps: list[int]) -> int | None:
        for step in reversed(steps):
            if step in self._verified or check_files(self._step_dir(step))[0] == _VERIFIED:
                self._verified.add(step)
                return step
        return None

    def _rotate(self) -> None:
        """Delete all but the newest `keep` steps, never the newest verified one."""
        if self.read_only:
            return
        if jax.process_index() == 0:
            steps = sorted(self._mngr.all_steps())
            keep = set(steps[-self.keep:])
            if self._newest_verified(steps[-self.keep:]) is None:
                keep.add(self._newest_verified(steps))  # may be None: nothing extra kept
            for step in steps:
                if step not in keep:  # rename first: a kill mid-delete leaves a tmp directory
                    doomed = self.ckpt_dir / f"{step}{_TMP}-deleted-{time.time_ns()}"
                    self._step_dir(step).rename(doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
                    self._verified.discard(step)
        self._resync("ckpt-rotate")

    def save(self, step: int, state: typing.Any, *, loader: dict, meta: dict,
             force: bool = False) -> bool:
        """Start a save (async unless disabled); returns whether this step was saved: a multiple
        of `every`, or `force` (the final step, a preemption), and not already saved. A state
        with a non-finite float leaf raises `NonFiniteStateError` and nothing is written."""
        if not (force or step % self.every == 0) or step in self._mngr.all_steps():
            return False
        bad = _nonfinite_leaf(state)
        if bad is not None:
            raise NonFiniteStateError(
                f"refusing to checkpoint step {step} to {self.ckpt_dir}: non-finite values in "
                f"state{bad}; the checkpoints already there are kept")
        self._finish()
        self._saving = step
        meta = {**meta, WRITES_MANIFEST: 1}
        args = ocp.args.Composite(state=ocp.args.StandardSave(state),
                                  loader=ocp.args.JsonSave(loader), meta=ocp.args.JsonSave(meta))
        saved = self._mngr.save(step, args=args, force=True)
        if not self.async_save:
            self._finish()
        return saved

    def _finish(self) -> None:
        save_failure.wait(self._mngr, self._saving, self.ckpt_dir, _quiet_closed_loop)
        if self._saving is not None:
            self._saving = None
            self._rotate()

    def wait(self) -> None:
        """Block until an async save is committed (and older steps rotated out)."""
        self._finish()

    def close(self) -> None:
        self._finish()
        self._mngr.close()
        _loud_closed_loop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
