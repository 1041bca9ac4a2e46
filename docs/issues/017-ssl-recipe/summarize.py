"""The study's table and the label-free selection check (docs/issues/017-ssl-recipe).

    python docs/issues/017-ssl-recipe/summarize.py runs/eval-ssl-recipe [more eval dirs] \
        [--plot docs/issues/017-ssl-recipe/sigreg-vs-cmap.png]

For every encoder in the evaluations' results.csv: soundscape cmAP at k = all, best probe (mean
over seeds and its 95 % interval). For every LeJEPA encoder (a run directory, or an export of
one of its checkpoints named `<run>-s<step>` by `python -m birdjepa.export --step`): the
training loss, invariance and SIGReg terms averaged over the last 5 logged steps up to that
checkpoint, and per run the Spearman rank correlation of each with cmAP over its checkpoints
(lower loss, higher cmAP: a negative rho is what label-free selection needs); across runs, the
same over each run's final encoder only (one point per run: independent of each other).
`--plot PATH` draws cmAP against the SIGReg statistic, one colour per run, finals ringed.
"""

import csv
import json
import pathlib
import re
import sys

import scipy.stats


def best_rows(eval_dirs: list[str]) -> dict[str, dict]:
    """encoder -> the best probe's row (cmAP, k = all; a later directory's rows win)."""
    groups: dict[tuple[str, str], dict] = {}
    for d in eval_dirs:
        with open(pathlib.Path(d) / "results.csv") as f:
            for r in csv.DictReader(f):
                if r["metric"] == "cmap" and r["k"] == "all" and r["seed"] == "0":
                    # The config hash tells apart two random inits of one name (before and
                    # after a config change).
                    enc = f"{r['encoder']} ({r['encoder_config_hash'][:8]})"
                    groups[(enc, r["probe"])] = r
    best: dict[str, dict] = {}
    for (enc, _), r in groups.items():
        if enc not in best or float(r["mean"]) > float(best[enc]["mean"]):
            best[enc] = r
    return best


def ssl_stats(run_dir: str) -> dict | None:
    """Last-5-log mean of loss, inv, sigreg up to the checkpoint, or None (not LeJEPA)."""
    path = pathlib.Path(run_dir)
    step = None
    m = re.fullmatch(r"(.+)-s(\d+)", path.name)
    if m and not (path / "metrics.jsonl").exists():
        path, step = path.parent.parent / m.group(1), int(m.group(2))
    metrics = path / "metrics.jsonl"
    if not metrics.exists():
        return None
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows = [r for r in rows if "sigreg" in r]
    last_step = max((r["step"] for r in rows), default=0)
    rows = [r for r in rows if step is None or r["step"] <= step]
    if not rows:
        return None
    last = rows[-5:]
    final = step is None or step >= last_step
    return {k: sum(r[k] for r in last) / len(last) for k in ("loss", "inv", "sigreg")} | {
        "step": last[-1]["step"], "run": path.name, "final": final}


def draw(points: list[tuple[float, dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.0, 4.6), dpi=120)
    runs = sorted({s["run"] for _, s in points})
    for i, run in enumerate(runs):
        mine = sorted((s["step"], s["sigreg"], c, s["final"]) for c, s in points if s["run"] == run)
        color = plt.cm.tab20(i % 20)
        label = run.split("-")[1] if run.startswith("ssl_recipe-") else run
        ax.plot([x for _, x, _, _ in mine], [y for _, _, y, _ in mine], "o-", color=color, ms=4,
                lw=0.8, label=label)
        ax.scatter([x for _, x, _, f in mine if f], [y for _, _, y, f in mine if f], s=90,
                   facecolors="none", edgecolors=color)
    ax.set_xlabel("SIGReg statistic (mean of the last 5 logs up to the checkpoint)")
    ax.set_ylabel("soundscape cmAP (k = all, best probe)")
    ax.set_title("cmAP against SIGReg, checkpoints joined in step order (ringed: end of run)",
                 fontsize=10)
    ax.legend(title="run (sweep entry)", fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


def main(eval_dirs: list[str], plot: str | None = None) -> None:
    best = best_rows(eval_dirs)
    print("| encoder | run dir | step | best probe | cmAP [95 % interval] | loss | inv | sigreg |")
    print("| --- | --- | ---: | --- | --- | ---: | ---: | ---: |")
    points = []
    for enc, r in sorted(best.items(), key=lambda kv: -float(kv[1]["mean"])):
        s = ssl_stats(r["encoder_run_dir"]) if r["encoder_run_dir"] else None
        extra = (f"{s['loss']:.4f} | {s['inv']:.4f} | {s['sigreg']:.3f}" if s else "- | - | -")
        run = pathlib.Path(r["encoder_run_dir"]).name if r["encoder_run_dir"] else "(random init)"
        print(f"| {enc} | {run} | {r['encoder_step'] or 0} | {r['probe']} | {float(r['mean']):.3f} "
              f"[{float(r['lo']):.3f}, {float(r['hi']):.3f}] | {extra} |")
        if s:
            points.append((float(r["mean"]), s))
    if len(points) >= 3:  # pooled over runs: checkpoints of one run are not independent
        for key in ("loss", "inv", "sigreg"):
            rho, p = scipy.stats.spearmanr([s[key] for _, s in points], [c for c, _ in points])
            print(f"all: Spearman rho(cmAP, {key}) = {rho:+.3f} (p = {p:.3f}, n = {len(points)})")
    finals = [(c, s) for c, s in points if s["final"]]
    if len(finals) >= 3:
        for key in ("loss", "inv", "sigreg"):
            rho, p = scipy.stats.spearmanr([s[key] for _, s in finals], [c for c, _ in finals])
            print(f"finals: Spearman rho(cmAP, {key}) = {rho:+.3f} (p = {p:.3f}, "
                  f"n = {len(finals)})")
    if plot:
        draw(points, plot)
    # Per run: runs with other lambda or projector widths put the loss on other scales.
    for run in sorted({s["run"] for _, s in points}):
        mine = [(c, s) for c, s in points if s["run"] == run]
        if len(mine) < 3:
            continue
        for key in ("loss", "inv", "sigreg"):
            rho, p = scipy.stats.spearmanr([s[key] for _, s in mine], [c for c, _ in mine])
            print(f"{run}: Spearman rho(cmAP, {key}) = {rho:+.3f} (p = {p:.3f}, n = {len(mine)})")


if __name__ == "__main__":
    args = sys.argv[1:]
    plot = None
    if "--plot" in args:
        i = args.index("--plot")
        plot, args = args[i + 1], args[:i] + args[i + 2:]
    main(args or ["runs/eval-ssl-recipe"], plot)
