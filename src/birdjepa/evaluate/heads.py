"""A trained model's own head scored on a labelled split, the way BirdSet reports its headline
numbers: `python -m birdjepa.evaluate --heads MODEL... --test_shards DIR:SPLIT`.

Each MODEL (a run directory, an export directory: anything `birdjepa.models.open_model` opens
that has a class head) predicts one window per test row (the test set's `segment`: "centre" for
pre-cut clips such as BirdSet's test_5s or a folder of clips, "columns" for a row's [start_time,
end_time] inside its recording, as a `from_annotations` split holds them) through its own head
(softmax or sigmoid, as trained). Its classes are matched to the split's ClassLabel names by name
(BirdSet narrows a 9,736-class XCL model to each site's classes the same way): the metrics are
computed over the split's classes the model has; the split's classes it lacks and its classes
the split lacks are both reported (`classes_missing`, `classes_extra` in summary.json, and a
warning line each).

Rows are the probes' rows (`birdjepa.evaluate.results`), probe "head", k "all", seed 0: the
ranking metrics (`birdjepa.evaluate.metrics.METRICS`) with the same bootstrap intervals over
test segments, plus macro `precision`, `recall` and `f1` at the model's decision rule (a sigmoid
head: its per-class thresholds when it has them, else `DEFAULT_THRESHOLD`; a softmax head: the
top class), macro over the classes with a positive in the split. `per_class.csv` holds each
class's positives, AP, AUROC, threshold, precision, recall and F1.
"""

import dataclasses
import hashlib
import json
import pathlib
import time
import warnings

import equinox as eqx
import jax
import numpy as np
import pyarrow as pa
import pyarrow.csv

import birdjepa.common.outputs as outputs
import birdjepa.config
import birdjepa.data.table as table
import birdjepa.evaluate.checks as checks
import birdjepa.evaluate.eval_config as eval_config
import birdjepa.evaluate.intervals as intervals
import birdjepa.evaluate.metrics as metrics
import birdjepa.evaluate.progress as progress
import birdjepa.models
import birdjepa.models.detect
import birdjepa.models.features as features
import birdjepa.models.inference as inference
import birdjepa.models.thresholds as thresholds

DEFAULT_THRESHOLD = birdjepa.models.detect.NO_CALL_THRESHOLD
"""A sigmoid head's decision threshold when the model carries none of its own (the documented
no-call threshold, predict's default --min_conf for such a head)."""


@dataclasses.dataclass(frozen=True)
class Split:
    """One test set, checked for head scoring: its class names and multi-hot labels."""

    spec: eval_config.TestSet
    classes: tuple[str, ...]
    y: np.ndarray
    """(rows, classes) bool."""


def split(cfg: eval_config.EvalConfig, ts: eval_config.TestSet) -> Split:
    """The test split's checks (columns, audio files, an int or list<int> label column with
    ClassLabel names: the names are how a head's classes are matched) and its labels."""
    fail = checks._Fail(ts.name)
    checks._columns(ts.test_shards, "test_shards", [("audio_column", cfg.audio_column),
                                                    ("test_label_column", ts.test_label_column)],
                    fail)
    checks._audio_files(cfg, ts, "test_shards", fail)
    checks.check_segment(cfg, ts, fail)
    te = checks._labels(ts.test_shards, ts.test_label_column, "test_label_column", fail)
    names = table.class_names(ts.test_shards, ts.test_label_column)
    if names is None:
        raise fail("test_label_column", "a label column with ClassLabel names (a head's classes "
                   "are matched to the split's by name)", f"{ts.test_label_column!r} without names")
    y = checks._hot(te, ts.test_label_column, len(names), "test_label_column", fail)
    if not y.any():
        raise fail("test_label_column", "at least one positive label (every metric would be "
                   "NaN)", f"{len(y)} rows of {ts.test_shards!r} without one")
    return Split(ts, tuple(names), y)


def open_head(spec: str) -> birdjepa.models.Model:
    """The model `spec` names, with its head; a ConfigError naming it otherwise."""
    try:
        m = birdjepa.models.open_model(spec)
    except Exception as e:
        raise birdjepa.config.ConfigError(
            f"config key 'heads': expected a run or export directory with a class head, got "
            f"{spec!r} ({type(e).__name__}: {' '.join(str(e).split())})") from None
    if m.head is None or not m.classes:
        raise birdjepa.config.ConfigError(
            f"config key 'heads': expected a model with a class head and class names, got "
            f"{spec!r} (an encoder alone: evaluate it with --encoders and probes)")
    return m


