"""Self-training from k labels (an experiment of issue 49): the rows a model fine-tuned on the
k-shot split of (K, SEED) is most sure of, written as a split with its labels (pseudo-labels)
beside the k true ones. Class-balanced: each class gets the same number of pseudo-labelled
rows, FRAC of the rows per class, from the rows predicted as it, most confident first.

  python docs/issues/031-few-labels/pseudo.py SRC PREDICTIONS.parquet K SEED FRAC OUT_DIR

PREDICTIONS: `python -m birdjepa.predict RUN SRC --min_conf 0 --top_k N_CLASSES --out P`.
Prints the pseudo-labels' accuracy against SRC's hidden labels (the demo has them all)."""

import sys

import numpy as np
import pandas as pd

import birdjepa.data.fewshot as fewshot
import birdjepa.data.table as table


def main(src, pred_path, k, seed, frac, out_dir):
    k, seed, frac = int(k), int(seed), float(frac)
    y = np.asarray(table.read(src, ["label"]).column(0).to_pylist())
    n, c = len(y), int(y.max()) + 1
    true = fewshot.sample(np.eye(c, dtype=bool)[y], k, seed=seed,
                          eligible=fewshot.lenient(src).eligible)
    d = pd.read_parquet(pred_path)
    p = d.pivot_table(index=["row", "start_s"], columns="class_index", values="confidence",
                      aggfunc="first").fillna(0.0).groupby(level=0).mean()
    prob = np.zeros((n, c))
    prob[p.index.to_numpy()[:, None], p.columns.to_numpy()[None, :]] = p.to_numpy()
    guess, conf = prob.argmax(1), prob.max(1)
    free = np.ones(n, bool)
    free[true] = False
    per = int(np.ceil(frac * n / c))
    pseudo = []
    for j in range(c):  # the rows predicted as class j, most confident first
        r = np.flatnonzero(free & (guess == j))
        pseudo.append(r[np.argsort(-conf[r], kind="stable")][:per])
    pseudo = np.concatenate(pseudo).astype(int)
    rows = np.concatenate([true, pseudo])
    labels = np.concatenate([y[true], guess[pseudo]])
    order = np.argsort(rows)
    fewshot.write(src, out_dir, rows[order], label_column="label", keep="labelled",
                  labels=labels[order], note=f"pseudo-labels k={k} seed={seed} frac={frac}")
    print(f"{out_dir}: {len(true)} true + {len(pseudo)} pseudo-labelled rows; pseudo-label "
          f"accuracy {(guess[pseudo] == y[pseudo]).mean():.3f} (all unlabelled rows: "
          f"{(guess[free] == y[free]).mean():.3f}); per class "
          f"{np.bincount(guess[pseudo], minlength=c).tolist()}")


if __name__ == "__main__":
    main(*sys.argv[1:])
