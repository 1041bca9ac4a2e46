"""Summarise the issue-4 runs: `python report.py RUNS_DIR` reads
RUNS_DIR/{supervised,lejepa,lejepa_probe,random} (metrics.jsonl, time.txt) and writes results.json
and curves.png next to this file. lejepa_probe and random are the same probe-only run (same
config, steps, batches, probe) on two frozen encoders: LeJEPA's final one and the random init."""

import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = pathlib.Path(__file__).parent
RUNS = ("supervised", "lejepa", "lejepa_probe", "random")


def rows(run_dir: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def series(rs: list[dict], key: str) -> tuple[list, list]:
    pts = [(r["step"], r[key]) for r in rs if isinstance(r.get(key), int | float)]
    return [p[0] for p in pts], [p[1] for p in pts]


def main(runs_dir: str) -> None:
    root = pathlib.Path(runs_dir)
    out = {}
    data = {}
    for name in RUNS:
        rs = rows(root / name)
        data[name] = rs
        evals = [r for r in rs if "eval/probe_acc" in r]
        last = evals[-1]
        train = [r for r in rs if "loss" in r]
        res = {
            "steps": last["step"],
            "eval_probe_acc": last["eval/probe_acc"],
            "eval_n": last["eval/n"],
            "final_loss": train[-1]["loss"],
            "eval_curve": {r["step"]: round(r["eval/probe_acc"], 4) for r in evals},
        }
        if "eval/head_acc" in last:
            res["eval_head_acc"] = last["eval/head_acc"]
            res["eval_head_curve"] = {r["step"]: round(r["eval/head_acc"], 4) for r in evals}
        norms = {r["param_norm"] for r in train}
        res["param_norm_constant"] = len(norms) == 1
        t = root / name / "time.txt"
        if t.exists():
            res["time"] = t.read_text().strip()
        out[name] = res
    def gap(name: str) -> float:
        return round(100 * (out[name]["eval_probe_acc"] - out["random"]["eval_probe_acc"]), 1)

    out["lejepa_probe_minus_random_points"] = gap("lejepa_probe")  # the acceptance figure
    out["lejepa_online_minus_random_points"] = gap("lejepa")  # the probe trained during LeJEPA
    (HERE / "results.json").write_text(json.dumps(out, indent=1) + "\n")

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    ax = axes[0]
    xs, ys = series(data["supervised"], "loss")
    ax.plot(xs, ys, label="supervised CE")
    xs, ys = series(data["lejepa"], "loss")
    ax.plot(xs, ys, label="LeJEPA loss")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_title("train loss")
    ax.legend()
    ax = axes[1]
    for name, key, label in [
        ("supervised", "eval/head_acc", "supervised: head (eval)"),
        ("supervised", "eval/probe_acc", "supervised: probe (eval)"),
        ("lejepa", "eval/probe_acc", "LeJEPA: online probe during pretraining (eval)"),
        ("lejepa_probe", "eval/probe_acc", "frozen LeJEPA encoder: probe (eval)"),
        ("random", "eval/probe_acc", "frozen random encoder: probe (eval)"),
    ]:
        xs, ys = series(data[name], key)
        ax.plot(xs, ys, "o-", label=label)
    ax.axhline(1 / 12, color="gray", ls=":", label="chance")
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_title("eval accuracy (240 held-out recordings)")
    ax.legend(loc="upper left", fontsize=8)
    ax = axes[2]
    for name in RUNS:
        xs, ys = series(data[name], "probe_acc")
        ax.plot(xs, ys, label=f"{name}: probe (train batch)", alpha=0.8)
    ax.set_ylim(0, 1)
    ax.set_xlabel("step")
    ax.set_title("online probe accuracy on train batches")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=80)
    print(json.dumps({k: (v if not isinstance(v, dict) else {
        kk: vv for kk, vv in v.items() if not kk.endswith("curve")}) for k, v in out.items()},
        indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