def mapping(model_classes, split_classes) -> tuple[np.ndarray, np.ndarray, list, list]:
    """(model columns, split columns) of the classes both have, matched by name, in the split's
    order; the split's classes the model lacks; the model's classes the split lacks."""
    at = {c: i for i, c in enumerate(model_classes)}
    both = [j for j, c in enumerate(split_classes) if c in at]
    missing = [c for c in split_classes if c not in at]
    extra = sorted(set(model_classes) - set(split_classes))
    return (np.asarray([at[split_classes[j]] for j in both], np.int64),
            np.asarray(both, np.int64), missing, extra)


def decision_thresholds(m: birdjepa.models.Model) -> np.ndarray | None:
    """The model's per-class decision thresholds: its calibrated ones, else DEFAULT_THRESHOLD
    for a sigmoid head; None for an uncalibrated softmax head (its decision: the top class)."""
    if m.thresholds is not None:
        return np.asarray(m.thresholds, np.float64)
    if m.activation == "softmax":
        return None
    return np.full(len(m.classes), DEFAULT_THRESHOLD)


def calibrated(cfg: eval_config.EvalConfig, m: birdjepa.models.Model, spec: str, sp: Split,
               probs: np.ndarray, cols_m: np.ndarray, cols_s: np.ndarray,
               out: pathlib.Path) -> None:
    """`cfg.calibrate`: the head's per-class thresholds fit on this split
    (birdjepa.models.thresholds.calibrate; a class the split lacks keeps the default), saved as
    thresholds.json in the model's directory (a run or export: where open_model reads them)
    and in out_dir, and set on `m` for this scoring."""
    y_m = np.zeros(probs.shape, bool)
    y_m[:, cols_m] = sp.y[:, cols_s]
    thr, fallback = thresholds.calibrate(probs, y_m, cfg.calibrate)
    for d in ([pathlib.Path(spec)] if pathlib.Path(spec).is_dir() else []) + [out]:
        d.mkdir(parents=True, exist_ok=True)
        try:  # a thresholds.json calibration did not write is the user's: never replaced
            thresholds.save(d / thresholds.FILE, list(m.classes), thr, cfg.calibrate,
                            str(sp.spec.test_shards), fallback)
        except ValueError as e:
            raise birdjepa.config.ConfigError(str(e)) from None
    m.thresholds, m.thresholds_rule = thr, cfg.calibrate


def probabilities(m: birdjepa.models.Model, cfg: eval_config.EvalConfig, ts: eval_config.TestSet,
                  n_rows: int, *, verbose: bool) -> np.ndarray:
    """(rows, model classes) probabilities of one window per test row, as the head gives them."""
    w = features.Windows.for_model(
        m.audio, window_s=None, centre=True, segment=cfg.segment,
        segment_columns=(cfg.segment_start_column, cfg.segment_end_column))
    files = {k: v for k, v in (("audio_root", ts.audio_root), ("path_map", ts.path_map)) if v}
    pool = m.encoder.cfg.pool
    with progress.Progress(f"head {name_of(m.source)} on {ts.name}", n_rows, unit="windows",
                           enabled=verbose) as bar:
        def counted(batches):
            for b in batches:
                bar.update(len(b[1]))
                yield b
        got = inference.encode(m.encoder, counted(features.features(
            ts.test_shards, w, batch_size=cfg.batch_size, audio_column=cfg.audio_column,
            n_workers=cfg.n_workers, **files)), (pool,), batch_size=cfg.batch_size)
    if not np.array_equal(got["row"], np.arange(n_rows)):
        lost = sorted(set(range(n_rows)) - set(got["row"].tolist()))
        raise birdjepa.config.ConfigError(
            f"test set {ts.name!r}: expected one window per row ({n_rows}), got "
            f"{len(got['row'])}: rows {lost[:10]} could not be read (see the warning above)")
    return birdjepa.models.detect.head_probabilities(
        m, got[pool].reshape(n_rows, -1), m.activation).astype(np.float64)


