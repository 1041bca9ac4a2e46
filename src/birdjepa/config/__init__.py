"""Pretraining configuration: frozen dataclasses, loaded from TOML with CLI overrides.

`python -m birdjepa.pretrain --cfg FILE.toml [--n_steps=40 --optim.lr=1e-3 ...]`: the TOML file
is checked against the dataclasses (unknown keys and wrong types are errors naming the key) and
is overridden from the command line (birdjepa.config.command_line, in the one voice of
birdjepa.common.cli_args).
"""

import dataclasses
import math
import pathlib
import re
import tomllib
import types
import typing

import tomli_w

import birdjepa.common.errors as errors
import birdjepa.config.architecture as architecture
import birdjepa.config.bounds as bounds
import birdjepa.config.cluster as cluster
import birdjepa.config.keys as keys
import birdjepa.config.losses as losses
import birdjepa.config.optimizer as optimizer
import birdjepa.data.loader_config
import birdjepa.data.sources


class ConfigError(ValueError):
    """A configuration the run cannot start with; the message names the key, the expected and
    the actual value. The CLI prints it on one line and exits with status 2."""


@dataclasses.dataclass(frozen=True)
class DataConfig(birdjepa.data.loader_config.LoaderConfig):
    """The `data` section: every loader setting (birdjepa.data.LoaderConfig: declared, defaulted,
    documented and checked there) plus the keys only training needs. The run passes this section
    to the loaders as it is (birdjepa.train.loaders.make_loaders)."""

    train_shards: str | None = None
    """Training shards, as birdjepa.data.resolve_shards takes them: a save_to_disk directory
    (the files its state.json lists), "DIR:SPLIT" for a DatasetDict directory or a load_dataset
    cache directory, a directory of *.arrow, a glob or a file. Required."""
    eval_shards: str | None = None
    """Evaluation shards (same forms as train_shards), iterated in full at every evaluation
    (one centre view per row). Required."""
    eval_batch_size: int | None = None
    """Evaluation batch size; defaults to batch_size."""
    eval_label_column: str | None = None
    """Label column of the eval shards when it is not label_column (e.g. a held-out split
    labelled in another column); None: label_column."""


@dataclasses.dataclass(frozen=True)
class WandbConfig:
    project: str = "birdjepa"
    """Weights & Biases project."""
    name: str | None = None
    """Run name; defaults to run_id."""
    mode: typing.Literal["online", "offline", "disabled"] = "offline"
    """wandb mode; the WANDB_MODE environment variable takes precedence."""


@dataclasses.dataclass(frozen=True)
class Config:
    n_steps: int = 1000
    """Optimiser updates (each of batch_size clips, in grad_accum micro-batches)."""
    seed: int = 0
    """Seed of parameters, masks and projections; step keys are fold_in(key(seed), step)."""
    batch_size: int = 64
    """Clips per update, over all devices and micro-batches."""
    n_classes: int | None = None
    """Number of classes of the label column (probe and supervised head). Unset: the number of
    the label column's ClassLabel names (an error without them); set, it must agree with them."""
    run_id: str = ""
    """Run identifier: one path component of letters, digits, '.', '_' and '-' (it names the run
    directory runs/<run_id> and the wandb run); empty means the config's hash id (run-<hex>):
    the same command finds its run again."""
    run_dir: str = ""
    """Output directory (config.toml, metrics.jsonl, plot); empty means runs/<run_id>."""
    objective: losses.ObjectiveConfig = losses.ObjectiveConfig()
    model: architecture.ModelConfig = architecture.ModelConfig()
    data: DataConfig = DataConfig()
    optim: optimizer.OptimConfig = optimizer.OptimConfig()
    eval_every: int = 200
    """Evaluate over the whole eval split every this many updates (and at the end); 0 = end only."""
    log_every: int = 10
    """Write a metrics row and console line every this many updates (non-finite steps always)."""
    ckpt_every: int = 1000
    """Checkpoint every this many updates."""
    ckpt_keep: int = 3
    """Checkpoints kept on disk."""
    wandb: WandbConfig = WandbConfig()
    max_nonfinite: int = 10
    """Stop with an error after this many consecutive non-finite (skipped) updates."""
    resume: typing.Literal["auto", "never", "force", "extend"] = "auto"
    """With checkpoints in run_dir: "auto" resumes from the latest if the config still matches
    (else refuses, naming the keys, and refuses a changed n_steps, which changes the learning-
    rate schedule); "force" resumes despite a mismatch (n_steps too, as "extend"); "never" moves them
    aside to checkpoints.old-<time> and starts over; "extend" resumes with a new n_steps, the
    learning rate continuous (birdjepa.optim.extension_cap: it never jumps up)."""
    distributed: cluster.DistributedConfig = cluster.DistributedConfig()
    peak_tflops: float | None = None
    """Peak TFLOP/s of one device for the MFU in the metrics; None: from the device table in
    birdjepa.train.flops (H100/H200, A100, L40S; none on CPU, where MFU is not logged)."""
    compile_cache: str = ""
    """Directory of JAX's persistent compilation cache: the compiled update outlives the process,
    so a resumed or requeued run (or another run of the same shapes) loads it instead of
    compiling again; a cluster points it at shared storage. Empty: $BIRDJEPA_COMPILE_CACHE, else
    JAX_COMPILATION_CACHE_DIR, else ~/.cache/birdjepa/jax-compile; "off" disables it
    (birdjepa.runtime.compiles)."""
    init_encoder: str = ""
    """A run directory (or its checkpoints/ directory) whose latest checkpoint's encoder
    initialises this run's (or an export directory, or an imported model "bird-mae-base:WEIGHTS";
    birdjepa.models), e.g. linear probing of a pretrained encoder with objective
    `probe_only`, or fine-tuning. Its `model`, `data.n_frames` and `data.n_mels` must equal
    this one's. Empty: random
    initialisation from `seed`. A resumed run takes its encoder from its own checkpoint."""


