"""What a saved thing means today, in one place: which keys shape a run (its hash, its id, a
resume's refusal) and which do not, the values a key added later had before it existed (LEGACY,
ADDED_DATA_KEYS, LEGACY_INPUT), and the upgrade of each saved form to today's, done where it is
read: a saved config dict (a run's config.toml, a checkpoint's metadata: `upgrade`,
`with_resampler`, inside `check_same`), an export's input settings (`upgrade_input`). The schema
itself is birdjepa.config. The loader reads its own saved forms (a loader state, a pack's plan)
below this floor, by the one resampler rule birdjepa.data.loader_config.saved_resampler, which
every form here uses too."""

import dataclasses
import hashlib
import json
import typing

import birdjepa.config
import birdjepa.config.architecture as architecture
import birdjepa.config.losses as losses
import birdjepa.data.audio
import birdjepa.data.loader_config

Config = birdjepa.config.Config
ConfigError = birdjepa.config.ConfigError


NOT_SHAPING = (
    "n_steps", "run_id", "run_dir", "resume", "eval_every", "log_every", "ckpt_every",
    "ckpt_keep", "wandb", "max_nonfinite", "distributed", "data.eval_shards",
    "data.eval_label_column", "data.eval_batch_size", "peak_tflops", "compile_cache", "model.remat",
    "model.attention", "model.scan_layers",
    *(f"data.{f.name}" for f in dataclasses.fields(birdjepa.data.loader_config.LoaderConfig)
      if not f.metadata.get("shapes_stream", True)),
)
"""Config keys that change neither the model nor the training stream: a checkpoint written under
one value resumes under another (n_steps only with resume="extend": it shapes the schedule).
Every other key shapes the run, and a resume across a change of it is refused (see
birdjepa.train.run)."""

ENCODER_SHAPING = ("model", "data.n_frames", "data.n_mels")
"""Config keys the encoder's parameters depend on: `init_encoder` needs them equal, but for
ENCODER_FREE (how the encoder computes, not what it holds)."""
ENCODER_FREE = ("model.remat", "model.attention", "model.compute_dtype", "model.train_pos",
                "model.residual_dtype", "model.scan_layers")


def check_same(saved: dict, cfg: Config, *, keys: typing.Iterable[str] | None = None,
               ignore: typing.Iterable[str] = (), what: str) -> None:
    """Refuse `cfg` if it differs from a checkpoint's saved config dict on `keys` (default:
    every key but `ignore`); the message starts with `what` and lists each differing key."""
    current, saved = dataclasses.asdict(cfg), upgrade(saved)
    if keys is not None:
        saved, current = (_pick(saved, keys), _pick(current, keys))
    diff = config_diff(saved, current, ignore=ignore)
    if diff:
        lines = "; ".join(f"{k}: checkpoint has {a!r}, config has {b!r}" for k, a, b in diff)
        raise ConfigError(f"{what} ({lines})")


def _pick(d: dict, keys: typing.Iterable[str]) -> dict:
    out = {}
    for key in keys:
        node = d
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out[key] = node
    return out


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


LEGACY = {**architecture.LEGACY, "data.resampler": birdjepa.data.loader_config.LEGACY_RESAMPLER,
          "objective.supervised.mix": 0.0,
          **{f"objective.supervised.augment.{f.name}": f.default
             for f in dataclasses.fields(losses.AugmentConfig)},
          "objective.lejepa.augment.time_mask": 0.0, "objective.lejepa.augment.freq_mask": 0.0,
          "objective.lejepa.supervised_weight": 0.0}
"""Fields added after runs were saved, by the value their absence means (left out of the hash at
it): the model fields of architecture.LEGACY, data.resampler (the legacy filter; an unset one in a
new config is resolved by `with_resampler`), objective.supervised.mix and augment (off) and the
augmentations' time and frequency masks (off), LeJEPA's supervised_weight (0: label-free)."""


def _legacy_default(key: str, value) -> bool:
    """Whether `key` is a field added later (LEGACY) holding its legacy value: left out of the
    hash, so a config that keeps today's behaviour hashes as it did before."""
    return key in LEGACY and value == LEGACY[key]


def _with_legacy(flat: dict) -> dict:
    """`flat` with the legacy value of each later-added field (LEGACY) it lacks or leaves unset
    (`upgrade` reads a missing key as None), when it holds a model at all (a whole config)."""
    if not any(k.startswith("model.") for k in flat):
        return flat
    return {**flat, **{k: v for k, v in LEGACY.items() if flat.get(k) is None}}


