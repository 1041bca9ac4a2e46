"""Class probabilities of every window from a model's class head (the supervised head, else the
online linear probe), as the detection rows BirdNET users know: `detections(model, source)`
(`birdjepa.detections`); its command line is `python -m birdjepa.predict` (birdjepa.predict)."""

import argparse
import os
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa

import birdjepa.models.artifact as artifact
import birdjepa.models.outfile as outfile
import birdjepa.models.recordings as recordings
import birdjepa.models.thresholds as thresholds

SUFFIXES = (".csv", ".parquet", ".npz")
NO_CALL_THRESHOLD = 0.5
"""A sigmoid head's documented decision threshold: a class is detected at this probability or
more, and a window whose every class is below it holds no call (docs/guides/models.md)."""
SOFTMAX_MIN_CONF = 0.1
"""--min_conf's default for a softmax head (BirdNET-Analyzer's): the class probabilities sum to
one, so a 0.5 cut would hide every call shared between similar species."""


def probabilities(m: artifact.Model, src: recordings.Source, args,
                  rates: dict | None = None) -> tuple[dict, np.ndarray]:
    """(where columns of every window, (windows, classes) probabilities); `rates` is filled
    (row -> the recording's own sample rate)."""
    if m.head is None:
        raise ValueError(f"MODEL {m.source!r} has no class head (an imported encoder): train a "
                         "supervised or probe run on it (init_encoder) and predict with that run")
    w = recordings.windows(m, args, src)
    pool = m.encoder.cfg.pool
    durations: dict[int, float] = {}
    out = recordings.encode(m, src, w, (pool,), batch_size=args.batch_size,
                        n_workers=args.n_workers, audio_column=args.audio_column,
                        progress=not args.quiet, durations=durations,
                        settings=recordings.files(args), rates=rates)
    probs = head_probabilities(m, out[pool].reshape(len(out["row"]), -1),
                               activation_of(m, args))
    return recordings.where(src, out, w, durations), probs


HEAD_BLOCK = 4096
"""Rows of embeddings through the head at a time (memory flat in an XCL-sized head)."""


def head_probabilities(m: artifact.Model, emb_nd: np.ndarray, activation: str) -> np.ndarray:
    """(rows, classes) float32 probabilities of the head on pooled embeddings: softmax or
    sigmoid of its logits, HEAD_BLOCK rows at a time."""
    head = eqx.filter_jit(lambda h, x: jax.nn.softmax(h(x), axis=-1) if activation == "softmax"
                          else jax.nn.sigmoid(h(x)))
    emb = jnp.asarray(emb_nd)
    return np.concatenate([np.asarray(head(m.head, emb[i:i + HEAD_BLOCK]))
                           for i in range(0, max(len(emb), 1), HEAD_BLOCK)])


def rows(where: dict, probs_wc: np.ndarray, classes: list[str], *, min_conf,
         top_k: int, keep: np.ndarray | None = None) -> dict[str, pa.Array]:
    """One row per (window, class) among the window's top_k with probability >= min_conf (one
    number, or one per class: `floors`): every `where` column (file, or row and the dataset's
    columns; the times), then class, confidence and class_index. `keep`: the only classes
    ranked (a species list)."""
    floor_c = np.broadcast_to(np.asarray(min_conf, np.float64), (probs_wc.shape[1],))
    if keep is not None:  # the others never rank: below any probability
        probs_wc = np.where(np.isin(np.arange(probs_wc.shape[1]), keep)[None, :], probs_wc,
                            -1.0)
    order = np.argsort(-probs_wc, axis=1, kind="stable")[:, :max(top_k, 0)]
    win, rank = np.nonzero(np.take_along_axis(probs_wc, order, 1) >= floor_c[order])
    cls = order[win, rank]
    take = pa.array(win, pa.int64())
    return {**{k: c.take(take) for k, c in where.items()},  # as embed's (recordings.where)
            "class": pa.array([classes[c] for c in cls], pa.string()),
            "confidence": pa.array(probs_wc[win, cls].astype(np.float32)),
            "class_index": pa.array(cls.astype(np.int32))}


