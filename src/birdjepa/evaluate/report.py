"""Aggregating per-seed results (mean +- 95 % t-interval), the console table and the plot."""

import itertools

import numpy as np

import birdjepa.evaluate.fewshot as fewshot

METRICS = ("cmap", "auroc", "top1")


def summarise(rows: list[dict]) -> dict:
    """{"runs": rows, "groups": [{encoder, probe, k, n_seeds, <metric>: [mean, ci95]}]}."""
    groups = []
    def key(r):
        return ((r["encoder"], r["probe"], str(r["k"])))
    for (enc, probe, _k), rs in itertools.groupby(sorted(rows, key=key), key=key):
        rs = list(rs)
        g = {"encoder": enc, "probe": probe, "k": rs[0]["k"], "n_seeds": len(rs)}
        for m in METRICS:
            g[m] = list(fewshot.mean_ci([r[m] for r in rs]))
        groups.append(g)
    return {"runs": rows, "groups": groups}


def _kkey(k) -> float:
    return float("inf") if k == "all" else float(k)


def table(summary: dict, metric: str = "cmap") -> str:
    """One line per (encoder, probe), one column per k: mean +- 95 % interval of `metric`."""
    groups = summary["groups"]
    ks = sorted({g["k"] for g in groups}, key=_kkey)
    head = f"{'encoder':<24} {'probe':<13}" + "".join(f"{'k=' + str(k):>15}" for k in ks)
    lines = [f"{metric} (mean +- 95% CI over seeds)", head, "-" * len(head)]
    by = {(g["encoder"], g["probe"], g["k"]): g for g in groups}
    for enc, probe in dict.fromkeys((g["encoder"], g["probe"]) for g in groups):
        cells = []
        for k in ks:
            g = by.get((enc, probe, k))
            cells.append(f"{g[metric][0]:.3f}+-{g[metric][1]:.3f}" if g else "-")
        lines.append(f"{enc:<24} {probe:<13}" + "".join(f"{c:>15}" for c in cells))
    return "\n".join(lines)


def plot(summary: dict, path) -> None:
    """PNG: one panel per metric, cmAP etc. against k, a line per (encoder, probe)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = summary["groups"]
    ks = sorted({g["k"] for g in groups}, key=_kkey)
    fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 4))
    pairs = list(dict.fromkeys((g["encoder"], g["probe"]) for g in groups))
    encs = list(dict.fromkeys(e for e, _ in pairs))
    styles = ["-", "--", ":", "-."]
    for ax, m in zip(axes, METRICS, strict=True):
        for enc, probe in pairs:
            gs = {g["k"]: g for g in groups if g["encoder"] == enc and g["probe"] == probe}
            xs = [i for i, k in enumerate(ks) if k in gs]
            mean = np.array([gs[ks[i]][m][0] for i in xs])
            ci = np.array([gs[ks[i]][m][1] for i in xs])
            line, = ax.plot(xs, mean, styles[encs.index(enc) % 4], marker="o",
                            label=f"{enc} / {probe}")
            ax.fill_between(xs, mean - ci, mean + ci, alpha=0.15, color=line.get_color())
        ax.set_xticks(range(len(ks)), [str(k) for k in ks])
        ax.set_xlabel("training recordings per class (k)")
        ax.set_title(m)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
