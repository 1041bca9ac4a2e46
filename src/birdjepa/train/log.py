"""Run logging: metrics.jsonl, wandb, compact console lines, and the curves of the objective's
terms and accuracy (curves.png)."""

import json
import math
import os
import pathlib
import time
import typing

import birdjepa.common.outputs as outputs
import birdjepa.config
import birdjepa.config.losses
import birdjepa.runtime.rundir


def _jsonable(v):
    v = float(v) if not isinstance(v, int | str | bool) else v
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # "nan" / "inf": keep the row valid JSON
    return v


class Logger:
    """One JSON object per logged step in run_dir/metrics.jsonl, mirrored to wandb."""

    def __init__(
        self,
        run_dir: pathlib.Path,
        cfg: birdjepa.config.Config,
        config_dict: dict,
        *,
        enabled: bool = True,
    ):
        """`enabled=False` (every process but the first) logs nothing."""
        self.path = birdjepa.runtime.rundir.metrics_file(run_dir)
        self.file = open(self.path, "a") if enabled else None
        self.run = None
        mode = os.environ.get("WANDB_MODE", cfg.wandb.mode)
        if enabled and mode != "disabled":
            if mode == "offline":
                # The env var (not just mode=) is what stops all network use.
                os.environ.setdefault("WANDB_MODE", "offline")
            import wandb

            self.run = wandb.init(
                project=cfg.wandb.project,
                name=cfg.wandb.name or cfg.run_id,
                id=cfg.run_id,
                mode=mode,
                dir=str(run_dir),
                config=config_dict,
                resume="allow",
            )

    def log(self, step: int, row: dict[str, typing.Any]) -> None:
        if self.file is None:
            return
        row = {"step": int(step), **{k: _jsonable(v) for k, v in row.items()}}
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()
        if self.run is not None:
            self.run.log({k: v for k, v in row.items() if k != "step"}, step=int(step))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.run is not None:
            self.run.finish()
            self.run = None


class Progress:
    """The console's sense of time: a line while the first update compiles, then the ETA from
    the updates after it (compilation excluded)."""

    def __init__(self, n_steps: int, *, enabled: bool = True):
        self.n_steps, self.enabled = n_steps, enabled
        self.t0: float | None = None
        self.first: tuple[int, float] | None = None  # (update, time) once the first is done

    def compiling(self) -> None:
        self.t0 = time.perf_counter()
        if self.enabled:
            print("compiling the update (first step)...", end=" ", flush=True)

    def compiled(self, done: int, how: str = "") -> None:
        """The first update is done; `how` says how its executable came (compiled, or loaded
        from the compilation cache: birdjepa.runtime.compiles.describe)."""
        now = time.perf_counter()
        self.first = (done, now)
        if self.enabled:
            print(f"done in {now - self.t0:.1f} s" + (f" ({how})" if how else ""), flush=True)

    def eta(self, done: int) -> float | None:
        """Seconds left at the pace of the updates since the first; None before there is one."""
        if self.first is None or done <= self.first[0]:
            return None
        pace = (time.perf_counter() - self.first[1]) / (done - self.first[0])
        return pace * (self.n_steps - done)


