"""Issue 36 item 2: does a demo model say "nothing here" on the demo soundscape, and is its
top-1 there as good as on clips?

    .venv/bin/python docs/issues/024-soundscape-abstain/study.py RUN_DIR [--soundscape DIR]

RUN_DIR: a finished supervised run (`make demo` writes runs/demo). Over the demo soundscape
(data/demo/soundscape: 288 five-second segments of 24 one-minute mixtures, 100 without a bird),
the trained head's probabilities per segment, as predict reports them by default (the head's
activation as trained: softmax for class ids, sigmoid for a list<int> label column;
`birdjepa.models.detect.probabilities`, centre window = the segment): for segments without a
bird, the top probability (every one is a detection at a threshold below it); for labelled ones,
top-1 correct when the top class is one of the segment's labels, and detected when a labelled
class reaches the threshold (a head with an explicit "noise" class: over the bird classes); cmAP over the segments (BirdSet's metric); beside it the run's own
held-out clip accuracy (eval/head_acc in metrics.jsonl). Then the model on 5 s of digital
silence and of white noise at -30 dBFS: what it says about inputs with no bird at all.
"""

import argparse
import glob
import json
import pathlib
import tempfile

import numpy as np
import pyarrow as pa
import soundfile

import birdjepa.evaluate.metrics as metrics
import birdjepa.models.artifact
import birdjepa.models.detect as detect
import birdjepa.models.recordings

THRESHOLDS = (0.1, 0.3, 0.5, 0.8, 0.9)


def head_probs(m, source, *, centre: bool) -> tuple[dict, np.ndarray]:
    args = argparse.Namespace(window_s=5.0, hop_s=None, centre=centre, top_k=1, min_conf=0.0,
                              activation="auto", batch_size=64, n_workers=2,
                              audio_column="audio", quiet=True, out=None, out_dir=None,
                              format="table", audio_root="", path_map=None)
    src = birdjepa.models.recordings.resolve([str(source)], "audio")
    return detect.probabilities(m, src, args)


def labels(soundscape: pathlib.Path) -> list[list[int]]:
    out = []
    for f in sorted(glob.glob(str(soundscape / "*.arrow"))):
        with pa.memory_map(f) as mm:
            t = pa.ipc.open_stream(mm).read_all()
        out += t.column("ebird_code_multilabel").to_pylist()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--soundscape", default="data/demo/soundscape")
    a = p.parse_args()
    m = birdjepa.models.artifact.open_model(a.run_dir)
    where, probs = head_probs(m, a.soundscape, centre=True)
    # A head with an explicit "noise" class (the last): the birds' probabilities are the rest.
    birds = [i for i, c in enumerate(m.classes) if c != "noise"]
    probs = probs[:, birds]
    y = labels(pathlib.Path(a.soundscape))
    rows = where["row"].to_numpy()
    assert len(rows) == len(y), (len(rows), len(y))
    y = [y[r] for r in rows]
    top, arg = probs.max(1), probs.argmax(1)
    empty = np.array([len(v) == 0 for v in y])
    hit = np.array([arg[i] in y[i] for i in range(len(y))])
    print(f"head activation: {m.activation}; soundscape segments: {len(y)}, without a bird "
          f"{empty.sum()}, labelled {(~empty).sum()}")
    print(f"no-call segments: top probability median {np.median(top[empty]):.3f}, "
          f"min {top[empty].min():.3f}; above " + ", ".join(
              f"{t}: {np.mean(top[empty] >= t):.0%}" for t in THRESHOLDS))
    one = np.array([len(v) == 1 for v in y])
    print(f"labelled segments: top-1 in the labels {hit[~empty].mean():.3f} "
          f"({hit[~empty].sum()}/{(~empty).sum()}; one species {hit[one].mean():.3f} of "
          f"{one.sum()}, several {hit[~empty & ~one].mean():.3f} of {(~empty & ~one).sum()}); "
          f"top probability median {np.median(top[~empty]):.3f}")
    y_nc = np.zeros(probs.shape, bool)
    for i, v in enumerate(y):
        y_nc[i, v] = True
    print(f"cmAP over the segments {float(metrics.cmap(probs, y_nc)):.3f}; labelled segments "
          "with a labelled class >= threshold (recall) / no-call segments clear: " + ", ".join(
              f"{t}: {np.mean([(probs[i, y[i]] >= t).any() for i in np.where(~empty)[0]]):.0%}"
              f" / {np.mean(top[empty] < t):.0%}" for t in THRESHOLDS))
    # Can the top probability alone tell a bird from none? AUROC (1.0: a threshold separates).
    pos, neg = top[~empty], top[empty]
    auroc = (np.mean(pos[:, None] > neg[None, :]) + 0.5 * np.mean(pos[:, None] == neg[None, :]))
    print(f"top probability as a bird-present score: AUROC {auroc:.3f}")
    logged = [json.loads(line) for line in open(pathlib.Path(a.run_dir) / "metrics.jsonl")]
    acc = [r["eval/head_acc"] for r in logged if "eval/head_acc" in r]
    print(f"held-out clips (eval/head_acc, last eval): {acc[-1]:.3f}" if acc else
          "held-out clips: no eval/head_acc logged")
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        for name, wave in (("digital silence", np.zeros(160000, np.float32)),
                           ("white noise -30 dBFS", (10 ** (-30 / 20) * rng.standard_normal(
                               160000)).astype(np.float32))):
            path = pathlib.Path(tmp) / "x.wav"
            soundfile.write(path, wave, 32000, subtype="FLOAT")
            _, pr = head_probs(m, path, centre=False)
            c = int(pr[0].argmax())  # may be "noise" itself
            print(f"{name}: top class {m.classes[c]} at {pr[0, c]:.3f}")


if __name__ == "__main__":
    main()
