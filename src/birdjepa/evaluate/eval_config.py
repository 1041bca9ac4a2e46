"""Evaluation configuration: a frozen dataclass, from TOML (`--cfg`) with `--key=value` overrides,
checked like the training config (unknown keys and wrong types name the key).

Test sets: `[[test_sets]]` tables, each named, with its own test split and (optionally) its own
probe-training split and label columns; a key a test set leaves out takes the top-level value.
Without `test_sets`, the top-level `train_shards` / `test_shards` keys define one test set, named
after the test split's directory.
"""

import dataclasses
import math
import os
import pathlib
import typing

import birdjepa.config
import birdjepa.config.command_line
import birdjepa.data.loader_config
import birdjepa.data.sources
import birdjepa.evaluate.probes
import birdjepa.models.thresholds

MIN_HOP_S = 0.01
"""The shortest window hop: one 10 ms fbank frame (a shorter one repeats windows, and at one
sample tiles a 5 s recording into 160,000 windows)."""


@dataclasses.dataclass(frozen=True)
class TestSet:
    """One test set (a column of the tables, like one of BirdSet's eight)."""

    name: str = ""
    """Its name in the tables (e.g. "HSN"); empty: the test split's directory name."""
    test_shards: str = ""
    """Test split: 5 s segments with a multilabel column (BirdSet's test_5s). Its label
    column's ClassLabel names are the class list every metric is computed over."""
    train_shards: str | None = None
    """Probe training split for this test set; None: the top-level train_shards."""
    test_label_column: str | None = None
    """None: the top-level test_label_column."""
    train_label_column: str | None = None
    """None: the top-level train_label_column."""
    audio_root: str | None = None
    """Path-only audio of this test set's splits: the directory relative paths start from;
    None: the top-level audio_root."""
    path_map: dict[str, str] | None = None
    """Path-only audio of this test set's splits moved since they were written: {stored prefix
    = local prefix}, over the top-level path_map (a key in both: this one's value)."""


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    RENAMED: typing.ClassVar[dict[str, str]] = {"test_segment": "segment"}
    """Keys of older evaluation TOMLs, read under their new names."""

    encoders: tuple[str, ...] = ()
    """Run directories whose latest checkpoint's encoder is evaluated (frozen), export
    directories (python -m birdjepa.export) or imported models ("bird-mae-base:WEIGHTS")."""
    random: tuple[str, ...] = ()
    """Training config TOMLs whose randomly initialised encoder is evaluated (the encoder that
    run would start from: same model, seed and initialisation)."""
    heads: tuple[str, ...] = ()
    """Models scored through their own class head on the test split, no probe trained (a run
    or export directory with a head: birdjepa.evaluate.heads): BirdSet's headline numbers.
    Their classes are matched to the test split's ClassLabel names; train_shards is unused."""
    calibrate: str = ""
    """With heads: fit each head's per-class decision thresholds on the test split first
    ("precision=P": the lowest threshold with precision >= P; "f1": the best F1;
    birdjepa.models.thresholds) and save them as thresholds.json in the model's directory
    (predict then uses them) and in out_dir. Calibrate on a validation split, not the test
    split you report. Empty: the model's thresholds as they are."""
    train_shards: str = "data/demo/train"
    """Probe training split: focal recordings with one label each (or a list<int> column)."""
    test_shards: str = "data/demo/soundscape"
    """Test split: 5 s soundscape segments with a multilabel column (BirdSet's test_5s)."""
    test_name: str = ""
    """Name of the test_shards test set in the tables; empty: from its path (the BirdSet
    config, e.g. "HSN" for .../birdset/HSN/0.0.4/<hash>:test_5s, else the directory name)."""
    audio_column: str = "audio"
    """Audio column of both splits."""
    audio_root: str = ""
    """Path-only audio (HF Audio with null bytes and a path, or a column of paths): the
    directory relative paths start from ("": the directory of the shard that stores them), for
    every test set (one may set its own)."""
    path_map: dict[str, str] | None = None
    """Path-only audio moved since it was written: {stored prefix = local prefix} over whole
    path components (birdjepa.data.paths, the loader's rule), e.g. {"/home/me/data" =
    "/scratch/data"}; on the command line --path_map OLD=NEW, repeated. For every test set (a
    test set's own path_map adds to it)."""
    train_label_column: str = "label"
    """Label column of the training split: int or list<int>."""
    test_label_column: str = "ebird_code_multilabel"
    """Label column of the test split: list<int> (HF Sequence(ClassLabel)) or int."""
    segment: typing.Literal["centre", "columns"] = "centre"
    """Test windows (the loader's `segment`; older TOMLs call it test_segment): "centre" (right for pre-cut 5 s files such as BirdSet's test_5s: a file no
    longer than window_s is taken whole), or "columns": each row's [start, end] seconds inside
    its file from `segment_start_column` / `segment_end_column`, cut exactly there (never for
    pre-cut files, whose start_time/end_time place them in the soundscape: an error)."""
    segment_start_column: str = "start_time"
    """Test segment starts, seconds (segment = "columns")."""
    segment_end_column: str = "end_time"
    """Test segment ends, seconds (segment = "columns")."""
    train_windows: typing.Literal["centre", "all"] = "centre"
    """Training rows: one centre crop per recording (the loader's eval crop), or every window
    (window_s, hop_s), each with its recording's labels."""
    window_s: float = 5.0
    """Window length, seconds."""
    hop_s: float | None = None
    """Window hop for train_windows = "all"; None means window_s."""
    pool: typing.Literal["encoder", "cls", "mean"] = "encoder"
    """Pooled embedding of the linear and kNN probes: the encoder's own (model.pool), CLS, or
    patch mean."""
    probes: tuple[str, ...] = ("linear", "attentive", "prototypical", "knn")
    """Probes to train: linear, attentive, prototypical (over patch tokens), knn, multilayer
    (multi-layer attentive over the blocks of `layers`; its embeddings cost len(layers) x
    the patch tokens' memory and cache)."""
    layers: tuple[int, ...] = (-4, -3, -2, -1)
    """Blocks whose patch tokens the multilayer probe reads (0: the first; negative: from the
    last; an encoder with fewer blocks uses each it has once: the debug encoder's 2)."""
    shots: tuple[int, ...] = (1, 5, 0)
    """Training recordings per class; 0 means all of them."""
    sampling: typing.Literal["exact", "lenient"] = "exact"
    """How a few-shot k draws its training recordings: "exact", k per class from every
    recording (a class with fewer is an error); "lenient", Bird-MAE's: only recordings of at
    most 20 s without secondary labels (BirdSet's ebird_code_secondary; a split without the
    column is checked for length alone), at most k per class, a class with fewer eligible
    keeping what it has (named on stderr, counted in n_train_recordings). k = all takes every
    recording either way (birdjepa.data.fewshot)."""
    protocol: typing.Literal["", "bird-mae"] = ""
    """A published few-shot protocol, named in every result row and table title it produces.
    "bird-mae": Bird-MAE's (arXiv 2504.12880): sampling = "lenient", shots 1, 5, 10, seeds 1,
    2, 3, and its probe recipe (AdamW 3e-4, weight decay 3e-4, batch 64, 50 epochs, clip 2,
    the asymmetric loss, 20 prototypes per class, no minimum of updates); the probes stay yours
    (Bird-MAE reports linear, attentive and prototypical). A key it fixes set to another value
    is an error; shots and seeds may be a subset of its own (one k of a matched baseline). Unlike Bird-MAE, a training recording gives windows as train_windows says,
    not one window per detected event. "": this config's own settings."""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """Seeds: few-shot subset, probe initialisation and batch order. With fewer than 3, few-shot
    cells show the min-max range over seeds instead of an interval."""
    test_sets: tuple[TestSet, ...] = ()
    """Named test sets (`[[test_sets]]` tables); empty: one, from train_shards / test_shards."""
    n_boot: int = 1000
    """Bootstrap resamples of the test segments for the 95 % intervals."""
    format: typing.Literal["text", "markdown"] = "text"
    """Console tables as aligned text or as Markdown (results.md is written either way)."""
    probe: birdjepa.evaluate.probes.ProbeConfig = birdjepa.evaluate.probes.ProbeConfig()
    batch_size: int = 64
    """Encoder batch when embedding."""
    n_workers: int = 2
    """Decoding threads."""
    out_dir: str = "runs/eval"
    """Where embeddings (cache), results JSON, summary and plot go."""


