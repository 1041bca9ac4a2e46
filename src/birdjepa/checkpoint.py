"""Orbax checkpoints of a run: the train-state pytree, the loader state and JSON metadata.

A checkpoint is complete or it does not exist: Orbax writes `<step>.orbax-checkpoint-tmp-*` and
renames it only once every item is on disk, so a process killed mid-save leaves the previous
complete step as `latest_step()`. Left-over temporary directories are removed when a
`Checkpointer` opens the directory.

Layout under `ckpt_dir/<step>/`: `state` (arrays: model, optimiser state, PRNG key, step),
`loader` (the loader's `state_dict()`, JSON) and `meta` (config, config hash, code version,
wandb run id, JSON).
"""

import dataclasses
import hashlib
import json
import logging
import pathlib
import shutil
import typing

import jax
import orbax.checkpoint as ocp

logger = logging.getLogger(__name__)

ITEMS = ("state", "loader", "meta")


@dataclasses.dataclass(frozen=True)
class Restored:
    step: int
    state: typing.Any
    loader: dict
    meta: dict


def _remove_tmp_dirs(ckpt_dir: pathlib.Path) -> list[pathlib.Path]:
    """Delete the temporary directories of saves that never committed (a kill mid-save)."""
    removed = []
    if jax.process_index() != 0 or not ckpt_dir.is_dir():
        return removed
    for path in ckpt_dir.iterdir():
        if path.is_dir() and ".orbax-checkpoint-tmp" in path.name:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        logger.warning("removed %d incomplete checkpoint(s): %s", len(removed), removed)
    return removed


class Checkpointer:
    """A thin, opinionated wrapper over `ocp.CheckpointManager` for one run directory."""

    def __init__(
        self,
        ckpt_dir: str | pathlib.Path,
        *,
        every: int,
        keep: int,
        async_save: bool = True,
        read_only: bool = False,
    ):
        """`read_only`: another run's checkpoints (e.g. to initialise from): no saves, and
        incomplete saves in the directory are left alone (that run may be writing one)."""
        if every < 1:
            raise ValueError(f"ckpt_every must be >= 1, got {every}")
        if keep < 1:
            raise ValueError(f"ckpt_keep must be >= 1, got {keep}")
        self.every = every
        self.ckpt_dir = pathlib.Path(ckpt_dir).absolute()
        if read_only and not self.ckpt_dir.is_dir():
            raise FileNotFoundError(f"no checkpoint directory {self.ckpt_dir}")
        self.removed_tmp = [] if read_only else _remove_tmp_dirs(self.ckpt_dir)
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=1,  # the interval is ours: see `save`
            max_to_keep=keep,
            enable_async_checkpointing=async_save,
            create=not read_only,
            read_only=read_only,
        )
        self._mngr = ocp.CheckpointManager(self.ckpt_dir, options=options, item_names=ITEMS)

    def latest_step(self) -> int | None:
        return self._mngr.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._mngr.all_steps())

    def save(
        self, step: int, state: typing.Any, *, loader: dict, meta: dict, force: bool = False
    ) -> bool:
        """Start a save (async unless disabled); returns whether this step was saved.

        A step is saved when it is a multiple of `every`, or when `force` is set (the final
        step, a preemption). A step that is already saved is not saved again.
        """
        if not (force or step % self.every == 0) or step in self._mngr.all_steps():
            return False
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            loader=ocp.args.JsonSave(loader),
            meta=ocp.args.JsonSave(meta),
        )
        return self._mngr.save(step, args=args, force=True)

    def restore(self, state_like: typing.Any, *, step: int | None = None) -> Restored:
        """Restore `step` (default: the latest complete one) into the structure of `state_like`.

        `state_like` is a pytree of arrays (or `jax.ShapeDtypeStruct`s) with the target shapes,
        dtypes and shardings; typed PRNG keys are supported.
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no complete checkpoint in {self.ckpt_dir}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)
        out = self._mngr.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract),
                loader=ocp.args.JsonRestore(),
                meta=ocp.args.JsonRestore(),
            ),
        )
        return Restored(step=step, state=out["state"], loader=out["loader"], meta=out["meta"])

    def read_meta(self, step: int | None = None) -> dict:
        """The JSON metadata of a checkpoint, without touching its arrays."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no complete checkpoint in {self.ckpt_dir}")
        out = self._mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return out["meta"]

    def wait(self) -> None:
        """Block until an async save is committed."""
        self._mngr.wait_until_finished()

    def close(self) -> None:
        self._mngr.wait_until_finished()
        self._mngr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def flatten(tree: dict, prefix: str = "") -> dict[str, typing.Any]:
    """Flatten nested dicts to dotted keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    out = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = list(v) if isinstance(v, tuple) else v  # JSON has no tuples
    return out


def _ignored(key: str, ignore: typing.Iterable[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in ignore)


def config_hash(cfg: dict, *, ignore: typing.Iterable[str] = ()) -> str:
    """A stable hash of the config fields that shape the model or the data stream."""
    flat = {k: v for k, v in flatten(cfg).items() if not _ignored(k, ignore)}
    blob = json.dumps(flat, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def config_diff(
    saved: dict, current: dict, *, ignore: typing.Iterable[str] = ()
) -> list[tuple[str, typing.Any, typing.Any]]:
    """The (key, saved value, current value) triples that differ, ignoring `ignore` prefixes."""
    a, b = flatten(saved), flatten(current)
    keys = sorted(set(a) | set(b))
    missing = "<missing>"
    return [
        (k, a.get(k, missing), b.get(k, missing))
        for k in keys
        if not _ignored(k, ignore) and a.get(k, missing) != b.get(k, missing)
    ]