def with_resampler(cfg: Config, saved: dict | None) -> Config:
    """`cfg` with an unset (None) data.resampler resolved: the filter of the run `saved` (its
    config dict, from a checkpoint or run_dir/config.toml; one that names none was saved before
    the setting existed and used birdjepa.data.loader_config.LEGACY_RESAMPLER), or for a new run
    (`saved` None) the default. So an old run resumes with its filter, a new one gets the new
    filter, and an explicit value stays (a resume then compares it with the saved one)."""
    if cfg.data.resampler is not None:
        return cfg
    data = None if saved is None else saved.get("data") if isinstance(saved.get("data"), dict) \
        else {}
    value = birdjepa.data.loader_config.saved_resampler(None, data)
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, resampler=value))


def _ignored(key: str, ignore: typing.Iterable[str]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in ignore)


ADDED_DATA_KEYS = tuple(
    f.name for f in dataclasses.fields(birdjepa.data.loader_config.LoaderConfig)
    if f.metadata.get("hash_at_default") is False)
"""Loader settings that became training keys with the one-schema change, or were added since:
a config at their default (resampler: unset) hashes (run id) and compares (resume) as one
written before them did. Said where each is declared (birdjepa.data.loader_config `_added`,
`_into_config`, `_resampler`), so a new setting is no edit here."""


def upgrade(saved: dict) -> dict:
    """A config dict saved by an older version, as this version reads it: keys added since then
    take their defaults (so that they do not count as changes on resume)."""
    return dataclasses.asdict(birdjepa.config.from_dict(Config, birdjepa.config.strip_none(saved)))


def read(saved: dict) -> dict:
    """A saved config dict (a run's config.toml, a checkpoint's metadata) in today's form, done
    where it is read: every key of today's schema, a key added since at the value its absence
    meant (LEGACY: the legacy filter for data.resampler, the model fields' legacy values), else
    today's default (`upgrade`). What compares, hashes or reports a saved config sees only this
    form."""
    out: dict = {}
    for key, value in _with_legacy(flatten(upgrade(saved))).items():
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def config_hash(cfg: dict, *, ignore: typing.Iterable[str] = NOT_SHAPING) -> str:
    """A stable hash of the config fields that shape the model or the data stream; loader
    settings added later (ADDED_DATA_KEYS) count only away from their defaults, and fields
    added later (LEGACY) only away from their legacy values."""
    defaults = birdjepa.data.loader_config.LoaderConfig()
    flat = {k: v for k, v in flatten(cfg).items() if not _ignored(k, ignore)
            and not _legacy_default(k, v)
            and not (k.removeprefix("data.") in ADDED_DATA_KEYS
                     and v == getattr(defaults, k.removeprefix("data.")))}
    blob = json.dumps(flat, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def config_diff(
    saved: dict, current: dict, *, ignore: typing.Iterable[str] = ()
) -> list[tuple[str, typing.Any, typing.Any]]:
    """The (key, saved value, current value) triples that differ, ignoring `ignore` prefixes.
    A key of architecture.LEGACY missing on one side means its legacy value (an older config)."""
    a, b = _with_legacy(flatten(saved)), _with_legacy(flatten(current))
    keys = sorted(set(a) | set(b))
    missing = "<missing>"
    return [
        (k, a.get(k, missing), b.get(k, missing))
        for k in keys
        if not _ignored(k, ignore) and a.get(k, missing) != b.get(k, missing)
    ]


LEGACY_INPUT = {"pad": "zero", "window": "centre"}
"""An export's input settings written before these keys were recorded: what it used (so it
reproduces exactly); its resampler is birdjepa.data.loader_config.saved_resampler's rule and its
fbank the one birdjepa computes (birdjepa.data.audio.FBANK_DEFAULTS)."""


def upgrade_input(audio: dict) -> dict:
    """An export's "audio" settings (config.json) in today's form: the keys added since
    (LEGACY_INPUT, `fbank`, `resampler`) at the values their absence meant. The checks of what
    the settings say are birdjepa.models.artifact.input_settings'."""
    return {**LEGACY_INPUT, "fbank": dict(birdjepa.data.audio.FBANK_DEFAULTS), **audio,
            "resampler": birdjepa.data.loader_config.saved_resampler(None, audio)}