def load(path: str) -> EvalConfig:
    """The EvalConfig a TOML file describes, its paths resolved against its directory."""
    return birdjepa.config.from_dict(EvalConfig, relative_to_toml(
        birdjepa.config.load_dict(path), path))


INPUT_PATHS = ("train_shards", "test_shards", "audio_root")
"""Keys (top level and in `[[test_sets]]`) holding one path evaluate reads; `encoders` and
`random` hold lists of them. `out_dir` (what evaluate writes) and `path_map` (stored prefixes
and where they are now) are left as written."""


def relative_to_toml(tables: dict, toml: str | os.PathLike, *,
                     overridden: typing.Collection[str] = ()) -> dict:
    """`tables` (a TOML's) with every relative input path (INPUT_PATHS, `encoders`, `random`)
    joined to the TOML's directory, and each checked to exist (but those of `overridden`
    top-level keys, which the command line replaces): one ConfigError naming the key, the value
    and that directory. Keys and types are checked first (`from_dict`)."""
    birdjepa.config.from_dict(EvalConfig, dict(tables))
    base = os.path.dirname(str(toml))
    where = f" in {toml}"

    def one(value, key: str, spec: bool = False):
        if not isinstance(value, str):
            return value
        return _resolve(value, key, base, where if key.split("[")[0] not in overridden
                        else None, spec)

    out = dict(tables)
    for key in INPUT_PATHS:
        if key in out:
            out[key] = one(out[key], key)
    for key in ("encoders", "random", "heads"):
        if isinstance(out.get(key), list):
            out[key] = [one(v, f"{key}[{i}]", key != "random") for i, v in enumerate(out[key])]
    if isinstance(out.get("test_sets"), list):
        out["test_sets"] = [{k: one(v, f"test_sets[{i}].{k}") if k in INPUT_PATHS else v
                             for k, v in t.items()} if isinstance(t, dict) else t
                            for i, t in enumerate(out["test_sets"])]
    return out


