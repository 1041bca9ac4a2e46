"""Orbax checkpoints of a run: the train-state pytree, the loader state and JSON metadata.

Layout of `ckpt_dir/<step>/` (names: birdjepa.runtime.rundir): `state` (arrays: model, optimiser state, PRNG key, step), `loader`
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

The manifest, the finite checks and the search for the newest intact step live in
birdjepa.runtime.integrity (`IntactSteps`, the base class); this module saves, restores and
rotates.
"""

import contextlib
import dataclasses
import logging
import pathlib
import shutil
import time
import typing

import jax
import orbax.checkpoint as ocp

import birdjepa.runtime.integrity as integrity
import birdjepa.runtime.save_failure as save_failure

logger = logging.getLogger(__name__)

ITEMS = ("state", "loader", "meta")
_TMP = ".orbax-checkpoint-tmp"
CorruptCheckpointError = integrity.CorruptCheckpointError
NonFiniteStateError = integrity.NonFiniteStateError
all_finite = integrity.all_finite


class ShapeMismatchError(ValueError):
    """The saved arrays have other shapes than the state asked for (another model config): the
    caller's mistake, found from the checkpoint's metadata before any array is read."""


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


def _remove_tmp_dirs(ckpt_dir: pathlib.Path) -> None:
    """Delete the temporary directories of uncommitted saves (a kill mid-save) and deletions."""
    if jax.process_index() != 0 or not ckpt_dir.is_dir():
        return
    removed = [p for p in ckpt_dir.iterdir() if p.is_dir() and _TMP in p.name]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    if removed:
        logger.warning("removed %d incomplete checkpoint(s): %s", len(removed), removed)


def _key_names(path) -> tuple[str, ...]:
    """A pytree path as Orbax names it on disk: attribute, dict key and index alike."""
    return tuple(str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k)))) for k in path)


