"""`birdjepa.evaluate.run(cfg)`: frozen encoders x probes x few-shot k x seeds on one or more
test sets, BirdSet-style.

1. Check everything that can be checked before embedding (`birdjepa.evaluate.checks`: splits,
   columns, class lists, labels, k against training recordings; the settings; then every
   encoder loads and runs on one abstract batch). Each failure is one ConfigError line.
2. Embed each split once per encoder (`birdjepa.evaluate.cache`: cached under
   `out_dir/embeddings/`, keyed by the checkpoint's manifest digest, the transform settings and
   the data fingerprint; log-mel features are shared by the encoders of one call).
3. Train the probes on the cached arrays (`birdjepa.evaluate.protocol`: runs batched over seeds
   and k with `vmap`), score every metric, bootstrap the intervals.
4. Write `results.parquet` / `results.csv` (one row per test set, encoder, probe, k, seed and
   metric), `results.md`, `results.png`, `summary.json`; print the tables.
"""

import dataclasses
import hashlib
import json
import os
import pathlib
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import birdjepa._rs
import birdjepa.common.outputs as outputs
import birdjepa.config
import birdjepa.config.identity as identity
import birdjepa.evaluate.cache as cache
import birdjepa.evaluate.checks as checks
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.external as external
import birdjepa.evaluate.heads as heads
import birdjepa.evaluate.protocol as protocol
import birdjepa.evaluate.report as report
import birdjepa.evaluate.results as results
import birdjepa.models
import birdjepa.models.artifact
import birdjepa.params
import birdjepa.runtime.integrity
import birdjepa.runtime.rundir


@dataclasses.dataclass(frozen=True)
class Encoder:
    """A frozen encoder and what identifies it in results and in the embedding cache."""

    name: str
    model: object
    """The `birdjepa.model.ViT`."""
    run_dir: str
    """Absolute run directory; empty for a random initialisation."""
    step: int
    """Checkpoint step restored; -1 for a random initialisation."""
    config_hash: str
    """`identity.config_hash` of the training config (model- and data-shaping keys)."""
    digest: str
    """sha256 of the restored step's integrity manifest (which holds every file's sha256), or of
    the parameters themselves for a random initialisation."""
    objective: str = ""
    """What trained it, for the report: the run's objective, "random init of <objective>",
    "export (<head kind>)", "imported" or "precomputed embeddings"."""
    audio: dict | None = None
    """The model's input settings (birdjepa.models.artifact.INPUT_KEYS); None: those of the
    bare ViT (birdjepa.models.inference.as_model)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def params_digest(model) -> str:
    """sha256 over the shapes, dtypes and bytes of a model's arrays."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(eqx.filter(model, eqx.is_array)):
        a = np.asarray(leaf)
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def random_encoder(cfg_path: str):
    """(encoder, finalized config) a run of training config `cfg_path` starts from
    (init_state's key split)."""
    cfg = birdjepa.config.finalize(birdjepa.config.load(cfg_path))
    k_init, _ = jax.random.split(jax.random.key(cfg.seed))
    # One jitted program: eager init compiles each random op on its own (~9 s on 2 cores).
    params, static = eqx.filter_jit(
        lambda key: birdjepa.params.init_params(cfg, key=key))(k_init)
    return eqx.combine(params["encoder"], static["encoder"]), cfg


def _file_encoder(spec: str) -> Encoder:
    """An export directory or an imported model NAME:WEIGHTS, identified by its weights file's
    sha256 (it changes with the weights)."""
    try:
        sp = birdjepa.models.artifact.parse_spec(spec)
        path, imported = pathlib.Path(sp.path), sp.kind == "imported"
        model = birdjepa.models.open_model(spec)
        weights_file = path / "encoder.safetensors" if path.is_dir() else path
        digest = _sha256(weights_file.read_bytes())
    except Exception as e:
        raise birdjepa.config.ConfigError(
            f"config key 'encoders': expected a run directory, an export directory or "
            f"NAME:WEIGHTS, got {spec!r} ({_one_line(e)})") from None
    model_cfg = dataclasses.asdict(model.encoder.cfg)
    return Encoder(name=sp.name if imported else path.resolve().name, model=model.encoder,
                   run_dir=str(path.resolve()), step=-1,
                   config_hash=_sha256(json.dumps(model_cfg, sort_keys=True,
                                                  default=str).encode())[:16],
                   digest=digest, objective="imported" if imported else
                   f"export ({model.head_kind or 'no head'})", audio=model.audio)