def _resolve(value: str, key: str, base: str, where: str | None, spec: bool) -> str:
    """`value` with its path part joined to `base` when relative; "" stays "". The path part:
    DIR of a shards "DIR:SPLIT", PATH of an encoder "emb:PATH" or "NAME:PATH", else all of it.
    A glob is left to the reader; anything else must exist (unchecked with `where` None)."""
    if not value:
        return value
    head, sep, tail = value.partition(":") if spec else ("", "", value)
    if spec and (not sep or "/" in head):
        head, sep, tail = "", "", value
    path, colon, split = tail.rpartition(":")
    if spec or not path or "/" in split:
        path, colon, split = tail, "", ""
    path = os.path.expanduser(path)
    joined = path if os.path.isabs(path) else os.path.normpath(os.path.join(base, path))
    if where is not None and not any(c in joined for c in "*?[") and not os.path.exists(joined):
        rel = f" (relative to {os.path.abspath(base or '.')})" if not os.path.isabs(path) else ""
        raise birdjepa.config.ConfigError(f"config key {key!r}{where}: expected an existing "
                                          f"path, got {value!r}{rel}")
    return head + sep + joined + colon + split


def _need(ok, key, expected, got) -> None:
    if not ok:
        raise birdjepa.config.ConfigError(f"config key {key!r}: expected {expected}, got {got!r}")


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def validate_probe(p: birdjepa.evaluate.probes.ProbeConfig) -> None:
    """The probe recipe's bounds (what its math needs), one ConfigError naming the key."""
    _need(_finite(p.lr) and p.lr > 0, "probe.lr", "a finite number > 0", p.lr)
    _need(_finite(p.weight_decay) and p.weight_decay >= 0, "probe.weight_decay",
          "a finite number >= 0", p.weight_decay)
    _need(p.batch_size >= 1, "probe.batch_size", "an int >= 1", p.batch_size)
    _need(p.epochs >= 1, "probe.epochs", "an int >= 1", p.epochs)
    _need(p.min_steps >= 0, "probe.min_steps", "an int >= 0", p.min_steps)
    _need(_finite(p.warmup_frac) and 0 <= p.warmup_frac < 1, "probe.warmup_frac",
          "a number in [0, 1)", p.warmup_frac)
    _need(_finite(p.grad_clip) and p.grad_clip > 0, "probe.grad_clip", "a finite number > 0",
          p.grad_clip)
    for key in ("asl_gamma_neg", "asl_gamma_pos"):
        v = getattr(p, key)
        _need(_finite(v) and v >= 0, f"probe.{key}", "a finite number >= 0", v)
    _need(_finite(p.asl_clip) and 0 <= p.asl_clip < 1, "probe.asl_clip", "a number in [0, 1)",
          p.asl_clip)
    _need(p.n_heads >= 1, "probe.n_heads", "an int >= 1", p.n_heads)
    _need(p.n_prototypes >= 1, "probe.n_prototypes", "an int >= 1", p.n_prototypes)
    _need(p.knn_k >= 1, "probe.knn_k", "an int >= 1", p.knn_k)
    _need(_finite(p.knn_temperature) and p.knn_temperature > 0, "probe.knn_temperature",
          "a finite number > 0", p.knn_temperature)


