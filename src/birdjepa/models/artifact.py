"""An encoder outside its run directory: `export(run_dir, out_dir)` writes

    out_dir/encoder.safetensors   the encoder's arrays by dotted path ("blocks.wq.w", ...)
    out_dir/head.safetensors      the class head (supervised head, else the online probe)
    out_dir/config.json           model config, input shape, audio settings, class names, the
                                  run's config and summary, the step and its checkpoint_digest
    out_dir/README.md             a model card: objective, data, steps, evaluation, how to load

and `load_export(out_dir)` reads them back with numpy and Equinox only (no Orbax, no run
directory): the same arrays, bit for bit. `open_model(spec)` resolves what the command lines
take as MODEL: a run directory, an export directory, or an imported model "bird-mae-base:PATH".
`restore_state(run_dir)` reads a run directory's latest intact checkpoint for eval: the
train-state structure is built abstractly (`eqx.filter_eval_shape`, no initialisation), Orbax
fills it (read-only: the run may still be training).
"""


import contextlib
import dataclasses
import json
import os
import pathlib
import typing

import equinox as eqx
import jax
import numpy as np
import pyarrow as pa

import birdjepa.common.errors as errors
import birdjepa.common.outputs as outputs
import birdjepa.config
import birdjepa.config.architecture
import birdjepa.config.identity as identity
import birdjepa.data.audio
import birdjepa.data.ipc
import birdjepa.data.loader_config
import birdjepa.data.table
import birdjepa.model
import birdjepa.models.arrays as arrays
import birdjepa.models.bird_mae as bird_mae
import birdjepa.models.card as card
import birdjepa.models.onnx_export as onnx_export
import birdjepa.models.safetensors as safetensors
import birdjepa.models.thresholds as thresholds
import birdjepa.objectives.probe
import birdjepa.params
import birdjepa.runtime.checkpoint
import birdjepa.runtime.integrity
import birdjepa.runtime.rundir

FORMAT = "birdjepa-encoder"
VERSION = 1
INPUT_KEYS = ("sample_rate", "n_mels", "n_frames", "window_s", "mean", "std", "pad", "window",
              "fbank", "resampler")
"""An encoder's input settings, as `Model.audio` and an export's config.json "audio" hold them:
the rate audio is resampled to and the filter that resamples it (`resampler`: a name of
birdjepa.data.audio.RESAMPLERS, the run's data.resampler), the Kaldi fbank (`fbank`: its options, n_mels aside), the clip
seconds and frames, the padding of a clip shorter than n_frames (birdjepa.data.LoaderConfig.pad),
the normalisation (x - mean) / (2 * std), and `window`: where a recording's clip is taken from
("start": its first window_s seconds, as Bird-MAE's extractor; "centre": the loader's eval crop,
our runs, whose training crops were random)."""
def input_settings(audio: dict, what: str) -> dict:
    """`audio` with every INPUT_KEYS entry (a legacy export's missing ones filled by
    birdjepa.config.identity.upgrade_input); an fbank or pad we cannot compute is a one-line
    ValueError naming `what`, the expected and the actual value."""
    a = identity.upgrade_input(audio)
    if a["fbank"] != birdjepa.data.audio.FBANK_DEFAULTS:
        raise ValueError(f"{what}: fbank: expected the options birdjepa computes "
                         f"{birdjepa.data.audio.FBANK_DEFAULTS}, got {a['fbank']}")
    if a["pad"] not in birdjepa.data.loader_config.PADS:
        raise ValueError(f"{what}: pad: expected one of {', '.join(birdjepa.data.loader_config.PADS)}, "
                         f"got {a['pad']!r}")
    if a["resampler"] not in birdjepa.data.loader_config.RESAMPLERS:
        raise ValueError(f"{what}: resampler: expected one of "
                         f"{', '.join(birdjepa.data.loader_config.RESAMPLERS)}, got {a['resampler']!r}")
    missing = [k for k in INPUT_KEYS if k not in a]
    if missing:
        raise ValueError(f"{what}: expected input settings {list(INPUT_KEYS)}, missing {missing}")
    if a["window"] not in WINDOWS:
        raise ValueError(f"{what}: audio.window: expected one of {', '.join(WINDOWS)}, got "
                         f"{a['window']!r}")
    try:  # the loader's own rules, as a run's data settings are checked (their one home)
        birdjepa.data.loader_config.LoaderConfig(
            sample_rate=a["sample_rate"], n_mels=a["n_mels"], n_frames=a["n_frames"],
            clip_s=a["window_s"], mean=a["mean"], std=a["std"], pad=a["pad"],
            resampler=a["resampler"]).check()
    except (errors.BadArgumentError, TypeError) as e:
        msg = str(e).removeprefix("bad argument ")
        name = {"clip_s": "window_s"}.get(msg.split(":", 1)[0], msg.split(":", 1)[0])
        raise ValueError(f"{what}: audio.{name}:{msg.split(':', 1)[-1]}") from None
    return a


