"""BirdSet-style tables and the plot, from result rows; `python -m birdjepa.evaluate.report`.

A table is one metric at one k: a row per (encoder, probe), a column per test set, and a
`mean` column (the mean over test sets; shown with two or more). A cell reads

    0.573 ±0.074 [0.521, 0.630]

the mean over seeds, the standard deviation over seeds, and the 95 % bias-corrected bootstrap
interval: over test segments at k = all, over seeds and test segments at few-shot k
(`birdjepa.evaluate.intervals`).
With fewer than 3 seeds a few-shot cell shows the min-max range instead, in parentheses and
marked `mm`. The `mean` column shows the mean over test sets and the sd over seeds of the
per-seed mean over test sets (no interval: intervals are not stored per resample).

    python -m birdjepa.evaluate.report runs/eval-a/results.parquet runs/eval-b [--format
        markdown] [--metric cmap --metric ...] [--k all --k ...] [--out FILE.md]
        [--plot FILE.png] [--out_dir DIR]

re-renders (and merges: a later file's groups replace an earlier one's, matched on the
encoder's digest and the test shards; two encoders or two test splits under one display name
are refused) without recomputing.
"""

import pathlib
import sys

import numpy as np

import birdjepa.common.cli_args as cli_args
import birdjepa.common.outputs as outputs
import birdjepa.evaluate.intervals as intervals
import birdjepa.evaluate.metrics as metrics
import birdjepa.evaluate.results as results

_METHOD = {
    intervals.BOOTSTRAP_SEGMENTS: "[95 % bootstrap interval (BC) over test segments]",
    intervals.BOOTSTRAP_SEEDS: "[95 % bootstrap interval (BC) over seeds and test segments]",
    intervals.MIN_MAX: "(min-max over seeds) mm: fewer than 3 seeds, no interval",
}


def kkey(k) -> float:
    return float("inf") if str(k) == "all" else float(k)


def _unique(xs) -> list:
    return list(dict.fromkeys(xs))


def groups(rows: list[dict]) -> dict[tuple, dict]:
    """{(test set, encoder, probe, k, metric): the group's row (mean, sd, lo, hi, interval, ...)
    plus "values": {seed: value}}."""
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["test_set"], r["encoder"], r["probe"], str(r["k"]), r["metric"])
        g = out.setdefault(key, {**r, "values": {}})
        g["values"][r["seed"]] = r["value"]
    return out


def _cell(g: dict | None) -> str:
    if g is None or not np.isfinite(g["mean"]):
        return "-"
    text = f"{g['mean']:.3f} ±{g['sd']:.3f}"
    if g["interval"] == intervals.MIN_MAX:
        return text + f" ({g['lo']:.3f}-{g['hi']:.3f}) mm"
    return text + (f" [{g['lo']:.3f}, {g['hi']:.3f}]" if np.isfinite(g["lo"]) else "")


def _mean_cell(gs: list[dict | None]) -> str:
    """Mean over test sets; sd over seeds of the per-seed mean over test sets."""
    if any(g is None or not np.isfinite(g["mean"]) for g in gs):
        return "-"
    seeds = set.intersection(*(set(g["values"]) for g in gs))
    per_seed = [np.mean([g["values"][s] for g in gs]) for s in sorted(seeds)]
    sd = float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else 0.0
    return f"{np.mean([g['mean'] for g in gs]):.3f} ±{sd:.3f}"


PROTOCOL_NAMES = {"bird-mae": "Bird-MAE few-shot protocol (arXiv 2504.12880: lenient "
                  "sampling, its probe recipe)"}
"""How a table title names the protocol its rows were produced under (evaluate's `protocol`)."""


