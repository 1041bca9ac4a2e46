"""Everything `evaluate` can check about its data before it embeds anything, and what it gives:
per test set, its class list, the training and test labels in that class order, and the
few-shot training recordings of every (k, seed).

Each failure is one `birdjepa.config.ConfigError` line naming the test set, the key, the
expected and the actual value: an unreadable split, a missing column, a label column of another
type, class lists that cannot be matched by name, a test split without any positive label, a
class without training recordings, a k larger than some class's training recordings.

A test set's class list is its test label column's `ClassLabel` names (classes without a
positive in the split included). Training labels are matched to it by name, so a training split
whose names come in another order (or hold more classes) is fine; a class of the list missing
from the training split's names is an error. Without names on one side, ids are positions in the
other side's list; without names on either, classes are the ids 0..max.
"""

import dataclasses
import os
import sys

import numpy as np
import pyarrow as pa

import birdjepa.config
import birdjepa.data.fewshot as fewshot
import birdjepa.data.table as table
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.models.recordings as recordings


@dataclasses.dataclass(frozen=True)
class TestSetPlan:
    """One test set, checked: labels by row id in its class order, few-shot subsets."""

    spec: eval_config.TestSet
    classes: tuple[str, ...]
    """The class list every metric is computed over (its ClassLabel names)."""
    y_train: np.ndarray
    """(training recordings, classes) bool, in `classes` order."""
    y_test: np.ndarray
    """(test segments, classes) bool."""
    recordings: dict
    """{(k, seed): sorted training row ids}; k = 0 means all rows."""