WINDOWS = ("start", "centre")
"""Where an export's recording clip is taken from (INPUT_KEYS `window`)."""
HEADS = (None, "supervised", "probe")
ACTIVATIONS = ("softmax", "sigmoid")


def check_head(head: dict, width: int | None, what: str) -> None:
    """An export's "head" entry: its kind, activation and class names (one per output of the
    head's weights, `width`), each a one-line ValueError naming the key."""
    if head.get("kind") not in HEADS:
        raise ValueError(f"{what}: head.kind: expected one of supervised, probe or null, got "
                         f"{head.get('kind')!r}")
    if head.get("activation", "softmax") not in ACTIVATIONS:
        raise ValueError(f"{what}: head.activation: expected one of {', '.join(ACTIVATIONS)}, "
                         f"got {head.get('activation')!r}")
    classes = head.get("classes")
    if width is not None and not (isinstance(classes, list) and len(classes) == width
                                  and all(isinstance(c, str) for c in classes)):
        got = len(classes) if isinstance(classes, list) else repr(classes)
        raise ValueError(f"{what}: head.classes: expected {width} class names (the head's "
                         f"outputs), got {got}")


@dataclasses.dataclass
class Model:
    """An encoder with what is needed to feed it and, when it has one, its class head."""

    encoder: birdjepa.model.ViT
    audio: dict
    """The input the encoder expects (INPUT_KEYS): sample_rate, n_mels, n_frames, window_s,
    mean, std, pad, window, fbank, resampler."""
    classes: list[str] | None = None
    """Class names of the head's outputs (index order)."""
    head: typing.Any = None
    """Logits from pooled embeddings (b, d) -> (b, c): a Linear or an online probe."""
    head_kind: str | None = None
    """"supervised" (the objective's head) or "probe" (the online linear probe)."""
    source: str = ""
    info: dict = dataclasses.field(default_factory=dict)
    """The run's config dict and summary (an export), or the import's description."""
    activation: str = "softmax"
    """How the head's logits become probabilities, as it was trained: "softmax" (class ids:
    one class per clip) or "sigmoid" (a list<int> label column: binary cross-entropy per
    class, an empty list "nothing here"; a window may then have no class at all)."""
    thresholds: np.ndarray | None = None
    """Per-class decision thresholds in `classes` order, calibrated on a labelled split
    (birdjepa.models.thresholds); None: the head's default rule."""
    thresholds_rule: str = ""
    """How they were calibrated ("precision=0.9", "f1")."""


def _class_names(cfg: birdjepa.config.Config) -> list[str]:
    names = None
    try:
        names = birdjepa.data.table.class_names(cfg.data.train_shards,
                                                    cfg.data.label_column)
    except (OSError, KeyError, ValueError, TypeError):
        names = None
    n = cfg.n_classes or 0
    return list(names) if names and len(names) == n else [str(i) for i in range(n)]


def _activation(cfg: birdjepa.config.Config) -> str:
    """The head's activation (Model.activation) from the type of the run's label column;
    softmax when the training data can no longer be read."""
    try:  # the first shard's schema: no rows read
        first = birdjepa.data.resolve_shards(cfg.data.train_shards)[0]
        kind = birdjepa.data.ipc.schema(first).field(cfg.data.label_column).type
    except (OSError, KeyError, ValueError, TypeError, IndexError):
        return "softmax"
    return "sigmoid" if pa.types.is_list(kind) or pa.types.is_large_list(kind) else "softmax"


def load_config(run_dir: str | os.PathLike) -> birdjepa.config.Config:
    """The finalized config a run saved in its run directory (config.toml); a config saved
    before data.resampler existed gets the filter that run used (identity.LEGACY)."""
    saved = birdjepa.config.load_dict(birdjepa.runtime.rundir.config_file(run_dir))
    cfg = birdjepa.config.finalize(birdjepa.config.from_dict(birdjepa.config.Config, saved))
    return identity.with_resampler(cfg, saved)