def table(rows: list[dict], metric: str = "cmap", k="all", fmt: str = "text") -> str:
    """One metric at one k: rows encoder x probe, columns test sets (+ mean)."""
    by = groups(rows)
    k = str(k)
    sets = _unique(r["test_set"] for r in rows)
    pairs = _unique((r["encoder"], r["probe"]) for r in rows)
    methods = _unique(g["interval"] for key, g in by.items() if key[3] == k and key[4] == metric)
    n_seeds = sorted({g["n_seeds"] for key, g in by.items() if key[3] == k})
    named = [PROTOCOL_NAMES.get(p, p) for p in _unique(
        r.get("protocol") or "" for r in rows if str(r["k"]) == k) if p]
    title = ((f"{' and '.join(named)}: " if named else "")
             + f"{metric}, k={k}: mean over {'/'.join(map(str, n_seeds))} seeds ±sd over seeds; "
             + "; ".join(_METHOD.get(m, m) for m in methods))
    head = ["encoder", "probe", *sets] + (["mean"] if len(sets) > 1 else [])
    body = []
    for enc, probe in pairs:
        gs = [by.get((ts, enc, probe, k, metric)) for ts in sets]
        if all(g is None for g in gs):
            continue
        body.append([enc, probe, *map(_cell, gs)] + ([_mean_cell(gs)] if len(sets) > 1 else []))
    if fmt == "markdown":
        lines = [f"**{title}**", "", "| " + " | ".join(head) + " |",
                 "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=True)]
    fmt_row = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [title, fmt_row.format(*head), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    return "\n".join(lines + [fmt_row.format(*r) for r in body])


def tables(rows: list[dict], *, fmt: str = "text", metric_list=None, ks=None,
           console: bool = False) -> str:
    """Every (metric, k) table; `console`: cmAP at every k and the other metrics at k = all."""
    default = not (metric_list or ks)
    present = _unique(r["metric"] for r in rows)
    mets = [m for m in (metric_list or metrics.METRICS + metrics.THRESHOLD_METRICS)
            if m in present]
    all_ks = sorted(_unique(str(r["k"]) for r in rows), key=kkey)
    ks = [str(k) for k in ks] if ks else all_ks
    order = sorted(ks, key=lambda k: -kkey(k))  # k = all first
    pairs = [(m, k) for m in mets for k in order]
    if console and default:
        pairs = [(m, k) for m in mets for k in order if m == "cmap" or k == "all"]
    return "\n\n".join(table(rows, m, k, fmt) for m, k in pairs)


def provenance(rows: list[dict], objectives: dict[str, str] | None = None) -> str:
    """Markdown: what each encoder is (objective, training steps, source) and what each test set
    scored (seeds, k, test segments, classes in the list and classes scored), from the rows."""
    objectives = objectives or {}
    first = {}
    for r in rows:
        first.setdefault(r["encoder"], r)
    out = ["## Encoders", "", "| encoder | objective | steps | source |", "|---|---|---|---|"]
    for enc, r in first.items():
        step = r.get("encoder_step", -1)
        out.append(f"| {enc} | {objectives.get(enc, '-')} | {'-' if step < 0 else step} | "
                   f"{r.get('encoder_run_dir') or 'random init'} |")
    out += ["", "## Test sets", "", "| test set | seeds | k | test segments | labelled | "
            "classes | classes scored (cmAP) | classes in cmAP5 |", "|---|---|---|---|---|---|---|---|"]
    for ts in _unique(r["test_set"] for r in rows):
        sub = [r for r in rows if r["test_set"] == ts]
        r = sub[0]
        seeds = sorted(_unique(int(x["seed"]) for x in sub))
        ks = sorted(_unique(str(x["k"]) for x in sub), key=kkey)
        out.append(f"| {ts} | {len(seeds)} ({', '.join(map(str, seeds))}) | {', '.join(ks)} | "
                   f"{r.get('n_segments', '-')} | {r.get('n_labelled', '-')} | "
                   f"{r.get('n_classes', '-')} | {r.get('n_classes_scored', '-')} | "
                   f"{r.get('n_classes_cmap5', '-')} |")
    return "\n".join(out)


def best_probes(rows: list[dict], test_set: str, metric: str) -> list[tuple[str, str]]:
    """(encoder, probe) per encoder: the probe with the highest mean `metric` on `test_set` at
    the largest k it has (k = all first; NaN never wins; a tie keeps the first probe)."""
    by = groups(rows)
    best: dict[str, tuple[float, float, str]] = {}
    for r in rows:
        if r["test_set"] != test_set or r["metric"] != metric:
            continue
        g = by[(test_set, r["encoder"], r["probe"], str(r["k"]), metric)]
        score = (kkey(r["k"]), g["mean"] if np.isfinite(g["mean"]) else -np.inf)
        if r["encoder"] not in best or score > best[r["encoder"]][:2]:
            best[r["encoder"]] = (*score, r["probe"])
    return [(e, p) for e, (_, _, p) in best.items()]


def _note(rows: list[dict], test_set: str, metric: str) -> str:
    """Why a panel has no value: cmAP5 without a class of >= 5 positives, else no finite one."""
    r = next((r for r in rows if r["test_set"] == test_set), {})
    if metric == "cmap5" and r.get("n_classes_cmap5") == 0:
        return (f"no value: no class has >= {metrics.CMAP5_MIN_POSITIVES} positive\n"
                f"segments in {test_set} (cmAP5 averages only those)")
    return f"no value: {metric} is undefined on\n{test_set} (see results.md)"


def _chance(rows: list[dict], test_set: str, metric: str) -> float | None:
    vals = [r.get("chance") for r in rows if r["test_set"] == test_set and r["metric"] == metric]
    vals = [float(v) for v in vals if v is not None and np.isfinite(v)]
    return vals[0] if vals else None


def panels(rows: list[dict], metric_list=None, *, all_probes: bool = False) -> list[dict]:
    """What `plot` draws, per panel: test_set, metric, title, series ((encoder, probe): every
    pair with `all_probes`, else each encoder's `best_probes`), chance (the metric's chance
    level on the test set's labels, None where undefined or not recorded) and note (why the
    panel has no value; None when it has one)."""
    by = groups(rows)
    sets = _unique(r["test_set"] for r in rows)
    mets = [m for m in (metric_list or metrics.METRICS) if any(r["metric"] == m for r in rows)]
    pairs = _unique((r["encoder"], r["probe"]) for r in rows)
    out = []
    for ts in sets:
        for m in mets:
            series = pairs if all_probes else best_probes(rows, ts, m)
            series = [(e, p) for e, p in series if any(
                key[:3] == (ts, e, p) and key[4] == m and np.isfinite(g["mean"])
                for key, g in by.items())]
            title = m if len(sets) == 1 else f"{ts}: {m}"
            if not all_probes and series:
                title += " (best probe per encoder)"
            out.append({"test_set": ts, "metric": m, "title": title, "series": series,
                        "chance": _chance(rows, ts, m),
                        "note": None if series else _note(rows, ts, m)})
    return out


def plot(rows: list[dict], path, metric_list=None, *, all_probes: bool = False) -> list[dict]:
    """PNG: one panel per metric (per test set and metric with several test sets), at most 3
    across; the metric against k with the tables' intervals as error bars; colour = encoder,
    marker and line style = probe; each encoder's best probe (`best_probes`; `all_probes`:
    every probe); a dotted chance line where chance is defined; a panel without a value says
    why; the legend below the panels, never over data. Returns `panels`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.lines
    import matplotlib.pyplot as plt

    by = groups(rows)
    drawn = panels(rows, metric_list, all_probes=all_probes)
    ks = sorted(_unique(str(r["k"]) for r in rows), key=kkey)
    pairs = _unique(s for p in drawn for s in p["series"])
    encs = _unique(r["encoder"] for r in rows)
    kinds = _unique(p for _, p in pairs)
    ncols = min(3, len(drawn))
    nrows = -(-len(drawn) // ncols)
    handles = [matplotlib.lines.Line2D([], [], color=f"C{i % 10}", lw=3, label=e)
               for i, e in enumerate(encs)]
    handles += [matplotlib.lines.Line2D([], [], color="0.3", marker=MARKERS[i % len(MARKERS)],
                                        ls=STYLES[i % len(STYLES)], label=f"probe: {p}")
                for i, p in enumerate(kinds)]
    if any(p["chance"] is not None for p in drawn):
        handles.append(matplotlib.lines.Line2D([], [], color="0.5", ls=(0, (1, 2)),
                                               label="chance"))
    legend_rows = -(-len(handles) // 4)
    legend_in = 0.3 + 0.25 * legend_rows
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows + legend_in),
                             squeeze=False)
    for ax, panel in zip(axes.flat, drawn, strict=False):
        _panel(ax, panel, by, ks, encs, kinds)
    for ax in list(axes.flat)[len(drawn):]:
        ax.set_visible(False)
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), frameon=False,
               fontsize=9)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1))
    with outputs.replacing(path) as tmp:
        fig.savefig(tmp, dpi=100, format=pathlib.Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
    return drawn


def _panel(ax, panel: dict, by: dict, ks: list[str], encs: list[str], kinds: list[str]) -> None:
    """One metric on one test set: its series, chance line and note (`panels`)."""
    ts, m, series = panel["test_set"], panel["metric"], panel["series"]
    for n, (enc, probe) in enumerate(series):
        gs = [(x + 0.06 * (n - (len(series) - 1) / 2), by.get((ts, enc, probe, k, m)))
              for x, k in enumerate(ks)]
        gs = [(x, g) for x, g in gs if g is not None]
        xs, mean = np.array([x for x, _ in gs]), np.array([g["mean"] for _, g in gs])
        err = np.abs(np.array([[g["lo"], g["hi"]] for _, g in gs]).T - mean)
        i = kinds.index(probe)
        ax.errorbar(xs, mean, yerr=np.nan_to_num(err), ls=STYLES[i % len(STYLES)],
                    marker=MARKERS[i % len(MARKERS)], ms=5, capsize=2, lw=1.2,
                    color=f"C{encs.index(enc) % 10}")
    if panel["chance"] is not None:
        ax.axhline(panel["chance"], color="0.5", ls=(0, (1, 2)), lw=1.2, zorder=0)
        ax.annotate(f"chance {panel['chance']:.3f}", (1.0, panel["chance"]),
                    xycoords=("axes fraction", "data"), xytext=(-2, 2),
                    textcoords="offset points", ha="right", va="bottom", fontsize=7,
                    color="0.4")
    if panel["note"]:
        ax.text(0.5, 0.5, panel["note"], transform=ax.transAxes, ha="center", va="center",
                fontsize=8, color="0.3", wrap=True)
    ax.set_xticks(range(len(ks)), ks)
    ax.set_xlim(-0.5, len(ks) - 0.5)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_xlabel("training recordings per class (k)")
    ax.set_title(panel["title"], fontsize=10)


MARKERS = ("o", "s", "^", "D", "v", "P")
STYLES = ("-", "--", ":", "-.")


def main(argv: list[str] | None = None) -> int:
    """The command line; its options, in one place."""
    ap = cli_args.Parser("python -m birdjepa.evaluate.report", "Re-render and merge evaluation "
                         "results (a later file's groups replace an earlier one's) without "
                         "recomputing.")
    ap.add_argument("results", nargs="+", metavar="RESULTS",
                    help="results.parquet / results.csv files, or directories holding one")
    ap.add_argument("--format", choices=("text", "markdown"), default="text",
                    help="tables as aligned text or as Markdown")
    ap.add_list("metric", choices=metrics.METRICS + metrics.THRESHOLD_METRICS,
                help="a metric to show (repeat for more; default: every metric)")
    ap.add_list("k", help="a k value to show, e.g. 1, 5 or all (repeat for more; default: all "
                "of them)")
    ap.add_argument("--out", help="also write the tables to this file")
    ap.add_argument("--plot", help="write the plot to this PNG file")
    ap.add_flag("all_probes", "plot every probe of every encoder (default: each encoder's best "
                "probe per panel, by its mean at the largest k)")
    ap.add_argument("--out_dir", help="write the merged results.parquet and results.csv into "
                    "this directory")
    args = ap.parse_args(argv)
    try:
        rows = results.merge(*(results.read(p) for p in args.results))
    except (FileNotFoundError, ValueError, OSError) as e:
        return cli_args.fail(e)
    text = tables(rows, fmt=args.format, metric_list=args.metric, ks=args.k)
    print(text)
    if args.out:
        outputs.write_text(args.out, text + "\n")
    if args.plot:
        plot(rows, args.plot, args.metric, all_probes=args.all_probes)
    if args.out_dir:
        results.write(rows, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