def _one_line(e: BaseException) -> str:
    """The whole error on one line (never cut: the fix is often at the end)."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def load_encoders(cfg: eval_config.EvalConfig) -> list[Encoder]:
    """Every configured encoder, restored and identified; the one place that reads training
    runs and configs. A run that cannot be loaded is a ConfigError naming it."""
    out = []
    for run_dir in cfg.encoders:
        if external.is_external(run_dir):  # precomputed embeddings (issue 29 item 6)
            d = external.directory(run_dir)
            if not d.is_dir():
                raise birdjepa.config.ConfigError(
                    f"config key 'encoders': expected emb:DIR with DIR a directory of parquet "
                    f"embeddings, got {run_dir!r} (no such directory)")
            out.append(Encoder(name=d.resolve().name, model=None,
                               run_dir=external.PREFIX + str(d.resolve()), step=-1,
                               config_hash="", digest=external.digest(run_dir),
                               objective="precomputed embeddings"))
            continue
        if not birdjepa.runtime.rundir.is_run_dir(run_dir):
            out.append(_file_encoder(run_dir))  # an export or "bird-mae-base:WEIGHTS"
            continue
        try:
            m = birdjepa.models.open_model(run_dir)
        except Exception as e:  # missing dir, corrupt steps, a config that does not fit
            raise birdjepa.config.ConfigError(
                f"config key 'encoders': expected a run directory with a checkpoint that fits "
                f"its config.toml, got {run_dir!r} ({_one_line(e)})") from None
        out.append(Encoder(
            name=pathlib.Path(run_dir).resolve().name, model=m.encoder,
            run_dir=str(pathlib.Path(run_dir).resolve()), step=m.info["step"],
            config_hash=identity.config_hash(m.info["config"]),
            digest=m.info["checkpoint_digest"], objective=m.info["config"]["objective"]["name"],
            audio=m.audio))
    for i, path in enumerate(cfg.random):
        if not os.path.isfile(path):
            raise birdjepa.config.ConfigError(
                f"config key 'random[{i}]': expected an existing training config TOML, got "
                f"{path!r} (relative to the current directory, {os.getcwd()})")
        model, tcfg = random_encoder(path)
        out.append(Encoder(
            name=f"random-{pathlib.Path(path).stem}", model=model, run_dir="", step=-1,
            config_hash=identity.config_hash(dataclasses.asdict(tcfg)),
            digest=params_digest(model), objective=f"random init of {tcfg.objective.name}"))
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise birdjepa.config.ConfigError(
            f"config key 'encoders': expected encoders with distinct names (directory names), "
            f"got {names}")
    for enc in out:
        if enc.model is not None:
            check_encoder(enc)
    return out


def check_encoder(enc: Encoder) -> None:
    """The encoder runs on one abstract (1, n_frames, n_mels) batch (no compute) and gives a
    (1, d) pooled embedding and (1, patches, d) tokens; a ConfigError line otherwise."""
    try:
        n_frames, n_mels = enc.model.input_shape
        x = jax.ShapeDtypeStruct((1, n_frames, n_mels), jnp.float32)
        out = eqx.filter_eval_shape(enc.model, x)
        pooled, patches = tuple(out.pooled_bd.shape), tuple(out.patches_bnd.shape)
    except Exception as e:
        raise birdjepa.config.ConfigError(
            f"config key 'encoders': expected an encoder that runs on its own input shape, got "
            f"{enc.name!r} ({_one_line(e)})") from None
    if len(pooled) != 2 or len(patches) != 3 or pooled[1] != patches[2]:
        raise birdjepa.config.ConfigError(
            f"config key 'encoders': expected (1, d) embeddings and (1, patches, d) tokens, got "
            f"{pooled} and {patches} from {enc.name!r}")


def check_finite(emb: dict) -> None:
    """ConfigError naming the encoder when its embeddings hold NaN or infinity (non-finite
    weights): the probes would fit and score garbage."""
    for (enc, role, test_set), arrays in emb.items():
        bad = int(np.size(arrays["pooled"]) - np.isfinite(arrays["pooled"]).sum())
        if bad:
            raise birdjepa.config.ConfigError(
                f"encoder {enc!r}: expected finite embeddings, got {bad} non-finite values in "
                f"its {role} embeddings for test set {test_set!r} (are its weights finite?)")


OUTPUTS = ("results.parquet", "results.csv", "results.md", "results.png", "summary.json",
           "per_class.csv", "thresholds.json")
"""The files evaluate writes into out_dir (and its embeddings/ cache)."""


def check_out_dir(out: pathlib.Path) -> None:
    """Up front: out_dir holds none of OUTPUTS, or they come with the summary.json of an
    earlier evaluation (which this one replaces); a user's file of such a name is refused."""
    if out.exists() and not out.is_dir():
        raise birdjepa.config.ConfigError(f"out_dir: expected a directory (or none), got "
                                          f"{str(out)!r}, a file")
    present = [n for n in OUTPUTS if (out / n).exists()]
    if not present:
        return
    for n in present:  # never opened: a FIFO would block, a device never end
        kind = birdjepa._rs.file_kind((out / n).stat().st_mode)
        if kind is not None:
            raise birdjepa.config.ConfigError(
                f"out_dir: expected a directory without evaluate's file names or an earlier "
                f"evaluation's, got {str(out)!r}, whose {n} is {kind}; choose another out_dir")
    try:
        ours = "results" in json.loads((out / "summary.json").read_text())
    except (OSError, ValueError, TypeError):
        ours = False
    if not ours:
        raise birdjepa.config.ConfigError(
            f"out_dir: expected a directory without evaluate's file names or an earlier "
            f"evaluation's (its summary.json), got {str(out)!r} holding {', '.join(present)} "
            "that evaluate did not write; choose another out_dir")


