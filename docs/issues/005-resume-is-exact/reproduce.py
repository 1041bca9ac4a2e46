"""Reproduce issue 5's experiment: `python docs/issues/005-resume-is-exact/reproduce.py`.

Writes a small demo corpus, then trains the same tiny config three times with the real CLI and
the real loader (each run in fresh processes, a checkpoint every step):

1. uninterrupted;
2. stopped with SIGUSR2 (graceful preemption) half-way, then started again;
3. SIGKILLed at seeded random moments (half of them while a checkpoint is being written) and
   started again after each kill until it completes.

It compares every step's loss and the final checkpoints' every leaf bit for bit, prints the
result and plots the loss curves to loss_curves.png next to this script. About 5 minutes on 2
CPU cores. Options: --steps, --kills, --seed, --out (work directory, default a tmp dir).
"""

import argparse
import pathlib
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "tests" / "support"))

import resume_helpers as h  # noqa: E402


def plot(ref, split, killed, stops, kill_resumes, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_d) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True,
                                   gridspec_kw={"height_ratios": [3, 1]})
    xs, ys = h.losses(ref)
    ax.plot(xs, ys, "-", color="black", lw=2.5, label="uninterrupted")
    for run, style, label in [(split, "o", "stopped by SIGUSR2, resumed"),
                              (killed, "x", "SIGKILLed, restarted")]:
        x, y = h.losses(run)
        ax.plot(x, y, style, ms=5, label=label)
        ax_d.plot(x, np.abs(np.asarray(y) - np.asarray(ys)), style, ms=5, label=label)
    for s in stops:
        ax.axvline(s, color="C0", ls="--", lw=1)
    for s in kill_resumes:
        ax.axvline(s, color="C1", ls=":", lw=1)
    ax.set_ylabel("training loss")
    ax.set_title("Resumed runs retrace the uninterrupted run (lines: resume points)")
    ax.legend()
    ax_d.set_ylabel("|delta loss|")
    ax_d.set_xlabel("step")
    ax_d.set_ylim(-0.05, 1)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--out", default=None)
    p.add_argument("--png", default=str(HERE / "loss_curves.png"))
    a = p.parse_args(argv)
    root = pathlib.Path(a.out or tempfile.mkdtemp(prefix="birdjepa-issue5-"))
    root.mkdir(parents=True, exist_ok=True)
    h.JAX_CACHE = str(root / "jax-cache")
    t0 = time.perf_counter()
    if not (root / "corpus").exists():
        h.write_corpus(root / "corpus")
    cfg = root / "tiny.toml"
    cfg.write_text(h.tiny_toml(root / "corpus", n_steps=a.steps, ckpt_every=1))
    print(f"work dir {root}; {a.steps} steps per run")

    r = h.run(cfg, root / "uninterrupted", timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    print(f"uninterrupted run done ({time.perf_counter() - t0:.0f} s)")

    stopped = h.split_run(cfg, root / "split", at=a.steps // 2)
    split_delta = h.assert_same_run(root / "uninterrupted", root / "split")
    print(f"SIGUSR2 at step {a.steps // 2}: stopped at {stopped}, resumed; all metrics and "
          f"every checkpoint leaf bitwise equal; max |delta loss| = {split_delta}")

    k = h.kill_run(cfg, root / "killed", n_kills=a.kills, seed=a.seed, n_steps=a.steps)
    kill_delta = h.assert_same_run(root / "uninterrupted", root / "killed")
    print(f"SIGKILL: survived {k['kills']} kills ({k['mid_save']} with an uncommitted save on "
          f"disk), resumed from steps {k['resumed_from']}; all metrics and every checkpoint leaf "
          f"bitwise equal; max |delta loss| = {kill_delta}")

    plot(root / "uninterrupted", root / "split", root / "killed", [stopped], k["resumed_from"],
         pathlib.Path(a.png))
    print(f"wrote {a.png} ({time.perf_counter() - t0:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
