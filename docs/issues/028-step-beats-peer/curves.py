"""Loss curves of curves.sh's runs: float32 against bfloat16 residual streams, three seeds each.
Prints the training loss averaged over 25-step bins (the float32 seeds' range beside each
bfloat16 seed), whether each bfloat16 seed's binned curve stays inside the float32 seeds' range
widened by nothing, and the final eval accuracies; draws curves.png beside this script.

    .venv/bin/python docs/issues/028-step-beats-peer/curves.py /tmp/issue-028-curves
"""

import json
import pathlib
import sys

import numpy as np


def losses(run: pathlib.Path) -> tuple[dict[int, float], dict]:
    train, last_eval = {}, {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "loss" in row and "step" in row:
            train[row["step"]] = row["loss"]
        if "eval/probe_acc" in row:
            last_eval = row
    return train, last_eval


def main(root: str) -> None:
    root = pathlib.Path(root)
    runs = {(r, s): losses(root / f"{r}-s{s}") for r in ("float32", "bfloat16") for s in (0, 1, 2)}
    bins = list(range(0, 300, 25))

    def binned(train):
        return np.array([np.mean([v for k, v in train.items() if b < k <= b + 25]) for b in bins])

    curves = {k: binned(v[0]) for k, v in runs.items()}
    f32 = np.stack([curves["float32", s] for s in (0, 1, 2)])
    lo, hi = f32.min(0), f32.max(0)
    print(f"{'steps':>9} {'float32 seeds (min..max)':>26} " + " ".join(
        f"{'bf16 s' + str(s):>9}" for s in (0, 1, 2)))
    for i, b in enumerate(bins):
        row = " ".join(f"{curves['bfloat16', s][i]:9.4f}" for s in (0, 1, 2))
        print(f"{b + 1:>4}-{b + 25:<4} {lo[i]:12.4f} .. {hi[i]:<11.4f} {row}")
    bf = np.stack([curves["bfloat16", s] for s in (0, 1, 2)])
    inside = (bf.mean(0) >= lo) & (bf.mean(0) <= hi)
    print(f"bfloat16 seed mean inside the float32 seeds' range in {inside.sum()} of {len(bins)} "
          f"bins; largest gap of the bfloat16 mean to the float32 mean "
          f"{np.abs(bf.mean(0) - f32.mean(0)).max():.4f} (float32 range at most "
          f"{(hi - lo).max():.4f})")
    for (r, s), (_, ev) in runs.items():
        print(f"{r:8s} seed {s}: final eval probe_acc {ev.get('eval/probe_acc', float('nan')):.4f}"
              f" head_acc {ev.get('eval/head_acc', float('nan')):.4f}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for (r, s), (train, _) in runs.items():
        steps = sorted(train)
        ax.plot(steps, [train[k] for k in steps], color="C0" if r == "float32" else "C3",
                alpha=0.7, lw=1, label=f"{r} residual" if s == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (demo, supervised)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(pathlib.Path(__file__).with_name("curves.png"), dpi=110)


if __name__ == "__main__":
    main(sys.argv[1])