def restore_state(run_dir: str | os.PathLike, *, step: int | None = None, sharding=None):
    """(Restored checkpoint, static modules, config) of `step` (default: the latest intact),
    every array restored onto `sharding` (default: the first device)."""
    cfg = load_config(run_dir)
    state, static = birdjepa.params.abstract_state(cfg, sharding=sharding)
    ckpt_dir = birdjepa.runtime.rundir.checkpoints_dir(run_dir)
    if not ckpt_dir.is_dir():
        raise FileNotFoundError(f"no checkpoints directory in {run_dir}")
    with birdjepa.runtime.checkpoint.Checkpointer(ckpt_dir, every=1, keep=cfg.ckpt_keep,
                                                  read_only=True) as ckpt:  # it may be training
        restored = ckpt.restore(state, step=step)
    return restored, static, cfg


def run_input(d, what: str) -> dict:
    """The input settings of a run trained on loader settings `d` (its config's data)."""
    return input_settings(dict(sample_rate=d.sample_rate, n_mels=d.n_mels, n_frames=d.n_frames,
                               window_s=d.clip_s, mean=d.mean, std=d.std, pad=d.pad,
                               resampler=birdjepa.data.loader_config.resolve_resampler(d)), what)


def from_run(run_dir: str | os.PathLike, *, step: int | None = None, sharding=None) -> Model:
    """A run directory's encoder, class head and audio settings (`restore_state`)."""
    restored, static, cfg = restore_state(run_dir, step=step, sharding=sharding)
    params = restored.state["params"]
    enc = eqx.combine(params["encoder"], static["encoder"])
    if cfg.objective.name == "supervised":
        head, kind = eqx.combine(params["heads"], static["heads"]).head, "supervised"
    else:
        head, kind = eqx.combine(params["probe"], static["probe"]), "probe"
    audio = run_input(cfg.data, str(run_dir))
    info = {"config": dataclasses.asdict(cfg), "step": int(restored.step),
            "checkpoint_digest": birdjepa.runtime.integrity.checkpoint_digest(
                run_dir, restored.step),
            "summary": birdjepa.runtime.rundir.read_complete(run_dir)}
    classes = _class_names(cfg)
    thr = thresholds.beside(run_dir, classes)
    return Model(enc, audio, classes, head, kind, str(run_dir), info,
                 activation=_activation(cfg), thresholds=None if thr is None else thr[0],
                 thresholds_rule="" if thr is None else thr[1])


class ExportRefused(ValueError):
    """The run is not a sound, finished model (or the output would land in a run directory)."""


FILES = ("encoder.safetensors", "head.safetensors", "config.json", "README.md")
"""What a safetensors export writes (an ONNX export: onnx_export.FILE, config.json, README.md)."""


def _check_out_dir(out: pathlib.Path, names: tuple[str, ...], *, overwrite: bool,
                   source: str | os.PathLike) -> None:
    """`out` must be (or become) a directory outside every run directory: one inside would be
    read as the run's model (it would go stale as training continues). Never MODEL's own
    directory; files of these `names` already there are replaced only with `overwrite`."""
    if out.exists() and not out.is_dir():
        raise ExportRefused(f"OUT_DIR: expected a directory (or a new path), got {str(out)!r}, "
                            "which is a file")
    inside = birdjepa.runtime.rundir.enclosing_run_dir(out)
    if inside is not None:
        raise ExportRefused(f"OUT_DIR: expected a directory outside every run directory, got "
                            f"{str(out)!r}, inside the run directory {str(inside)!r}")
    if out.exists() and pathlib.Path(source).exists() and out.samefile(source):
        raise ExportRefused(f"OUT_DIR: expected a directory other than MODEL's, got "
                            f"{str(out)!r} (its config.json would be replaced)")
    there = [n for n in names if (out / n).exists()]
    if there and not overwrite:
        raise ExportRefused(f"OUT_DIR: expected a new directory or one without "
                            f"{', '.join(names)}, got {str(out)!r} holding {', '.join(there)}; "
                            "--overwrite replaces them")


def _unsound(m: Model) -> str:
    """Why `m` is not a sound finished model ("" if it is): no COMPLETE, or non-finite arrays."""
    if m.info.get("summary") is None:
        return "it is not marked COMPLETE (training did not finish, or its model was unsound)"
    for what, tree in (("encoder", m.encoder), ("head", m.head)):
        for path, x in arrays.leaf_paths(tree).items() if tree is not None else ():
            if not np.isfinite(np.asarray(x)).all():
                return f"its {what} has non-finite values ({path})"
    return ""