def decisions(probs_nc: np.ndarray, thr_c: np.ndarray | None) -> np.ndarray:
    """(rows, classes) bool detections: probability >= the class's threshold, or (softmax,
    `thr_c` None) the top class of each row."""
    if thr_c is None:
        out = np.zeros(probs_nc.shape, bool)
        out[np.arange(len(probs_nc)), probs_nc.argmax(1)] = True
        return out
    return probs_nc >= thr_c[None, :]


THRESHOLD_METRICS = metrics.THRESHOLD_METRICS


def at_threshold(pred_nc: np.ndarray, y_nc: np.ndarray, weights=None) -> dict[str, np.ndarray]:
    """{precision, recall, f1: per-class (B, classes) values, macro (B,)}. Per class:
    precision = TP / (TP + FP) (0 when it detects nothing), recall = TP / positives, F1 their
    harmonic mean (0 when both are 0); NaN for a class without positives, left out of the
    macro mean (cmAP's convention). `weights` (B, rows): bootstrap counts; None: one pass."""
    p = pred_nc.astype(np.float32)
    t = y_nc.astype(np.float32)
    w = np.ones((1, len(p)), np.float32) if weights is None else np.asarray(weights, np.float32)
    tp = w @ (p * t)
    det = w @ p
    pos = w @ t
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(det > 0, tp / np.maximum(det, 1e-30), 0.0)
        rec = np.where(pos > 0, tp / np.maximum(pos, 1e-30), np.nan)
        f1 = np.where(prec + rec > 0, 2 * prec * rec / (prec + rec), 0.0)
    prec = np.where(pos > 0, prec, np.nan)
    f1 = np.where(pos > 0, f1, np.nan)
    per = {"precision": prec, "recall": rec, "f1": f1}
    return {"per_class": per, **{k: metrics._nanmean(v) for k, v in per.items()}}


def name_of(spec: str) -> str:
    """A head's name in the tables: its directory's name."""
    return pathlib.Path(str(spec)).resolve().name