def _type_name(t) -> str:
    return getattr(t, "__name__", None) or str(t).replace("typing.", "")


def _coerce(t, v, key: str):
    origin, args = typing.get_origin(t), typing.get_args(t)
    if dataclasses.is_dataclass(t):
        if not isinstance(v, dict):
            raise ConfigError(f"config key {key!r}: expected a table, got {type(v).__name__} {v!r}")
        return from_dict(t, v, prefix=key + ".")
    if origin in (typing.Union, types.UnionType):
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(a, v, key)
            except ConfigError as e:
                errors.append(e)
        if len(errors) == 1:  # X | None: X's own message
            raise errors[0] from None
        raise ConfigError(f"config key {key!r}: expected {_type_name(t)}, got {v!r}")
    if origin is typing.Literal:
        if v not in args:
            raise ConfigError(f"config key {key!r}: expected one of {list(args)}, got {v!r}")
        return v
    if origin is dict:  # a table of strings, e.g. path_map = {OLD = NEW}
        if not (isinstance(v, dict) and all(isinstance(x, str) for kv in v.items() for x in kv)):
            raise ConfigError(f"config key {key!r}: expected a table of strings "
                              f"(e.g. {{OLD = NEW}}), got {v!r}")
        return dict(v)
    if origin is tuple:
        ok = isinstance(v, list | tuple)
        if ok and not (len(args) == 2 and args[1] is Ellipsis):
            ok = len(v) == len(args)
        if not ok:
            raise ConfigError(f"config key {key!r}: expected {_type_name(t)}, got {v!r}")
        elem = [args[0]] * len(v) if args[-1] is Ellipsis else list(args)
        pairs = enumerate(zip(elem, v, strict=True))
        return tuple(_coerce(a, x, f"{key}[{i}]") for i, (a, x) in pairs)
    ok = {
        bool: lambda: isinstance(v, bool),
        int: lambda: isinstance(v, int) and not isinstance(v, bool),
        float: lambda: isinstance(v, int | float) and not isinstance(v, bool),
        str: lambda: isinstance(v, str),
    }
    if t not in ok:
        raise ConfigError(f"config key {key!r}: unsupported field type {t}")
    if not ok[t]():
        raise ConfigError(
            f"config key {key!r}: expected {_type_name(t)}, got {type(v).__name__} {v!r}"
        )
    return float(v) if t is float else v