def export(run_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
           step: int | None = None, force: bool = False, overwrite: bool = False
           ) -> pathlib.Path:
    """Write the run's encoder, head, settings and model card to `out_dir` (created). Refused
    (ExportRefused) for a run that is not COMPLETE or has non-finite arrays, unless `force`
    (the card then says so at the top), for an `out_dir` inside a run directory, and for one
    that holds an export's files already, unless `overwrite`."""
    out = pathlib.Path(out_dir)
    _check_out_dir(out, FILES, overwrite=overwrite, source=run_dir)
    if not birdjepa.runtime.rundir.is_run_dir(run_dir):
        raise ValueError(f"RUN_DIR: expected a training run directory (config.toml or "
                         f"checkpoints/), got {str(run_dir)!r}")
    m = from_run(run_dir, step=step)
    why = _unsound(m)
    if why and not force:
        raise ExportRefused(f"{run_dir}: expected a finished run with finite parameters, but "
                            f"{why}; use --force to export it anyway")
    if why:
        m.info["forced"] = why
    out.mkdir(parents=True, exist_ok=True)
    meta = {"format": FORMAT, "version": VERSION,
            "model": dataclasses.asdict(m.encoder.cfg), "audio": m.audio,
            "head": {"kind": m.head_kind, "classes": m.classes, "activation": m.activation,
                     **({} if m.thresholds is None else {
                         "thresholds": [float(t) for t in m.thresholds],
                         "thresholds_rule": m.thresholds_rule})},
            **m.info}
    with contextlib.ExitStack() as files:  # every file written before any is renamed in
        tmp = {n: files.enter_context(outputs.replacing(out / n)) for n in FILES}
        safetensors.save({k: np.asarray(v) for k, v in arrays.leaf_paths(m.encoder).items()},
                tmp["encoder.safetensors"], {"format": FORMAT})
        safetensors.save({k: np.asarray(v) for k, v in arrays.leaf_paths(m.head).items()},
                tmp["head.safetensors"], {"format": FORMAT, "kind": m.head_kind})
        tmp["config.json"].write_text(json.dumps(meta, indent=1, default=str) + "\n")
        tmp["README.md"].write_text(card.render(meta, run_dir))
    return out


def _one_line(e: Exception) -> str:
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.filename}: {e.strerror or e}"
    return " ".join(str(e).split())


def is_export(path: str | os.PathLike) -> bool:
    """An export directory; never a run directory (an export found inside one is not read)."""
    p = pathlib.Path(path)
    return ((p / "config.json").is_file() and (p / "encoder.safetensors").is_file()
            and not birdjepa.runtime.rundir.is_run_dir(p))


def load_export(out_dir: str | os.PathLike) -> Model:
    """The Model an `export` wrote, from its files alone."""
    out = pathlib.Path(out_dir)
    meta = json.loads((out / "config.json").read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{out / 'config.json'}: expected format {FORMAT!r}, got "
                         f"{meta.get('format')!r}")
    mcfg = birdjepa.config.from_dict(birdjepa.config.architecture.ModelConfig,
                                     birdjepa.config.strip_none(meta["model"]))
    mcfg = birdjepa.config.architecture.resolve(mcfg)
    a = input_settings(meta["audio"], str(out / "config.json"))
    skel = eqx.filter_eval_shape(lambda: birdjepa.model.ViT(
        mcfg, n_frames=a["n_frames"], n_mels=a["n_mels"], key=jax.random.key(0)))
    named = safetensors.load(out / "encoder.safetensors")[0]
    safetensors.check_weights(named, str(out / "encoder.safetensors"))
    enc = arrays.fill(skel, named)
    head, kind, classes = None, meta["head"]["kind"], meta["head"]["classes"]
    check_head(meta["head"], None, str(out / "config.json"))
    if kind and (out / "head.safetensors").is_file():
        named = safetensors.load(out / "head.safetensors")[0]
        safetensors.check_weights(named, str(out / "head.safetensors"))
        bias = [a for name, a in named.items() if name == "b" or name.endswith(".b")]
        check_head(meta["head"], bias[0].shape[-1] if len(bias) == 1 else None,
                   str(out / "config.json"))
        n = len(classes)
        make = (lambda: birdjepa.model.Linear(mcfg.width, n, key=jax.random.key(0))) \
            if kind == "supervised" else \
            (lambda: birdjepa.objectives.probe.init(mcfg.width, n, key=jax.random.key(0)))
        head = arrays.fill(eqx.filter_eval_shape(make), named)
    info = {k: meta.get(k) for k in ("config", "step", "checkpoint_digest", "summary", "forced")}
    thr = thresholds.beside(out, classes) if classes else None  # calibrated on the export
    if thr is None and meta["head"].get("thresholds") is not None:  # its run's, exported
        d = thresholds.check({"classes": classes, "thresholds": meta["head"]["thresholds"]},
                             f"{out / 'config.json'}: head.thresholds")
        thr = (thresholds.aligned(d, classes), str(meta["head"].get("thresholds_rule", "")))
    return Model(enc, a, classes, head, kind, str(out), info,
                 activation=meta["head"].get("activation") or "softmax",
                 thresholds=None if thr is None else thr[0],
                 thresholds_rule="" if thr is None else thr[1])