def species_list(path: str | os.PathLike) -> list[str]:
    """The class names of species list `path`: one a line, blank lines and # comments out."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--classes: expected a text file of class names, got {str(path)!r} "
                         f"({type(e).__name__}: {e})") from None
    names = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip()
             .startswith("#")]
    if not names:
        raise ValueError(f"--classes: expected at least one class name in {str(path)!r}, got "
                         "none")
    return names


def keep_classes(m: artifact.Model, path: str | os.PathLike | None) -> np.ndarray | None:
    """Indices of the head's classes that species list `path` keeps (None: every class); a
    name the head does not have is an error naming it, before any compute."""
    if path is None:
        return None
    names = species_list(path)
    unknown = [n for n in names if n not in m.classes]
    if unknown:
        raise ValueError(f"--classes {str(path)!r}: expected class names of the model, got "
                         f"{len(unknown)} it does not have: "
                         + ", ".join(repr(n) for n in unknown[:10])
                         + f" (the model's: {', '.join(m.classes[:8])}"
                         + (", ..." if len(m.classes) > 8 else "") + ")")
    return np.asarray(sorted({m.classes.index(n) for n in names}), np.int64)


def activation_of(m: artifact.Model, args) -> str:
    """How the head's logits become probabilities: --activation, else as it was trained."""
    return m.activation if args.activation == "auto" else args.activation


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def min_conf_of(m: artifact.Model, args) -> np.ndarray | float:
    """The smallest confidence written, per class or one for all: --thresholds NUMBER or FILE
    (a thresholds.json: birdjepa.models.thresholds); else --min_conf; else (auto) the model's
    calibrated thresholds; else the head's default, NO_CALL_THRESHOLD (sigmoid) or
    SOFTMAX_MIN_CONF."""
    given = getattr(args, "thresholds", "auto")
    if given not in (None, "auto"):
        if _number(given) is not None:
            return float(given)
        d = thresholds.load(given)
        thresholds.check(d, f"--thresholds {given!r}", list(m.classes))
        return thresholds.aligned(d, list(m.classes))
    if args.min_conf is not None:
        return args.min_conf
    if m.thresholds is not None and args.activation in ("auto", m.activation):
        return m.thresholds  # calibrated on the probabilities the head gives as trained
    return NO_CALL_THRESHOLD if activation_of(m, args) == "sigmoid" else SOFTMAX_MIN_CONF


def check_args(args: argparse.Namespace, *, out_required: bool = True) -> None:
    """Every option and the output path, before any compute."""
    if out_required and ((args.out is None) == (args.out_dir is None) or (
            args.out_dir and args.format != "raven")):
        raise ValueError("--out: expected one output, --out FILE or (with --format raven) "
                         f"--out_dir DIR, got --out {args.out} --out_dir {args.out_dir}")
    if args.out_dir is not None:
        outfile.check_out(pathlib.Path(args.out_dir) / "x.txt", (".txt",), "--out_dir")
    recordings.check_args(args, (".txt",) if args.format == "raven" else SUFFIXES)
    if args.top_k < 1:
        raise ValueError(f"--top_k: expected an integer >= 1, got {args.top_k}")
    if args.min_conf is not None and not 0.0 <= args.min_conf <= 1.0:
        raise ValueError(f"--min_conf: expected a confidence in [0, 1], got {args.min_conf}")
    given = getattr(args, "thresholds", "auto")
    if given not in (None, "auto"):
        if args.min_conf is not None:
            raise ValueError(f"--thresholds {given}: expected it or --min_conf, got both "
                             f"(--min_conf {args.min_conf})")
        x = _number(given)
        if x is not None and not 0.0 <= x <= 1.0:
            raise ValueError(f"--thresholds: expected a confidence in [0, 1], auto or a "
                             f"thresholds.json, got {given}")
        if x is None and not pathlib.Path(given).is_file():
            raise ValueError(f"--thresholds: expected auto, a number in [0, 1] or a "
                             f"thresholds.json file, got {given!r}, which does not exist")


def detections(model, source, *, window_s: float | None = None, hop_s: float | None = None,
               centre: bool = False, top_k: int = 3, min_conf: float | None = None,
               activation: str = "auto", batch_size: int = 64, n_workers: int = 2,
               audio_column: str = "audio", audio_root: str = "",
               path_map: dict[str, str] | None = None, windows: str = "auto",
               classes: str | os.PathLike | None = None, thresholds: str = "auto"
               ) -> dict[str, pa.Array]:
    """`birdjepa.detections(model, source)`: the detection rows `python -m birdjepa.predict` writes
    ({column: pyarrow array}; `pyarrow.table(rows)` makes the table). `model`: a run or export
    directory or a `birdjepa.models.Model`; `source`: what SOURCE takes (audio files,
    directories, shards) as a path or a list of them; `window_s` None: the model's clip, as the
    command line and `birdjepa.embeddings`; `audio_root` / `path_map`: where a table's path-only
    audio is now (birdjepa.data.paths); `windows`: as --windows (a table whose rows are windows
    gives one per row); `classes`: a species list file, as --classes; `thresholds`: as
    --thresholds."""
    args = argparse.Namespace(window_s=window_s, hop_s=hop_s, centre=centre, top_k=top_k,
                              windows=windows, thresholds=thresholds,
                              min_conf=min_conf, activation=activation, batch_size=batch_size,
                              n_workers=n_workers, audio_column=audio_column, quiet=True,
                              out=None, out_dir=None, format="table", audio_root=audio_root,
                              path_map=path_map)
    check_args(args, out_required=False)
    m = model if isinstance(model, artifact.Model) else artifact.open_model(model)
    src = recordings.resolve([str(s) for s in (source if isinstance(source, list | tuple)
                                           else [source])], audio_column)
    recordings.check_files(src, audio_column, recordings.files(args))
    keep = keep_classes(m, classes)
    where, probs = probabilities(m, src, args)
    return rows(where, probs, m.classes, min_conf=min_conf_of(m, args), top_k=top_k, keep=keep)