PROTOCOLS = {
    "bird-mae": {
        "sampling": "lenient", "shots": (1, 5, 10), "seeds": (1, 2, 3),
        "probe": {"lr": 3e-4, "weight_decay": 3e-4, "batch_size": 64, "epochs": 50,
                  "min_steps": 0, "grad_clip": 2.0, "loss": "asl", "n_prototypes": 20},
    },
}
"""What each `protocol` fixes (its published settings)."""


def with_protocol(cfg: EvalConfig) -> EvalConfig:
    """`cfg` with its protocol's settings (PROTOCOLS); a key the protocol fixes that the config
    sets to another value than its default is a ConfigError naming both."""
    if not cfg.protocol:
        return cfg
    fixed, default = PROTOCOLS[cfg.protocol], EvalConfig()
    probe = dict(fixed["probe"])
    for key, want in probe.items():
        got = getattr(cfg.probe, key)
        _need(got in (want, getattr(default.probe, key)), f"probe.{key}",
              f"{want!r} (protocol {cfg.protocol!r} fixes it) or unset", got)
    got = cfg.sampling
    _need(got in (fixed["sampling"], default.sampling), "sampling",
          f"{fixed['sampling']!r} (protocol {cfg.protocol!r} fixes it) or unset", got)
    chosen = {}
    for key in ("shots", "seeds"):  # a subset is allowed: one k or seed of the protocol
        got = getattr(cfg, key)
        _need(got == getattr(default, key) or set(got) <= set(fixed[key]), key,
              f"values of {fixed[key]!r} (protocol {cfg.protocol!r} fixes them) or unset", got)
        chosen[key] = fixed[key] if got == getattr(default, key) else got
    return dataclasses.replace(cfg, probe=dataclasses.replace(cfg.probe, **probe),
                               sampling=fixed["sampling"], **chosen)