@dataclasses.dataclass(frozen=True)
class Spec:
    """A MODEL argument, parsed (`parse_spec`): its kind and where its files are."""

    kind: typing.Literal["run", "export", "imported"]
    path: str
    """The run or export directory; for an imported model, its weights file."""
    name: str = ""
    """An imported model's architecture (a key of bird_mae.PRESETS)."""


def parse_spec(spec: str | os.PathLike) -> Spec:
    """The one reading of MODEL, as every command and `load_encoder` take it: NAME:WEIGHTS for
    an imported model (e.g. bird-mae-base:/path/model.safetensors), an export directory
    (config.json + encoder.safetensors) or a run directory (config.toml + checkpoints/);
    FileNotFoundError naming the three for anything else."""
    s = str(spec)
    name, _, weights = s.partition(":")
    if name in bird_mae.PRESETS and weights:
        return Spec("imported", weights, name)
    if is_export(s):
        return Spec("export", s)
    if birdjepa.runtime.rundir.is_run_dir(s):
        return Spec("run", s)
    raise FileNotFoundError(
        f"MODEL: expected a run directory (config.toml), an export directory (config.json + "
        f"encoder.safetensors) or NAME:WEIGHTS with NAME in {sorted(bird_mae.PRESETS)}, got "
        f"{s!r}")


def open_model(spec: str | os.PathLike, *, step: int | None = None, sharding=None) -> Model:
    """The Model MODEL names (`parse_spec`), restored once: the one door every command,
    `load_encoder`, evaluate and training's `init_encoder` open a model through. `step` picks a
    run's checkpoint and must be the one an export or imported model holds; `sharding`: where
    a run's arrays are restored (a training mesh: each process reads its part), other kinds are
    read to the host. A run's `info` holds its config (as a dict), step and checkpoint_digest."""
    sp = parse_spec(spec)
    if sp.kind == "run":
        return from_run(sp.path, step=step, sharding=sharding)
    if sp.kind == "export":
        m = load_export(sp.path)
    else:
        m = Model(bird_mae.load(sp.name, sp.path), input_settings(bird_mae.AUDIO, sp.name),
                  source=str(spec), info={"imported": sp.name})
    if step is not None and m.info.get("step") != step:
        raise ValueError(f"step: expected the step {str(spec)!r} holds ({m.info.get('step')}; "
                         f"an export or imported model holds one), got {step}")
    return m


def export_onnx(model: str | os.PathLike, out_dir: str | os.PathLike, *,
                step: int | None = None, force: bool = False, overwrite: bool = False
                ) -> pathlib.Path:
    """`export`'s ONNX form: `model` (a run, an export or NAME:WEIGHTS) as out_dir/model.onnx
    with its config.json and card, a run under `export`'s refusals (needs the optional onnx
    extra: jax2onnx is imported by birdjepa.models.onnx_export)."""
    out = pathlib.Path(out_dir)
    _check_out_dir(out, (onnx_export.FILE, "config.json", "README.md"),
                   overwrite=overwrite, source=model)
    run = parse_spec(model).kind == "run"
    m = open_model(model, step=step)
    why = _unsound(m) if run else None
    if why and not force:
        raise ExportRefused(f"{model}: expected a finished run with finite parameters, "
                            f"but {why}; use --force to export it anyway")
    return onnx_export.export(m, out)