def _saved_layout(state_dir: pathlib.Path, abstract):
    """(item, rebuild): what to ask Orbax for and how to turn what it gives into `abstract`'s
    structure. Usually `abstract` itself. A step saved when the state had a field that was
    always None (an empty head, since removed) holds that empty entry, and Orbax refuses a
    tree without it; it holds no array, so the item is the saved layout with `abstract`'s
    leaves at their names, provided every array name matches (anything else restores as asked
    and fails there)."""
    same = (abstract, lambda state: state)
    try:
        md = ocp.StandardCheckpointHandler().metadata(state_dir.absolute())
    except Exception:  # unreadable: the restore says why
        return same
    saved, saved_def = jax.tree_util.tree_flatten_with_path(getattr(md, "tree", md),
                                                            is_leaf=lambda x: x is None)
    if all(leaf is not None for _, leaf in saved):
        return same
    ours, our_def = jax.tree_util.tree_flatten_with_path(abstract)
    names = [_key_names(p) for p, _ in ours]
    by_name = dict(zip(names, (leaf for _, leaf in ours), strict=True))
    if {_key_names(p) for p, leaf in saved if leaf is not None} != set(by_name):
        return same
    item = saved_def.unflatten([None if leaf is None else by_name[_key_names(p)]
                                for p, leaf in saved])

    def rebuild(state):
        got = {_key_names(p): leaf for p, leaf in jax.tree_util.tree_flatten_with_path(state)[0]}
        return our_def.unflatten([got[n] for n in names])
    return item, rebuild


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
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=0 if read_only else 1,  # the interval is ours: see `save`
            max_to_keep=None,  # rotation is ours: see `_rotate`
            enable_async_checkpointing=True,  # the manifest callback needs it; see `save`
            async_options=ocp.AsyncOptions(post_finalization_callback=self._write_manifest),
            create=not read_only, read_only=read_only)
        with _quiet_read_only():
            self._mngr = ocp.CheckpointManager(self.ckpt_dir, options=options,
                                               item_names=ITEMS)
        self._steps = integrity.IntactSteps(self._mngr, self.ckpt_dir, read_only=read_only)

    def all_steps(self) -> list[int]:
        """Every committed step, intact or not, oldest first."""
        return sorted(self._mngr.all_steps())

    def latest_step(self) -> int | None:
        """The newest intact step (corrupt newer ones are set aside), None if there is no step;
        `CorruptCheckpointError` if there are steps but none is intact."""
        return self._steps.first_intact(self._steps.read_json)[0]

    def read_meta(self, step: int | None = None) -> dict:
        """The JSON metadata of `step` (default: the newest intact step), without the arrays."""
        step, (_, meta) = self._load(step, self._steps.read_json)
        return {k: v for k, v in meta.items() if k != integrity.WRITES_MANIFEST}  # as saved

    def restore(self, state_like: typing.Any, *, step: int | None = None) -> Restored:
        """Restore `step` (default: the newest intact one) into the structure of `state_like`,
        a pytree of arrays (or `jax.ShapeDtypeStruct`s) with the target shapes, dtypes and
        shardings; typed PRNG keys are supported. With `step=None` a corrupt step falls back to
        the previous one (see `Restored.step`); an explicit corrupt `step` raises
        `CorruptCheckpointError` (after setting it aside unless read-only)."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)
        step, (state, loader, meta) = self._load(
            step, lambda s, verified: self._restore_arrays(s, verified, abstract))
        meta = {k: v for k, v in meta.items() if k != integrity.WRITES_MANIFEST}
        return Restored(step=step, state=state, loader=loader, meta=meta)

    def _load(self, step: int | None, load):
        if step is None:
            found, out = self._steps.first_intact(load)
            if found is None:
                raise FileNotFoundError(f"no complete checkpoint in {self.ckpt_dir}")
            return found, out
        if step not in self._mngr.all_steps():
            raise FileNotFoundError(f"no complete checkpoint of step {step} in {self.ckpt_dir}")
        try:
            return step, self._steps.check(step, load)
        except integrity.Corrupt as e:
            where = self._steps.set_aside(step, str(e))
            raise CorruptCheckpointError(self._steps.line(step, str(e), where, "")) from None

    def _restore_arrays(self, step: int, verified: bool, abstract) -> tuple:
        """(state, loader, meta) of a step: read, then checked finite."""
        loader, meta = self._steps.read_json(step, verified)
        state_dir = self._steps.step_dir(step) / "state"
        if not integrity.same_shapes(state_dir, abstract):
            raise ShapeMismatchError(f"checkpoint step {step} in {self.ckpt_dir}: expected "
                                     "arrays of the shapes asked for, got other shapes")
        item, rebuild = _saved_layout(state_dir, abstract)
        try:
            state = rebuild(integrity.agreed(lambda: self._mngr.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(item)))["state"]))
        except Exception as e:
            # The files are as committed, or hold another structure: the caller's mistake.
            if verified or not integrity.same_shapes(state_dir, abstract):
                raise
            raise integrity.unreadable(e, self._steps.step_dir(step), "unreadable arrays") from None
        bad = integrity.nonfinite_leaf(state)
        if bad is not None:
            raise integrity.Corrupt(f"non-finite values in state{bad}")
        return state, loader, meta

    def _write_manifest(self) -> None:
        """Orbax's post-finalization callback: process 0, background thread, before the commit."""
        step = self._saving
        try:
            tmp = self.ckpt_dir / f"{step}{_TMP}"
            integrity.write_manifest(tmp if tmp.is_dir() else self._steps.step_dir(step))
            self._steps.verified.add(step)
        except Exception as e:  # an exception here would lose the step at once
            logger.warning("checkpoint step %s in %s: no integrity manifest written (%s); a "
                           "restore will set it aside as corrupt", step, self.ckpt_dir,
                           integrity.one_line(e))

    def _rotate(self) -> None:
        """Delete all but the newest `keep` steps, never the newest verified one."""
        if self.read_only:
            return
        if jax.process_index() == 0:
            steps = sorted(self._mngr.all_steps())
            keep = set(steps[-self.keep:])
            if self._steps.newest_verified(steps[-self.keep:]) is None:
                keep.add(self._steps.newest_verified(steps))  # may be None: nothing extra kept
            for step in steps:
                if step not in keep:  # rename first: a kill mid-delete leaves a tmp directory
                    doomed = self.ckpt_dir / f"{step}{_TMP}-deleted-{time.time_ns()}"
                    self._steps.step_dir(step).rename(doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
                    self._steps.verified.discard(step)
        self._steps.resync("ckpt-rotate")

    def save(self, step: int, state: typing.Any, *, loader: dict, meta: dict,
             force: bool = False) -> bool:
        """Start a save (async unless disabled); returns whether this step was saved: a multiple
        of `every`, or `force` (the final step, a preemption), and not already saved. A state
        with a non-finite float leaf raises `NonFiniteStateError` and nothing is written."""
        if not (force or step % self.every == 0) or step in self._mngr.all_steps():
            return False
        bad = integrity.nonfinite_leaf(state)
        if bad is not None:
            raise NonFiniteStateError(
                f"refusing to checkpoint step {step} to {self.ckpt_dir}: non-finite values in "
                f"state{bad}; the checkpoints already there are kept")
        self._finish()
        self._saving = step
        meta = {**meta, integrity.WRITES_MANIFEST: 1}
        args = ocp.args.Composite(state=ocp.args.StandardSave(state),
                                  loader=ocp.args.JsonSave(loader), meta=ocp.args.JsonSave(meta))
        # A commit that fails in the background (a full disk) leaves tensorstore callbacks that
        # reach Orbax's closed loop while training goes on, before `_finish` sees the error:
        # those "Event loop is closed" tracebacks are dropped from now (a failed save keeps the
        # filter for the rest of the process: its callbacks come later still).
        integrity.quiet_closed_loop()
        saved = self._mngr.save(step, args=args, force=True)
        if not self.async_save:
            self._finish()
        return saved

    def _finish(self) -> None:
        save_failure.wait(self._mngr, self._saving, self.ckpt_dir, integrity.quiet_closed_loop)
        if self._saving is not None:
            self._saving = None
            self._rotate()

    def wait(self) -> None:
        """Block until an async save is committed (and older steps rotated out)."""
        self._finish()

    def close(self) -> None:
        self._finish()
        self._mngr.close()
        integrity.loud_closed_loop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def digest(self, step: int) -> str:
        """The identity of `step`: its manifest's sha256 (birdjepa.runtime.integrity.digest)."""
        return integrity.digest(self._steps.step_dir(step))
