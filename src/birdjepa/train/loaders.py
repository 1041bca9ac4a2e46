"""A training run's loaders: the train and eval birdjepa.data.Loader a config asks for, the
train stream resumed from a saved position (entered afresh at the same step when resume="force"
changed it), and the data's open errors as one ConfigError line naming the data key."""

import dataclasses

import jax
import pyarrow as pa

import birdjepa.common.errors as errors
import birdjepa.config
import birdjepa.data
import birdjepa.data.table
import birdjepa.train.state


def check_against_labels(cfg: birdjepa.config.Config, train, evals) -> None:
    """What the config asks of the label column, once the loader has read it (closing both
    loaders and raising ConfigError before the run writes anything): mixup mixes multi-hot
    targets, so it needs a list<int> column."""
    sup = cfg.objective.supervised
    if cfg.objective.name == "supervised" and sup.mix and not getattr(train, "multilabel", True):
        for loader in (train, evals):
            if hasattr(loader, "close"):
                loader.close()
        raise birdjepa.config.ConfigError(
            f"objective.supervised.mix: expected 0 with a single-label column (class ids), or a "
            f"list<int> label column (multi-hot sigmoid targets), got {sup.mix} with column "
            f"{cfg.data.label_column!r} of data.train_shards")


def make_loaders(cfg: birdjepa.config.Config, *, train_state: dict | None = None):
    """(train, eval) birdjepa.data.Loader over the configured shards; fails fast on missing
    paths. `train_state` (a train loader's state_dict()) resumes the train stream."""
    birdjepa.config.check_data_paths(cfg)
    d = cfg.data  # a birdjepa.data.LoaderConfig: passed through as it is
    # batch_size is global: with several processes each gets its batch_size // process_count.
    # Host features cross to a bfloat16 model as bfloat16 (half the bytes; the encoder rounds
    # its input to bfloat16 either way, train.step.features widens them back for the losses).
    run = dict(seed=cfg.seed, process_index=jax.process_index(),
               process_count=jax.process_count(), n_classes=cfg.n_classes,
               batch_dtype=birdjepa.train.state.batch_dtype(cfg))
    train = birdjepa.data.Loader(d.train_shards, config=d, mode="train",
                                 batch_size=cfg.batch_size, state=train_state, **run)
    ecfg = d.for_eval()
    if d.eval_label_column:
        ecfg = dataclasses.replace(ecfg, label_column=d.eval_label_column)
    evals = birdjepa.data.Loader(d.eval_shards, config=ecfg, mode="eval",
                                 batch_size=d.eval_batch_size or cfg.batch_size, **run)
    for key, loader in (("train_shards", train), ("eval_shards", evals)):
        problem = birdjepa.data.label_problem(loader.label_range, cfg.n_classes) or (
            no_labels(d.eval_shards, ecfg.label_column, loader.label_range)
            if key == "eval_shards" else None)
        if problem:
            train.close()
            evals.close()
            raise birdjepa.config.ConfigError(f"data.{key}: {problem}")
    return train, evals


def open_loaders(cfg: birdjepa.config.Config, loaders, train_state: dict | None):
    """(train, eval) loaders, the train stream resumed from `train_state`.

    With resume="force" and a config that changed the stream (seed, batch size, shards...), the
    saved position does not fit the new stream: the new stream is entered at the same step.
    """
    if loaders is not None and not callable(loaders):
        if train_state is not None:
            raise ValueError("resuming needs `loaders` as a callable (cfg, train_state=...)")
        return loaders
    build = _data_errors_are_config_errors(make_loaders if loaders is None else loaders)
    try:
        return build(cfg, train_state=train_state)
    except errors.StateMismatchError as e:
        if cfg.resume != "force":
            raise
        print(f"resume=force: {e}; entering the new stream at step {train_state['step']}",
              flush=True)
    train, evals = build(cfg, train_state=None)
    moved = {**train.state_dict(), "step": int(train_state["step"])}
    train.close()
    evals.close()
    return build(cfg, train_state=moved)


def _data_errors_are_config_errors(build):
    """`build` with the shards' open errors (a missing column, a file that is not Arrow, no
    shards) as ConfigError naming the key: one line at start-up, exit status 2."""
    def wrapped(cfg, *, train_state=None):
        try:
            return build(cfg, train_state=train_state)
        except (errors.BadArgumentError, errors.DatasetError) as e:
            if isinstance(e, errors.StateMismatchError):
                raise
            raise birdjepa.config.ConfigError(data_error_line(cfg.data, e)) from None

    return wrapped


def no_labels(shards, column: str | None, label_range: dict | None) -> str | None:
    """Why an eval split with a label column but no label in it would evaluate nothing (the
    columns that do hold labels named), or None."""
    if not column or label_range is None or label_range["max"] is not None:
        return None
    table = birdjepa.data.table
    t = table.read(shards, [c for c in table.column_names(shards) if c != column])
    def labels_like(c: str) -> bool:  # ClassLabel names, or named like a label column
        typ = t.column(c).type
        ints = pa.types.is_integer(typ) or (pa.types.is_list(typ) and
                                            pa.types.is_integer(typ.value_type))
        return ints and t.column(c).null_count < t.num_rows and (
            column in c or "label" in c.lower() or bool(table.class_names(shards, c)))

    alts = [c for c in t.column_names if labels_like(c)]
    fix = (f"labels are in {alts}: set data.eval_label_column = {alts[0]!r}" if alts else
           "no other integer column holds labels")
    return (f"expected labels in column {column!r}, got none ({label_range.get('nulls')} rows, "
            f"every one null); {fix}")


def data_error_line(d, e: Exception) -> str:
    """One line naming the data key an open error is about, the expected and actual value."""
    msg = " ".join(str(e).split())
    if "bad argument n_classes" in msg:
        return f"n_classes: {msg.split('bad argument n_classes: ', 1)[-1]}"
    for key, what in (("audio_column", "a column of the shards"),
                      ("label_column", "a column of the shards")):
        if f"column {getattr(d, key)!r}" in msg:
            return f"data.{key}: expected {what}, got {getattr(d, key)!r} ({msg})"
    key = "eval_shards" if d.eval_shards and d.eval_shards in msg and not (
        d.train_shards and d.train_shards in msg) else "train_shards"
    return f"data.{key}: expected readable Arrow shards, got {getattr(d, key)!r} ({msg})"
