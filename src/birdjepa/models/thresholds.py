"""Per-class decision thresholds of a sigmoid head: calibrated on a labelled split, saved with
the model, used by `predict` and by `evaluate --heads`.

Calibration (`calibrate`, `python -m birdjepa.evaluate --heads MODEL --test_shards VAL
--calibrate RULE`), per class, over the class's scores on the split as candidate thresholds
(a detection is a probability >= the threshold):

* `precision=P`: the lowest threshold whose precision on the split is at least P (the most
  recall that keeps that precision; BirdNET-Pi users ask for this per species);
* `f1`: the threshold of the best F1 on the split (the highest such threshold on a tie).

A class without a positive in the split, or whose target precision no threshold reaches,
keeps DEFAULT and is listed under "fallback". The file, `thresholds.json` (FILE), holds
{"classes", "thresholds" (in the head's class order), "rule", "split", "fallback"}; it lives in
a run directory (calibration writes it there) and is copied into an export's config.json
(`head.thresholds`, `head.thresholds_rule`) and named on its model card.
"""

import json
import os
import pathlib

import numpy as np

import birdjepa.common.outputs as outputs

FILE = "thresholds.json"
DEFAULT = 0.5
"""A sigmoid head's documented no-call threshold: what a class without calibration keeps."""


def parse_rule(rule: str) -> float | None:
    """The target precision of "precision=P" (0 < P <= 1), None for "f1"; else ValueError."""
    if rule == "f1":
        return None
    name, _, value = str(rule).partition("=")
    try:
        p = float(value)
    except ValueError:
        p = float("nan")
    if name != "precision" or not 0.0 < p <= 1.0:
        raise ValueError(f"calibrate: expected 'f1' or 'precision=P' with P in (0, 1], got "
                         f"{rule!r}")
    return p


def calibrate(scores_nc: np.ndarray, labels_nc: np.ndarray, rule: str
              ) -> tuple[np.ndarray, list[int]]:
    """(thresholds (c,), indices of the classes left at DEFAULT) by `rule` (module docstring)."""
    target = parse_rule(rule)
    s = np.asarray(scores_nc, np.float64)
    y = np.asarray(labels_nc, bool)
    out = np.full(s.shape[1], DEFAULT)
    fallback = []
    for c in range(s.shape[1]):
        if not y[:, c].any():
            fallback.append(c)
            continue
        order = np.argsort(-s[:, c], kind="stable")
        sc, yc = s[order, c], y[order, c]
        last = np.r_[sc[1:] != sc[:-1], True]  # the end of each group of tied scores
        tp, seen = np.cumsum(yc)[last], np.arange(1, len(sc) + 1)[last]
        prec, rec, thr = tp / seen, tp / yc.sum(), sc[last]
        if target is None:
            f1 = np.where(prec + rec > 0, 2 * prec * rec / np.maximum(prec + rec, 1e-300), 0)
            out[c] = thr[int(np.argmax(f1))]  # the first best: the highest threshold
        else:
            ok = np.flatnonzero(prec >= target - 1e-12)
            if not len(ok):
                fallback.append(c)
                continue
            out[c] = thr[ok[-1]]
    return out, fallback


def save(path: str | os.PathLike, classes: list[str], thr: np.ndarray, rule: str, split: str,
         fallback: list[int]) -> pathlib.Path:
    """Write FILE's content to `path` (replaced only if an earlier calibration wrote it)."""
    path = pathlib.Path(path)
    if path.exists() and not outputs.ours(path):
        raise ValueError(f"calibrate: expected {str(path)!r} to be new or an earlier "
                         "calibration's, got a file calibration did not write")
    outputs.write_json(path, {"classes": list(classes), "thresholds": [float(t) for t in thr],
                              "rule": rule, "split": str(split),
                              "fallback": [classes[c] for c in fallback]}, indent=1)
    outputs.record(path)
    return path


def check(d: dict, what: str, classes: list[str] | None = None) -> dict:
    """A thresholds dict: classes (names), thresholds (numbers in [0, 1], one per class), and,
    with `classes`, every one of them; a one-line ValueError naming `what` otherwise."""
    names, thr = d.get("classes"), d.get("thresholds")
    if not (isinstance(names, list) and isinstance(thr, list) and len(names) == len(thr)
            and all(isinstance(t, int | float) and 0.0 <= t <= 1.0 for t in thr)):
        raise ValueError(f"{what}: expected classes and as many thresholds in [0, 1], got "
                         f"{len(names) if isinstance(names, list) else names!r} classes and "
                         f"{thr if not isinstance(thr, list) else len(thr)} thresholds")
    if classes is not None:
        missing = [c for c in classes if c not in names]
        if missing:
            raise ValueError(f"{what}: expected a threshold for every class of the model, got "
                             f"none for {missing[:10]}")
    return d


def load(path: str | os.PathLike) -> dict:
    """FILE's content, checked."""
    try:
        d = json.loads(pathlib.Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"thresholds {str(path)!r}: expected a thresholds.json, got "
                         f"{type(e).__name__}: {e}") from None
    return check(d if isinstance(d, dict) else {}, f"thresholds {str(path)!r}")


def aligned(d: dict, classes: list[str]) -> np.ndarray:
    """The thresholds of `d` in the order of `classes` (each must have one)."""
    at = dict(zip(d["classes"], d["thresholds"], strict=True))
    return np.asarray([at[c] for c in classes], np.float64)


def beside(directory: str | os.PathLike, classes: list[str]) -> tuple[np.ndarray, str] | None:
    """(thresholds in `classes` order, rule) of a FILE in `directory`, or None."""
    path = pathlib.Path(directory) / FILE
    if not path.is_file():
        return None
    d = load(path)
    check(d, f"thresholds {str(path)!r}", classes)
    return aligned(d, classes), str(d.get("rule", ""))
