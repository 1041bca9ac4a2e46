"""Which Arrow files a `shards` argument means (`birdjepa.data.resolve_shards`).

Accepted, and what each reads:

* a `datasets.Dataset`: its `cache_files` (no indices mapping: `.flatten_indices()` first);
* a `datasets.DatasetDict`, with `split=` (e.g. `Loader(dd, split="train", ...)`);
* a `save_to_disk` directory (has `state.json`): exactly the files its `_data_files` lists. The
  `cache-*.arrow` files that `ds.map`/`ds.filter` leave beside them belong to a *derived*
  dataset and are not read (a warning names them: pass the derived Dataset object, or
  `save_to_disk` it elsewhere, to read that instead);
* a `DatasetDict` directory (has `dataset_dict.json`): one split, named as `"DIR:SPLIT"` (or
  `split=`); without one it is an error listing the splits;
* a `load_dataset` cache directory (has `dataset_info.json`): the files of one split, named
  `<builder>-<split>[-NNNNN-of-NNNNN].arrow`; `"DIR:SPLIT"` picks one, and a directory holding
  several splits without one is an error (reading them all would leak the test split);
* any other directory: every `*.arrow` in it, sorted (our own shards, `birdjepa.demo_data`);
  but where file names end in split names (`parquet-train.arrow` beside `parquet-test.arrow`,
  load_dataset cache files copied without their `dataset_info.json`), one split must be named
  (`"DIR:SPLIT"` or `split=`) and only its files are read: never train and test merged;
* a glob (`*`, `?`, `[`): every match, sorted, each resolved as above;
* a file; a list of any of these (concatenated in order).

An `.arrow` file that none of these rules explains is an error naming it, never read silently.
"""

import glob
import json
import os
import re
import warnings
from collections.abc import Sequence

import birdjepa._rs
import birdjepa.common.errors as errors
import birdjepa.data.ipc

_PART = re.compile(r"-\d{5}-of-\d{5}$")
_SPLIT_WORDS = ("train", "test", "validation", "valid", "val", "eval", "dev")
"""Split names recognised at the end of a file name without metadata (test_5s: "test_*")."""


def _name_split(name: str) -> str | None:
    """The split a file name ends in (`<builder>-<split>[-NNNNN-of-NNNNN].arrow`), or None."""
    stem = _PART.sub("", name[: -len(".arrow")])
    if "-" not in stem:
        return None
    tail = stem.rsplit("-", 1)[1]
    return tail if tail.split("_")[0] in _SPLIT_WORDS else None


def _bad(msg: str) -> Exception:
    return errors.BadArgumentError(f"bad argument shards: {msg}")


def _arrow_files(path: str) -> list[str]:
    return sorted(f for f in os.listdir(path) if f.endswith(".arrow"))


def _warn_caches(path: str, caches: list[str]) -> None:
    if caches:
        warnings.warn(
            f"birdjepa.data: {path} also holds {', '.join(caches)}: cache files of a dataset "
            "derived by map/filter; they are not read (pass the derived datasets.Dataset, or "
            "save_to_disk it to its own directory, to read it)",
            RuntimeWarning,
            stacklevel=4,
        )


def _refuse_extra(path: str, extra: list[str], why: str) -> None:
    if extra:
        raise _bad(f"{path}: expected only the .arrow files {why}, got also {', '.join(extra)}; "
                   "move them away or name the files to read")