def _run_heads(cfg: eval_config.EvalConfig, out: pathlib.Path, t_start: float, verbose: bool) -> dict:
    """`run` for `heads`: each model's own head on each test set (birdjepa.evaluate.heads),
    written and printed as the probes' results are."""
    rows, part = heads.run(cfg, out, verbose=verbose)
    paths = results.write(rows, out)
    text = report.tables(rows, fmt=cfg.format, console=True)
    outputs.write_text(out / "results.md", report.tables(rows, fmt="markdown") + "\n")
    report.plot(rows, out / "results.png")
    total = time.perf_counter() - t_start
    summary = {**part, "timings": {"total_s": total}, "config": dataclasses.asdict(cfg),
               "results": [str(p) for p in paths]}
    outputs.write_json(out / "summary.json", summary, indent=1)
    if verbose:
        print(text)
        print(f"total {total:.1f} s; {paths[0]}, {paths[1]}, {out / 'results.md'}, "
              f"{out / 'per_class.csv'}", flush=True)
    return {**summary, "rows": rows}


def run(cfg: eval_config.EvalConfig, *, verbose: bool = True) -> dict:
    """Evaluate every configured encoder on every test set; returns the summary (also
    out_dir/summary.json) with the result rows under "rows"."""
    t_start, out = time.perf_counter(), pathlib.Path(cfg.out_dir)
    eval_config.validate(cfg)
    cfg = eval_config.with_protocol(cfg)
    check_out_dir(out)
    if cfg.heads and not (cfg.encoders or cfg.random):
        return _run_heads(cfg, out, t_start, verbose)
    if cfg.heads:
        raise birdjepa.config.ConfigError(
            "config key 'heads': expected heads alone or encoders alone in one evaluation (a "
            "head is scored without a training split, probes need one), got both; run them "
            "with two out_dirs and merge them with python -m birdjepa.evaluate.report")
    plans = checks.build(cfg)
    encoders = load_encoders(cfg)
    for enc in (e for e in encoders if e.model is None):
        for tp in plans:
            external.check(enc.run_dir, tp.spec.name, len(tp.y_train), len(tp.y_test), cfg)
    log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if verbose else (lambda msg: None)
    log(f"checked {len(plans)} test set(s), {len(encoders)} encoder(s) in "
        f"{time.perf_counter() - t_start:.1f} s")
    t0 = time.perf_counter()
    emb = cache.embed_all(encoders, plans, cfg, out / "embeddings", verbose=verbose)
    check_finite(emb)
    t_embed = time.perf_counter() - t0
    rows, timings = [], {}
    for tp in plans:
        for enc in encoders:
            t1 = time.perf_counter()
            tr, te = emb[(enc.name, "train", tp.spec.name)], emb[(enc.name, "test", tp.spec.name)]
            rows += protocol.evaluate(tp, enc, tr, te, cfg, verbose=verbose)
            timings[f"{tp.spec.name}/{enc.name}"] = time.perf_counter() - t1
    paths = results.write(rows, out)
    text = report.tables(rows, fmt=cfg.format, console=True)
    outputs.write_text(out / "results.md", report.tables(rows, fmt="markdown") + "\n\n" +
                       report.provenance(rows, {e.name: e.objective for e in encoders}) + "\n")
    report.plot(rows, out / "results.png")
    total = time.perf_counter() - t_start
    summary = {
        "test_sets": {tp.spec.name: {"classes": list(tp.classes), "n_test": int(len(tp.y_test)),
                                     "n_train": int(len(tp.y_train)),
                                     **dataclasses.asdict(tp.spec)} for tp in plans},
        "encoders": [{k: v for k, v in dataclasses.asdict(e).items() if k != "model"}
                     for e in encoders],
        "timings": {"embed_s": t_embed, "probes_s": timings, "total_s": total},
        "config": dataclasses.asdict(cfg), "results": [str(p) for p in paths]}
    outputs.write_json(out / "summary.json", summary, indent=1)
    if verbose:
        print(text)
        print(f"total {total:.1f} s (embedding {t_embed:.1f} s, probes and intervals "
              f"{sum(timings.values()):.1f} s); {paths[0]}, {paths[1]}, "
              f"{out / 'results.md'}, {out / 'results.png'}", flush=True)
    return {**summary, "rows": rows}
