"""Pretraining configuration: frozen dataclasses, loaded from TOML with CLI overrides.

`python -m birdjepa.pretrain --cfg FILE.toml [--n_steps=40 --optim.lr=1e-3 ...]`: the TOML file
is checked against the dataclasses (unknown keys and wrong types are errors naming the key) and
becomes the default instance that tyro then overrides from the command line.
"""

import dataclasses
import pathlib
import sys
import tomllib
import types
import typing

import tomli_w
import tyro

import birdjepa.distributed
import birdjepa.model
import birdjepa.objectives
import birdjepa.optim


class ConfigError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class DataConfig:
    train_shards: str | None = None
    """Training shards (directory or glob, as birdjepa.data.Loader takes them). Required."""
    eval_shards: str | None = None
    """Evaluation shards, iterated in full at every evaluation. Required."""
    n_workers: int = 2
    """Loader worker threads per loader."""
    n_views: int = 1
    """Augmented views per clip; lejepa needs >= 2. Batches are then (V, B, T, M)."""
    n_frames: int = 512
    """Time frames per clip (the T of (B, T, M)); must be divisible by model.patch[0]."""
    n_mels: int = 128
    """Mel bins produced by the loader (the M of (B, T, M)); must be divisible by patch[1]."""
    audio_column: str = "audio"
    """Column of the shards holding the audio."""
    label_column: str = "label"
    """Column of the shards holding the integer class label."""
    eval_batch_size: int | None = None
    """Evaluation batch size; defaults to batch_size."""


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
    """Number of classes of the label column (probe and supervised head). Required."""
    run_id: str = ""
    """Run identifier; empty means a fresh timestamp id."""
    run_dir: str = ""
    """Output directory (config.toml, metrics.jsonl, plot); empty means runs/<run_id>."""
    objective: birdjepa.objectives.ObjectiveConfig = birdjepa.objectives.ObjectiveConfig()
    model: birdjepa.model.ModelConfig = birdjepa.model.ModelConfig()
    data: DataConfig = DataConfig()
    optim: birdjepa.optim.OptimConfig = birdjepa.optim.OptimConfig()
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
    resume: typing.Literal["auto", "never", "force"] = "auto"
    """With checkpoints in run_dir: "auto" resumes from the latest if the config still matches
    (else refuses, naming the keys); "force" resumes despite a mismatch; "never" moves them
    aside to checkpoints.old-<time> and starts over."""
    distributed: birdjepa.distributed.DistributedConfig = birdjepa.distributed.DistributedConfig()
    init_encoder: str = ""
    """A run directory (or its checkpoints/ directory) whose latest checkpoint's encoder
    initialises this run's, e.g. linear probing of a pretrained encoder with objective
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
        raise ConfigError(f"config key {key!r}: expected {_type_name(t)}, got {v!r}")
    if origin is typing.Literal:
        if v not in args:
            raise ConfigError(f"config key {key!r}: expected one of {list(args)}, got {v!r}")
        return v
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
    for k in d:
        if k not in names:
            raise ConfigError(
                f"unknown config key {prefix + k!r}; expected one of {names}"
            )
    return cls(**{k: _coerce(hints[k], v, prefix + k) for k, v in d.items()})


def load(path: str | pathlib.Path) -> Config:
    try:
        with open(path, "rb") as f:
            d = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e
    return from_dict(Config, d)


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


def cli(argv: list[str] | None = None) -> Config:
    """`--cfg FILE.toml` (optional) then tyro overrides; `--help` lists every field."""
    argv = list(sys.argv[1:] if argv is None else argv)
    default = Config()
    for i, a in enumerate(argv):
        if a == "--cfg" or a.startswith("--cfg="):
            path = a.split("=", 1)[1] if "=" in a else argv[i + 1]
            del argv[i : i + (1 if "=" in a else 2)]
            default = load(path)
            break
    return tyro.cli(
        Config,
        default=default,
        args=argv,
        use_underscores=True,
        # Booleans take a value (--optim.muon=True), like every other dotted override.
        config=(tyro.conf.FlagConversionOff,),
        description="Pretrain a birdjepa encoder. Load a config with --cfg FILE.toml first; "
        "every field below overrides it.",
    )