def digest(m: birdjepa.models.Model) -> str:
    """sha256 over the shapes, dtypes and bytes of the encoder's and the head's arrays, and
    the class names: what a merged result row is keyed on."""
    h = hashlib.sha256(json.dumps(list(m.classes)).encode())
    for leaf in jax.tree.leaves(eqx.filter((m.encoder, m.head), eqx.is_array)):
        a = np.asarray(leaf)
        h.update(f"{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _row_base(cfg, sp: Split, m, spec: str, counts: dict) -> dict:
    return {"test_set": sp.spec.name, "encoder": name_of(spec), "probe": "head", "k": "all",
            "seed": 0, "n_train_recordings": 0, "n_train_windows": 0, "n_steps": 0,
            "loss_first": float("nan"), "loss_last": float("nan"), **counts,
            "encoder_run_dir": str(pathlib.Path(str(spec)).resolve()), "encoder_step": -1,
            "encoder_config_hash": "", "encoder_digest": digest(m),
            "train_shards": "", "test_shards": str(sp.spec.test_shards), "train_windows": "",
            "window_s": float(m.audio["window_s"]), "hop_s": float("nan"),
            "pool": m.encoder.cfg.pool, "n_boot": cfg.n_boot, "protocol": "", "sampling": "",
            **{f"probe_{k}": v for k, v in dataclasses.asdict(cfg.probe).items()}}


def score(cfg: eval_config.EvalConfig, sp: Split, spec: str, m: birdjepa.models.Model,
          out: pathlib.Path, *, verbose: bool = True) -> tuple[list[dict], list[dict], dict]:
    """(result rows, per-class rows, mapping report) of head `m` (opened from `spec`) on split
    `sp` (with `cfg.calibrate`, its thresholds fit here first: `calibrated`)."""
    cols_m, cols_s, missing, extra = mapping(m.classes, sp.classes)
    if not len(cols_s):
        raise birdjepa.config.ConfigError(
            f"test set {sp.spec.name!r}: expected classes shared by the split and the head of "
            f"{spec!r}, got none (split: {list(sp.classes[:5])}..., model: {m.classes[:5]}...)")
    for what, names in (("of the split the model lacks (not scored)", missing),
                        ("of the model the split lacks (ignored)", extra)):
        if names:
            warnings.warn(f"test set {sp.spec.name!r}, head {name_of(spec)!r}: {len(names)} class(es) "
                          f"{what}: {', '.join(names[:10])}"
                          + (f" and {len(names) - 10} more" if len(names) > 10 else ""),
                          RuntimeWarning, stacklevel=2)
    t0 = time.perf_counter()
    probs = probabilities(m, cfg, sp.spec, len(sp.y), verbose=verbose)
    if cfg.calibrate:
        calibrated(cfg, m, spec, sp, probs, cols_m, cols_s, out)
    scores, y = probs[:, cols_m], sp.y[:, cols_s]
    thr_all = decision_thresholds(m)
    thr = None if thr_all is None else thr_all[cols_m]
    pred = decisions(probs, thr_all)[:, cols_m] if thr is None else decisions(scores, thr)
    cv = metrics.curves(scores, y)  # one pass: the macro metrics and the per-class table
    values = {k: float(v[0]) for k, v in metrics.from_curves(
        cv, metrics.top1(scores, y)).items()}
    th = at_threshold(pred, y)
    values.update({k: float(th[k][0]) for k in THRESHOLD_METRICS})
    reps = intervals.replicates([scores], y, n_boot=cfg.n_boot, seed=0)
    th_reps = {k: [] for k in THRESHOLD_METRICS}
    for w in intervals.weight_chunks(len(y), cfg.n_boot, 0, max_cells=1 << 26):
        got = at_threshold(pred, y, w)
        for k in THRESHOLD_METRICS:
            th_reps[k].append(got[k])
    reps.update({k: np.concatenate(v)[None, :] for k, v in th_reps.items()})
    chance = metrics.chance(y)
    counts = metrics.counts(y)
    base = _row_base(cfg, sp, m, spec, counts) | {"fit_s": time.perf_counter() - t0}
    rows = []
    for name in metrics.METRICS + THRESHOLD_METRICS:
        s = intervals.summarise([values[name]], reps[name], few_shot=False)
        rows.append({**base, "metric": name, "value": values[name], "n_seeds": 1,
                     "mean": s.mean, "sd": s.sd, "min": s.min, "max": s.max, "lo": s.lo,
                     "hi": s.hi, "interval": s.method, "chance": chance.get(name, float("nan"))})
    ap, auc = cv["ap"][0], cv["auroc"][0]
    per = th["per_class"]
    per_class = [{"test_set": sp.spec.name, "model": name_of(spec), "class": sp.classes[j],
                  "n_positives": int(y[:, i].sum()), "ap": float(ap[i]), "auroc": float(auc[i]),
                  "threshold": float("nan") if thr is None else float(thr[i]),
                  **{k: float(per[k][0, i]) for k in THRESHOLD_METRICS}}
                 for i, j in enumerate(cols_s)]
    report = {"classes_scored": len(cols_s), "classes_missing": missing, "classes_extra": extra,
              "decision": "top class" if thr is None else "per-class thresholds"
              if m.thresholds is not None else f">= {DEFAULT_THRESHOLD}",
              **({"thresholds_rule": m.thresholds_rule} if m.thresholds is not None else {})}
    return rows, per_class, report


def run(cfg: eval_config.EvalConfig, out: pathlib.Path, *, verbose: bool = True
        ) -> tuple[list[dict], dict]:
    """Every head on every test set: (result rows, summary part); writes per_class.csv."""
    splits = [split(cfg, ts) for ts in eval_config.test_sets(cfg)]
    models = {spec: open_head(spec) for spec in cfg.heads}  # each opens before any embedding
    rows, per_class, mapped = [], [], {}
    for sp in splits:
        for spec, m in models.items():
            r, pc, rep = score(cfg, sp, spec, m, out, verbose=verbose)
            rows += r
            per_class += pc
            mapped[f"{sp.spec.name}/{name_of(spec)}"] = rep
    out.mkdir(parents=True, exist_ok=True)
    with outputs.replacing(out / "per_class.csv") as tmp:
        pyarrow.csv.write_csv(pa.Table.from_pylist(per_class), tmp)
    outputs.record(out / "per_class.csv")
    summary = {"heads": mapped, "test_sets": {sp.spec.name: {
        "classes": list(sp.classes), "n_test": int(len(sp.y)), **dataclasses.asdict(sp.spec)}
        for sp in splits}}
    return rows, summary