def validate(cfg: EvalConfig) -> None:
    """ConfigError naming the key, the expected and the actual value (settings only; the data
    and encoders are checked by birdjepa.evaluate.checks before anything is embedded)."""
    _need(cfg.encoders or cfg.random or cfg.heads, "encoders",
          "at least one run directory (or random, or heads)", cfg.encoders)
    if cfg.calibrate:
        _need(cfg.heads, "calibrate", "heads to calibrate (--heads MODEL)", cfg.heads)
        try:
            birdjepa.models.thresholds.parse_rule(cfg.calibrate)
        except ValueError:
            _need(False, "calibrate", "'f1' or 'precision=P' with P in (0, 1]", cfg.calibrate)
    _need(all(p in birdjepa.evaluate.probes.KINDS for p in cfg.probes), "probes",
          f"values in {birdjepa.evaluate.probes.KINDS}", cfg.probes)
    _need(len(set(cfg.probes)) == len(cfg.probes), "probes", "no repeats", cfg.probes)
    _need(len(cfg.layers) >= 1 and len(set(cfg.layers)) == len(cfg.layers), "layers",
          "distinct block indices (negative: from the last)", cfg.layers)
    _need(cfg.shots and all(k >= 0 for k in cfg.shots), "shots", "ints >= 0 (0: all)",
          cfg.shots)
    _need(len(set(cfg.shots)) == len(cfg.shots), "shots", "no repeats", cfg.shots)
    _need(len(cfg.seeds) >= 1, "seeds", "at least one seed", cfg.seeds)
    _need(len(set(cfg.seeds)) == len(cfg.seeds) and all(s >= 0 for s in cfg.seeds), "seeds",
          "distinct ints >= 0", cfg.seeds)
    top = birdjepa.data.loader_config.MAX_WINDOW_S  # the longest window the decoder cuts
    _need(_finite(cfg.window_s) and 0 < cfg.window_s <= top, "window_s",
          f"seconds in (0, {top:g}]", cfg.window_s)
    _need(cfg.hop_s is None or (_finite(cfg.hop_s) and MIN_HOP_S <= cfg.hop_s <= top), "hop_s",
          f"seconds in [{MIN_HOP_S}, {top:g}] (one fbank frame at least) or unset", cfg.hop_s)
    _need(cfg.batch_size >= 1, "batch_size", ">= 1", cfg.batch_size)
    _need(cfg.n_workers >= 1, "n_workers", ">= 1", cfg.n_workers)
    _need(cfg.n_boot >= 100, "n_boot", ">= 100 (the 2.5 % tail needs a few resamples)",
          cfg.n_boot)
    validate_probe(cfg.probe)
    sets = test_sets(cfg)
    names = [t.name for t in sets]
    _need(len(set(names)) == len(names), "test_sets", "distinct names", names)
    for i, t in enumerate(cfg.test_sets):
        _need(t.test_shards, f"test_sets[{i}].test_shards", "a test split", t.test_shards)


def default_name(test_shards: str) -> str:
    """A test set's name from its path: the BirdSet config after a `...birdset` directory
    (`.../DBD-research-group___birdset/HSN/0.0.4/<hash>:test_5s` -> "HSN"), else the last
    directory's name with any `:SPLIT`."""
    path = birdjepa.data.sources.split_spec(test_shards)[0]
    parts = pathlib.PurePath(os.path.normpath(path)).parts
    for i, part in enumerate(parts[:-1]):
        if part.lower().endswith("birdset"):
            return parts[i + 1]
    return os.path.basename(os.path.normpath(test_shards)) or "test"


def test_sets(cfg: EvalConfig) -> list[TestSet]:
    """The configured test sets with every field resolved (the top-level values filled in)."""
    sets = cfg.test_sets or (TestSet(name=cfg.test_name, test_shards=cfg.test_shards),)
    out = []
    for t in sets:
        name = t.name or default_name(str(t.test_shards))
        out.append(TestSet(
            name=name, test_shards=t.test_shards,
            train_shards=t.train_shards if t.train_shards is not None else cfg.train_shards,
            test_label_column=t.test_label_column or cfg.test_label_column,
            train_label_column=t.train_label_column or cfg.train_label_column,
            audio_root=cfg.audio_root if t.audio_root is None else t.audio_root,
            path_map={**(cfg.path_map or {}), **(t.path_map or {})} or None))
    return out


def cli(argv: list[str] | None = None) -> EvalConfig:
    """`--cfg FILE.toml` (optional) then overrides (`--probe.lr=1e-3`, `--encoders A --encoders
    B`; birdjepa.common.cli_args)."""
    cfg = birdjepa.config.command_line.cli(
        argv, EvalConfig, prog="python -m birdjepa.evaluate",
        description="Evaluate frozen encoders with probes on a soundscape test split (BirdSet "
        "protocol), or score trained models through their own head (--heads MODEL). Load a config with --cfg FILE.toml first; its [[test_sets]] tables (several "
        "test sets) are set in the TOML only. Paths in the TOML are relative to its "
        "directory (out_dir excepted), paths on the command line to the current directory.",
        toml_paths=relative_to_toml)
    validate(cfg)
    return with_protocol(cfg)