def _saved(path: str) -> list[str]:
    """A save_to_disk directory: the files state.json lists."""
    with open(os.path.join(path, "state.json")) as f:
        state = json.load(f)
    files = [d["filename"] for d in state.get("_data_files", [])]
    if not files:
        raise _bad(f"{path}/state.json: expected _data_files to list the data files, got none")
    missing = [f for f in files if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise _bad(f"{path}: state.json lists {', '.join(missing)}, which do not exist")
    rest = [f for f in _arrow_files(path) if f not in files]
    _warn_caches(path, [f for f in rest if f.startswith("cache-")])
    _refuse_extra(path, [f for f in rest if not f.startswith("cache-")],
                  "that state.json lists (and map/filter cache-*.arrow files)")
    return [os.path.join(path, f) for f in files]


def _split_of(name: str, splits: list[str]) -> str | None:
    stem = _PART.sub("", name[: -len(".arrow")])
    return next((s for s in splits if stem.endswith(f"-{s}")), None)


def _cached(path: str, split: str | None) -> list[str]:
    """A load_dataset cache directory: the files of one split."""
    with open(os.path.join(path, "dataset_info.json")) as f:
        splits = sorted((json.load(f).get("splits") or {}), key=len, reverse=True)
    names = _arrow_files(path)
    caches = [f for f in names if f.startswith("cache-")]
    by_split: dict[str, list[str]] = {}
    for f in names:
        if f not in caches:
            by_split.setdefault(_split_of(f, splits) or "", []).append(f)
    _refuse_extra(path, by_split.pop("", []),
                  f"of the splits dataset_info.json lists ({', '.join(sorted(splits))})")
    if split is None:
        if len(by_split) > 1:
            listed = ", ".join(f"{s}: {len(v)} file(s)" for s, v in sorted(by_split.items()))
            raise _bad(f"{path}: expected one split, got a load_dataset cache holding several "
                       f"({listed}); name one as '{path}:SPLIT'")
        split = next(iter(by_split), None)
    if split not in by_split:
        raise _bad(f"{path}: expected split {split!r}, got splits {sorted(by_split)}")
    _warn_caches(path, caches)
    return [os.path.join(path, f) for f in by_split[split]]


def _directory(path: str, split: str | None) -> list[str]:
    if os.path.isfile(os.path.join(path, "dataset_dict.json")):
        with open(os.path.join(path, "dataset_dict.json")) as f:
            splits = json.load(f).get("splits", [])
        if split is None:
            raise _bad(f"{path}: expected a split of this DatasetDict, as '{path}:SPLIT' or "
                       f"split=, got none (splits: {', '.join(splits)})")
        if split not in splits:
            raise _bad(f"{path}: expected a split in {splits}, got {split!r}")
        return _directory(os.path.join(path, split), None)
    if os.path.isfile(os.path.join(path, "dataset_info.json")) and not os.path.isfile(
            os.path.join(path, "state.json")):
        return _cached(path, split)
    if os.path.isfile(os.path.join(path, "state.json")):
        if split is not None:
            raise _bad(f"{path}: expected a DatasetDict or load_dataset cache directory for "
                       f"split {split!r}, got a save_to_disk directory (one split)")
        return _saved(path)
    files = _arrow_files(path)
    by_split: dict[str, list[str]] = {}
    for f in files:
        by_split.setdefault(_name_split(f) or "", []).append(f)
    named = sorted(k for k in by_split if k)
    if split is not None and split not in named:
        raise _bad(f"{path}: expected files of split {split!r} (named <builder>-{split}.arrow), "
                   f"got {'splits ' + str(named) if named else 'a directory without splits'}")
    if split is not None:
        return [os.path.join(path, f) for f in by_split[split]]
    if len(named) > 1 or (named and by_split.get("")):
        listed = "; ".join(f"{k or 'no split'}: {', '.join(v)}" for k, v in sorted(
            by_split.items()))
        raise _bad(f"{path}: expected one split, got files of several and no dataset_info.json "
                   f"to tell them apart ({listed}); name one as '{path}:SPLIT'")
    if not files:
        raise _bad(f"expected *.arrow files in {path}, got none")
    _refuse_extra(path, [f for f in files if f.startswith("cache-")],
                  "of one dataset (cache-*.arrow files are map/filter caches of another; this "
                  "directory has no state.json to tell which is which)")
    return [os.path.join(path, f) for f in files]


def split_spec(spec: str) -> tuple[str, str | None]:
    """The one reading of a "DIR:SPLIT" argument: (DIR, SPLIT) when `spec` is no existing path
    and ends in ":NAME" (NAME without "/", after a non-empty DIR), else (spec, None). Whether DIR
    holds that split is the reader's question."""
    base, colon, name = spec.rpartition(":")
    if colon and base and name and "/" not in name and not os.path.exists(spec):
        return base, name
    return spec, None


def _path(spec: str, split: str | None) -> list[str]:
    if not os.path.exists(spec) and any(c in spec for c in "*?["):
        matches = sorted(glob.glob(spec))
        if not matches:
            raise _bad(f"expected the glob {spec!r} to match shards, got no match")
        return [f for m in matches for f in _path(m, split)]
    base, name = split_spec(spec)
    if name is not None and os.path.isdir(base):
        if split is not None and split != name:
            raise _bad(f"{spec}: names split {name!r}, but split={split!r} was passed")
        return _directory(base, name)
    if os.path.isdir(spec):
        return _directory(spec, split)
    if split is not None:
        raise _bad(f"{spec}: expected a directory with splits for split {split!r}, got a file")
    return [spec]


def _dataset(ds) -> list[str]:
    if getattr(ds, "_indices", None) is not None:
        raise _bad("expected a datasets.Dataset without an indices mapping, got one made by "
                   "select/shuffle/filter (call .flatten_indices() first)")
    files = [f["filename"] for f in ds.cache_files]
    if not files:
        raise _bad("expected a datasets.Dataset backed by Arrow cache files, got an in-memory "
                   "dataset (save_to_disk and load_from_disk it first)")
    return files


def resolve(shards, split: str | None = None) -> list[str]:
    """The Arrow files `shards` means (module docstring), in order. Raises BadArgumentError."""
    if isinstance(shards, (str, os.PathLike)):
        return _path(os.fspath(shards), split)
    if type(shards).__name__ in ("DatasetDict", "IterableDatasetDict"):
        if split is None or split not in shards:
            raise _bad(f"expected a split of this DatasetDict (split=...), got {split!r} "
                       f"(splits: {', '.join(shards)})")
        return _dataset(shards[split])
    if hasattr(shards, "cache_files"):
        if split is not None:
            raise _bad(f"split={split!r}: a datasets.Dataset is one split already")
        return _dataset(shards)
    if isinstance(shards, Sequence):
        return [f for p in shards for f in resolve(p, split)]
    raise _bad("expected a list of paths, a directory, a glob, a datasets.Dataset or "
               f"DatasetDict, got {type(shards).__name__}")


def class_names(paths: list[str], column: str, dataset=None) -> list[str] | None:
    """The HF `ClassLabel` names of `column` (plain or inside a `Sequence`/list) from the
    dataset's features: `dataset.features` for a `datasets.Dataset`, else `dataset_info.json`
    beside the first shard, else the `huggingface` schema metadata in it. None when absent."""
    if dataset is not None and hasattr(dataset, "features"):
        feat = dataset.features.get(column)
        feat = getattr(feat, "feature", feat)
        return list(feat.names) if hasattr(feat, "names") else None
    feats = None
    info = os.path.join(os.path.dirname(paths[0]), "dataset_info.json")
    if os.path.exists(info):
        with open(info) as f:
            feats = json.load(f).get("features")
    if feats is None:
        meta = birdjepa.data.ipc.schema(paths[0]).metadata or {}
        feats = json.loads(meta.get(b"huggingface", b"{}")).get("info", {}).get("features")
    feat = (feats or {}).get(column) or {}
    feat = feat.get("feature", feat)
    return list(feat["names"]) if isinstance(feat, dict) and "names" in feat else None