class _Fail:
    """ConfigError lines for one test set."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, key: str, expected: str, got) -> birdjepa.config.ConfigError:
        return birdjepa.config.ConfigError(
            f"test set {self.name!r}: config key {key!r}: expected {expected}, got {got}")


def _columns(source, key: str, need: list[tuple[str, str]], fail: _Fail) -> None:
    try:
        cols = table.column_names(source)
    except Exception as e:  # missing path, no shards, unreadable file: one line naming it
        raise fail(key, "a readable split (shard directory, file or datasets.Dataset)",
                   f"{source!r} ({type(e).__name__}: {_first_line(e)})") from None
    for col_key, col in need:
        if col not in cols:
            raise fail(col_key, f"a column of {source} (one of {cols})", repr(col))


def _audio_files(cfg: eval_config.EvalConfig, ts: eval_config.TestSet, key: str, fail: _Fail) -> None:
    """Every path-only row of split `key` names a regular audio file once resolved with the
    test set's audio_root / path_map (as the embedding reads it): a missing one names the
    setting that fixes it."""
    got = table.check_audio_files(getattr(ts, key), cfg.audio_column,
                                  audio_root=ts.audio_root or "", path_map=ts.path_map)
    if got["missing"]:
        stored = got["missing"][0][1]
        raise fail("path_map" if os.path.isabs(stored) else "audio_root",
                   f"the audio files the path-only rows of {key} name",
                   f"{len(got['missing'])} of {got['checked']} missing: " + table.moved_hint(
                       got["missing"], audio_root="audio_root = DIR (--audio_root DIR)",
                       path_map="path_map = {OLD = NEW} (--path_map OLD=NEW)"))
    if got["unusable"]:
        raise fail(key, "regular audio files (within max_audio_mb) in its path-only rows",
                   f"{len(got['unusable'])} of {got['checked']} unreadable, "
                   "{}: {}".format(*got["unusable"][0]))


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""


def _labels(source, column: str, key: str, fail: _Fail) -> pa.Table:
    t = table.read(source, [column])
    typ = t.schema.field(column).type
    inner = getattr(typ, "value_type", typ)
    if not pa.types.is_integer(inner):
        raise fail(key, "an int or list<int> label column", f"{column!r} of type {typ}")
    return t


def _max_id(t: pa.Table) -> int:
    col = t.column(0).combine_chunks()
    vals = col.flatten() if hasattr(col.type, "value_type") else col
    vals = vals.drop_null().to_numpy(zero_copy_only=False)
    return int(vals.max()) if len(vals) else -1


def _hot(t: pa.Table, column: str, n: int, key: str, fail: _Fail) -> np.ndarray:
    hi = _max_id(t)
    if hi >= n:
        raise fail(key, f"class ids < {n} (the class list's length)", f"id {hi} in {column!r}")
    return table.multi_hot(t, column, n)


def _class_lists(ts: eval_config.TestSet, tr: pa.Table, te: pa.Table, fail: _Fail):
    """(classes, y_train, y_test): names matched by name where both splits have them."""
    test_names = table.class_names(ts.test_shards, ts.test_label_column)
    train_names = table.class_names(ts.train_shards, ts.train_label_column)
    for names, key in ((test_names, "test_label_column"), (train_names, "train_label_column")):
        if names is not None and len(set(names)) != len(names):
            dup = sorted({c for c in names if names.count(c) > 1})
            raise fail(key, "distinct ClassLabel names", f"repeated {dup}")
    classes = test_names or train_names or [
        str(i) for i in range(max(_max_id(tr), _max_id(te)) + 1)]
    y_test = _hot(te, ts.test_label_column, len(classes), "test_label_column", fail)
    if test_names is None or train_names is None:
        y_train = _hot(tr, ts.train_label_column, len(classes), "train_label_column", fail)
        return classes, y_train, y_test
    missing = [c for c in classes if c not in train_names]
    if missing:
        raise fail("train_shards", "a training split naming every class of the test list",
                   f"{ts.train_shards!r} without {missing[:10]}"
                   + (f" and {len(missing) - 10} more" if len(missing) > 10 else ""))
    y_all = _hot(tr, ts.train_label_column, len(train_names), "train_label_column", fail)
    return classes, y_all[:, [train_names.index(c) for c in classes]], y_test


def _subsets(cfg: eval_config.EvalConfig, ts: eval_config.TestSet, y_train, classes,
             fail: _Fail) -> dict:
    """Every (k, seed)'s training recordings; with sampling = "exact" a class short of k rows
    is a ConfigError, with "lenient" (Bird-MAE's) only eligible rows are drawn and a class
    short of them is named on stderr."""
    counts = y_train.sum(0)
    if (counts == 0).any():
        empty = [classes[i] for i in np.flatnonzero(counts == 0)]
        raise fail("train_shards", "training recordings of every class of the test list",
                   f"none of {empty[:10]}")
    eligible = None
    if cfg.sampling == "lenient" and any(cfg.shots):
        got = fewshot.lenient(ts.train_shards, audio_column=cfg.audio_column,
                              audio_root=ts.audio_root or "", path_map=ts.path_map)
        eligible = got.eligible
        per = (y_train & eligible[:, None]).sum(0)
        short = [(classes[i], int(per[i])) for i in np.flatnonzero(per < max(cfg.shots))]
        print(f"evaluate: test set {fail.name!r}: lenient sampling: {int(eligible.sum())} of "
              f"{len(eligible)} training recordings eligible ({got.too_long} longer than "
              f"{fewshot.LENIENT_MAX_S:g} s, {got.secondary} with secondary labels, "
              f"{got.unknown_length} of unknown length"
              + ("" if got.has_secondary_column else f"; no {fewshot.SECONDARY_COLUMN} column")
              + ")" + (f"; fewer than k={max(cfg.shots)}: " + ", ".join(
                  f"{c} {n}" for c, n in short[:10]) if short else ""), file=sys.stderr)
        if not eligible.any():
            raise fail("sampling", "training recordings a lenient draw may take (<= "
                       f"{fewshot.LENIENT_MAX_S:g} s, no secondary label)",
                       f"none of {len(eligible)}")
    out = {}
    for k in cfg.shots:
        for seed in cfg.seeds:
            try:
                out[(k, seed)] = fewshot.sample(y_train, k or None, seed=seed, names=classes,
                                                eligible=eligible if k else None)
            except ValueError as e:
                raise birdjepa.config.ConfigError(
                    f"test set {fail.name!r}: config key 'shots': {e}; lower k or drop it") from None
    return out


def check_segment(cfg: eval_config.EvalConfig, ts: eval_config.TestSet, fail: _Fail) -> None:
    """segment = "centre" on a split whose rows are windows inside longer recordings
    (start_time / end_time, a from_annotations split) would score each recording's centre
    against each window's labels: a ConfigError naming the first such row. Pre-cut clips
    (BirdSet's test_5s) and splits without the columns pass."""
    if cfg.segment != "centre" or (cfg.segment_start_column, cfg.segment_end_column) != \
            recordings.ROW_WINDOW_COLUMNS:
        return
    got = recordings.row_windows(ts.test_shards, cfg.audio_column,
                                 {"audio_root": ts.audio_root or "", "path_map": ts.path_map})
    inside = got.first_inside() if got is not None else None
    if inside is not None:
        r, a, b, d = inside
        raise fail("segment", '"columns" for a split whose rows are windows inside longer '
                   "recordings (its start_time and end_time; centre would score each "
                   "recording's middle against each window's labels)",
                   f'"centre" (row {r}: [{a:g}, {b:g}] s of a {d:g} s recording)')


def build_one(cfg: eval_config.EvalConfig, ts: eval_config.TestSet) -> TestSetPlan:
    """One test set's checks and labels (reads only label columns and schemas)."""
    fail = _Fail(ts.name)
    _columns(ts.test_shards, "test_shards", [("audio_column", cfg.audio_column),
                                             ("test_label_column", ts.test_label_column)], fail)
    _columns(ts.train_shards, "train_shards", [("audio_column", cfg.audio_column),
                                               ("train_label_column", ts.train_label_column)],
             fail)
    for key in ("test_shards", "train_shards"):
        _audio_files(cfg, ts, key, fail)
    check_segment(cfg, ts, fail)
    tr = _labels(ts.train_shards, ts.train_label_column, "train_label_column", fail)
    te = _labels(ts.test_shards, ts.test_label_column, "test_label_column", fail)
    classes, y_train, y_test = _class_lists(ts, tr, te, fail)
    if not y_test.any():
        raise fail("test_label_column", "at least one positive label (every metric would be NaN)",
                   f"{len(y_test)} rows of {ts.test_shards!r} without one")
    subsets = _subsets(cfg, ts, y_train, classes, fail)
    return TestSetPlan(ts, tuple(classes), y_train, y_test, subsets)


def build(cfg: eval_config.EvalConfig) -> list[TestSetPlan]:
    """Every test set's plan; the first failing check raises its ConfigError."""
    return [build_one(cfg, ts) for ts in eval_config.test_sets(cfg)]