def from_dict(cls, d: dict, *, prefix: str = ""):
    """An instance of dataclass `cls` from its defaults updated by (nested) dict `d`."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for old, new in getattr(cls, "RENAMED", {}).items():  # keys of older configs
        if old in d:
            if new in d:
                raise ConfigError(f"config keys {prefix + old!r} and {prefix + new!r}: expected "
                                  f"one (the first is the old name of the second), got both")
            d = {(new if k == old else k): v for k, v in d.items()}
    for k in d:
        if k not in names:
            raise ConfigError(keys.unknown_key(prefix, k, names))
    return cls(**{k: _coerce(hints[k], v, prefix + k) for k, v in d.items()})


def load(path: str | pathlib.Path, cls=None):
    """The `cls` (default Config) a TOML file describes; ConfigError naming what is wrong."""
    return from_dict(cls or Config, load_dict(path))


def load_dict(path: str | pathlib.Path) -> dict:
    """The tables of a TOML file; ConfigError for a missing file or invalid TOML."""
    try:
        with open(path, "rb") as f:
            d = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"--cfg: expected an existing TOML file, got {str(path)!r}, which "
                          "does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    return d


def strip_none(x):
    """A config dict (dataclasses.asdict, or JSON) without its unset (None) fields, tuples as
    lists: what TOML can hold and `from_dict` reads back."""
    if isinstance(x, dict):
        return {k: strip_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, tuple):
        return list(x)
    return x


def to_toml(cfg: Config) -> str:
    """TOML text of `cfg`; unset (None) fields are omitted, so load(to_toml(cfg)) == cfg."""
    return tomli_w.dumps(strip_none(dataclasses.asdict(cfg)))


def finalize(cfg: Config) -> Config:
    """Resolve the model preset and check the config (`validate`); run_id/run_dir stay as given
    (birdjepa.runtime.rundir derives them)."""
    try:
        model = architecture.resolve(cfg.model)
        cfg = dataclasses.replace(cfg, model=model)
        if cfg.data.local_frames is None:  # derived from local_s: never padded, whole rows
            frames = bounds.local_frames(cfg.data, model.patch[0])
            cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, local_frames=frames))
    except ValueError as e:
        raise ConfigError(str(e)) from e
    cfg = with_class_count(cfg)
    validate(cfg)
    return cfg


def with_class_count(cfg: Config) -> Config:
    """`cfg` with n_classes unset (None) taken from the train label column's ClassLabel names
    (int or list column; reads only the dataset's metadata); the loaders check an explicit
    n_classes against the names."""
    d = cfg.data
    if cfg.n_classes is not None or not d.train_shards or not d.label_column:
        return cfg
    try:
        paths = birdjepa.data.sources.resolve(d.train_shards)
        names = birdjepa.data.sources.class_names(paths, d.label_column)
    except (errors.Error, OSError, ValueError):
        return cfg  # validate names the missing n_classes; make_loaders the bad path
    return dataclasses.replace(cfg, n_classes=len(names)) if names else cfg


RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
"""A run id: one path component of safe characters (it names runs/<run_id> and the wandb run)."""


def _require(ok: bool, key: str, expected: str, got) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {expected}, got {got!r}")


def validate(cfg: Config) -> None:
    """Every check of a value or of a relation between fields, in one place; raises ConfigError
    naming the key, the expected and the actual value. `finalize` runs it; what needs the
    devices is `check_layout`'s."""
    positive = ("n_steps", "batch_size", "log_every", "ckpt_every", "ckpt_keep", "max_nonfinite")
    for key in positive:
        v = getattr(cfg, key)
        _require(v >= 1, key, "an int >= 1", v)
    _require(cfg.eval_every >= 0, "eval_every", "an int >= 0 (0 = at the end only)",
             cfg.eval_every)
    _require(cfg.n_classes is not None and cfg.n_classes >= 2, "n_classes", "an int >= 2",
             cfg.n_classes)
    _require(0 <= cfg.seed <= 2**32 - 1, "seed", "an int in [0, 2**32 - 1] (a 32-bit PRNG seed)",
             cfg.seed)
    _require(cfg.peak_tflops is None or (math.isfinite(cfg.peak_tflops) and cfg.peak_tflops > 0),
             "peak_tflops", "a finite number > 0 or unset", cfg.peak_tflops)
    _require(cfg.run_id == "" or RUN_ID.fullmatch(cfg.run_id) is not None, "run_id",
             "one path component of letters, digits, '.', '_' and '-' (at most 128, not starting "
             "with '.' or '-'), or empty", cfg.run_id)
    for key in ("init_timeout_s", "heartbeat_timeout_s", "shutdown_timeout_s"):
        v = getattr(cfg.distributed, key)
        _require(isinstance(v, int) and v >= 1, f"distributed.{key}", "an int >= 1 (seconds)", v)
    _validate_data(cfg)
    _validate_optim(cfg)
    try:
        cfg.objective.check()
        architecture.check_resolved(cfg.model)
        bounds.check(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    m = cfg.model
    if m.patch is not None:
        for i, (n, name) in enumerate(((cfg.data.n_frames, "data.n_frames"),
                                       (cfg.data.n_mels, "data.n_mels"))):
            _require(n % m.patch[i] == 0, name, f"a multiple of model.patch[{i}]={m.patch[i]}", n)
        if cfg.data.n_local:
            _require(cfg.data.local_frames % m.patch[0] == 0, "data.local_frames",
                     f"a multiple of model.patch[0]={m.patch[0]}", cfg.data.local_frames)
    if cfg.objective.name == "lejepa":
        _require(cfg.data.n_views >= 2, "data.n_views", ">= 2 for objective 'lejepa'",
                 cfg.data.n_views)


def check_layout(cfg: Config, *, n_devices: int, process_count: int) -> None:
    """The batches split over the devices and processes (known once JAX is up): the one check
    a finalized config still needs when a run opens."""
    micro = cfg.batch_size // cfg.optim.grad_accum
    eval_bs = cfg.data.eval_batch_size or cfg.batch_size
    _require(micro % n_devices == 0, "batch_size",
             f"a micro-batch (batch_size / optim.grad_accum) divisible by the {n_devices} "
             f"device(s)", cfg.batch_size)
    _require(eval_bs % n_devices == 0, "data.eval_batch_size",
             f"an eval batch divisible by the {n_devices} device(s)", eval_bs)
    if process_count > 1:
        _require(cfg.batch_size % process_count == 0, "batch_size",
                 f"divisible by the {process_count} processes", cfg.batch_size)


def _validate_data(cfg: Config) -> None:
    """The loader's own checks (birdjepa.data.LoaderConfig.check: Rust's, their one home),
    reported under `data.`; then what only training asks of the data section."""
    try:
        cfg.data.check()
    except errors.BadArgumentError as e:
        msg = str(e).removeprefix("bad argument ")
        raise ConfigError(f"data.{msg}") from None
    d = cfg.data
    if d.n_local:
        _require(cfg.objective.name == "lejepa", "data.n_local",
                 f"0 for objective {cfg.objective.name!r} (only lejepa uses local crops)",
                 d.n_local)
    if d.eval_batch_size is not None:
        _require(d.eval_batch_size >= 1, "data.eval_batch_size", "an int >= 1",
                 d.eval_batch_size)




def check_data_paths(cfg: Config) -> None:
    """The shards a real loader will read are configured and exist (globs are left to it)."""
    for key in ("train_shards", "eval_shards"):
        path = getattr(cfg.data, key)
        _require(bool(path), f"data.{key}", "a directory, file or glob of Arrow shards", path)
        base, split = birdjepa.data.sources.split_spec(path)  # "DIR:SPLIT"
        named_split = split is not None and pathlib.Path(base).is_dir()
        if not any(c in path for c in "*?[") and not pathlib.Path(path).exists() \
                and not named_split:
            raise ConfigError(f"data.{key}: expected an existing path, got {path!r}, which "
                              "does not exist")


def _validate_optim(cfg: Config) -> None:
    o = cfg.optim
    _require(o.grad_accum >= 1, "optim.grad_accum", "an int >= 1", o.grad_accum)
    _require(cfg.batch_size % o.grad_accum == 0, "batch_size",
             f"divisible by optim.grad_accum={o.grad_accum}", cfg.batch_size)
    for key in ("lr", "muon_lr", "probe_lr", "weight_decay", "clip"):
        v = getattr(o, key)
        _require(math.isfinite(v) and v >= 0, f"optim.{key}", "a finite number >= 0", v)
    _require(o.warmup >= 0, "optim.warmup", "an int >= 0", o.warmup)
    _require(0 < o.final_lr_frac <= 1, "optim.final_lr_frac", "a number in (0, 1]",
             o.final_lr_frac)
    _require(0 <= o.decay_frac <= 1, "optim.decay_frac", "a number in [0, 1]", o.decay_frac)