def duration(seconds: float) -> str:
    """4 s, 2m05s, 3h07m."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def last_finite_loss(path: pathlib.Path) -> tuple[int, float] | None:
    """(step, loss) of the newest row of metrics.jsonl with a finite loss, or None."""
    if not path.exists():
        return None
    for row in reversed(read(path)):
        loss = row.get("loss")
        if isinstance(loss, int | float) and math.isfinite(loss) and not row.get("nonfinite"):
            return int(row["step"]), float(loss)
    return None


def console_line(step: int, n_steps: int, row: dict, rate: dict,
                 eta_s: float | None = None) -> str:
    parts = [f"step {step}/{n_steps}"]
    for k in ("loss", "probe_acc", "lr", "grad_norm"):
        if k in row:
            parts.append(f"{k} {row[k]:.4g}")
    parts.append(f"{rate['steps_per_s']:.2f} steps/s")
    parts.append(f"{rate['clips_per_s']:.0f} clips/s")
    parts.append(f"data wait {100 * rate['data_wait_frac']:.0f}%")
    if "tflops" in rate:
        parts.append(f"{rate['tflops']:.3g} TFLOP/s")
    if "mfu" in rate:
        parts.append(f"MFU {100 * rate['mfu']:.1f}%")
    if eta_s is not None:
        parts.append(f"ETA {duration(eta_s)}")
    return " | ".join(parts)


def read(path: pathlib.Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def truncate(path: pathlib.Path, *, after_step: int) -> int:
    """Drop rows logged after `after_step` (a resumed run logs those steps again); returns how
    many were dropped. The file is replaced atomically."""
    if not path.exists():
        return 0
    rows = read(path)
    keep = [r for r in rows if r.get("step", 0) <= after_step]
    outputs.write_text(path, "".join(json.dumps(r) + "\n" for r in keep))
    return len(rows) - len(keep)


def plot(metrics_path: pathlib.Path, png_path: pathlib.Path,
         objective: str | None = None, *, multilabel: bool = False
         ) -> list[tuple[str, list[str]]]:
    """The objective's own curves against step: `loss` (log scale) with the online probe's
    loss, a panel per loss term when the objective has several (LeJEPA: `sigreg` and `inv`,
    birdjepa.config.losses.TERMS; one term is the loss itself and names its panel), and
    train/eval accuracy. `objective` None: the one whose terms the rows hold; `multilabel`: the
    head is sigmoid (a list<int> label column), its `ce` binary. Returns the panels drawn:
    (title, labels of its lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read(metrics_path)
    terms = birdjepa.config.losses.TERMS
    if objective is None:
        objective = next((n for n, t in sorted(terms.items(), key=lambda nt: -len(nt[1]))
                          if t and all(any(k in r for r in rows) for k in t)), "probe_only")

    def series(key):
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float)]
        return [p[0] for p in pts], [p[1] for p in pts]

    own = dict(terms[objective])
    if objective == "lejepa" and any("ce" in r for r in rows):  # objective.lejepa.supervised_weight
        own["ce"] = "supervised cross-entropy, labelled rows"
    if multilabel and "ce" in own:  # sigmoid heads: the same key, binary cross-entropy
        own["ce"] = "binary cross-entropy, sigmoid per class"
    loss_title = "loss" if len(own) != 1 else "loss = {} ({})".format(*next(iter(own.items())))
    layout = [(f"{loss_title}, objective {objective}",
               [("loss", "loss", "-"), ("probe_loss", "online probe", "--")])]
    if len(own) > 1:
        layout += [(f"{k} ({what})", [(k, k, "-")]) for k, what in own.items()]
    layout.append(("accuracy", [("probe_acc", "probe (train)", "-"),
                                ("eval/probe_acc", "probe (eval)", "o-"),
                                ("train_acc", "head (train)", "-"),
                                ("eval/head_acc", "head (eval)", "o-")]))
    fig, axes = plt.subplots(1, len(layout), figsize=(4.6 * len(layout), 3.5), squeeze=False)
    drawn = []
    for ax, (title, lines) in zip(axes[0], layout, strict=True):
        labels = []
        for key, label, style in lines:
            xs, ys = series(key)
            if xs and (key != "loss" or any(ys)):  # probe_only's loss is 0 throughout
                ax.plot(xs, ys, style, label=label)
                labels.append(label)
        ys = [y for line in ax.get_lines() for y in line.get_ydata()]
        if title == "accuracy":
            ax.set_ylim(0, 1)
        elif ys and min(ys) > 0:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_title(title, fontsize=10)
        if labels:
            ax.legend(loc="best", fontsize=8)
        drawn.append((title, labels))
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return drawn
