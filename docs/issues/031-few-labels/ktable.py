"""The k table of issue 49 (docs/issues/031-few-labels): soundscape cmAP of each recipe at
k = 1, 5, 10 labelled recordings per class and at all labels, its best probe, its mean and its
interval, from the results `make ssl-demo` writes:

* runs/eval-fewshot: the label-free (runs/demo-lejepa) and supervised-on-all (runs/demo)
  encoders under Bird-MAE's few-shot protocol (k = 1, 5, 10, sampling seeds 1-3: a 95 %
  bootstrap interval over seeds and test segments);
* runs/eval-demo: the same encoders at k = all (configs/eval-demo.toml; 95 % bootstrap over
  test segments);
* runs/eval-fs/<kind>-k<K>-s<S>: an encoder trained on the k labels of sampling seed S
  (sup: supervised on those rows alone; ft-lrR: the same training started from the label-free
  encoder at learning rate R, and at k = all runs/eval-fs/ft-lrR-all, every label; semi[-wW]:
  LeJEPA with those rows labelled among the unlabelled rest, supervised
  weight W, default 1; st: the label-free encoder of training seed S - 1 fine-tuned on the
  k rows plus the pseudo-labels of the ftp- run, train.sh selftrain; st2: a second round, from
  st's pseudo-labels), probed under the protocol on the same k rows. One number per seed; the
  cell shows the mean over the seeds present and their min-max.

* runs/eval-fs/lf-sT and runs/eval-all/lf-sT (T = 1, 2): label-free LeJEPA trained with seed T
  (runs/demo-lejepa-sT), evaluated like runs/demo-lejepa (seed 0) above: the "3 training
  seeds" column pools the three, its interval the min-max of the training seeds' means;
* runs/eval-fs/ftp-lr3e-4-k<K>-s<S>: fine-tuned like ft-lr3e-4 but from the label-free encoder
  of training seed S - 1 (runs/demo-lejepa-s<S-1>; S = 1 is ft-lr3e-4's, from seed 0), so
  that pretraining varies with the seed too.
* runs/eval-fs/lf-TAG and runs/eval-all/lf-TAG (TAG not s1, s2): a label-free variant of one
  setting, trained at seed 0 (runs/demo-lejepa-TAG: train.sh label-free TAG ARGS), in a second
  table beside the default recipe at seed 0.

The best probe is picked per cell by its mean (on the test split, as every "best probe" column
of the field's tables is): read the probe beside the number.
    python docs/issues/031-few-labels/ktable.py [--metric cmap] [--runs runs]
"""

import argparse
import pathlib
import re
import statistics

import birdjepa.evaluate.results as results

KS = ("1", "5", "10", "all")
NAMES = {"sup": "supervised on these k labels",
         "ft-lr3e-4": "label-free, then fine-tuned on them (lr 3e-4)",
         "ft-lr3e-3": "label-free, then fine-tuned on them (lr 3e-3)",
         "ftp-lr3e-4": "label-free (training seed S - 1), then fine-tuned on them (lr 3e-4)",
         "semi": "LeJEPA + k labels (weight 1)",
         "st": "fine-tuned (training seed S - 1), then self-trained on half its pseudo-labels",
         "st2": "the same, a second round on three quarters"}


def _read(path: pathlib.Path) -> list[dict]:
    return results.read(path) if (path / "results.parquet").is_file() else []


def best_group(rows: list[dict], encoder: str | None, k: str, metric: str) -> str:
    """'mean [lo, hi] (probe)' of the encoder's best probe at k (groups of evaluate's rows);
    encoder None: the one trained encoder of the file (random inits left out)."""
    cells = {}
    for r in rows:
        if (r["encoder"] == encoder if encoder else not r["encoder"].startswith("random-")) \
                and str(r["k"]) == k and r["metric"] == metric:
            cells[r["probe"]] = r
    if not cells:
        return "-"
    probe, r = max(cells.items(), key=lambda pr: pr[1]["mean"])
    return f"{r['mean']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] ({probe}, {r['n_seeds']} seeds)"


def matched(runs: pathlib.Path, kind: str, k: str, metric: str) -> str:
    """Mean over seeds of the best probe (by its mean over those seeds) of the matched runs."""
    per_probe: dict[str, list[float]] = {}
    dirs = sorted((runs / "eval-fs").glob(f"{kind}-k{k}-s*"))
    if kind.startswith("ftp-"):  # seed 1 fine-tunes the seed-0 encoder: ft-'s own run
        dirs += sorted((runs / "eval-fs").glob(f"ft-{kind[4:]}-k{k}-s1"))
    for d in dirs:
        for r in _read(d):
            if str(r["k"]) == k and r["metric"] == metric:
                per_probe.setdefault(r["probe"], []).append(r["value"])
    if not per_probe:
        return "-"
    probe, vals = max(per_probe.items(), key=lambda pv: statistics.mean(pv[1]))
    span = f"min-max [{min(vals):.3f}, {max(vals):.3f}]" if len(vals) > 1 else "one seed"
    return f"{statistics.mean(vals):.3f} {span} ({probe}, {len(vals)} seeds)"


def label_free_seeds(runs: pathlib.Path, few: list[dict], full: list[dict], k: str,
                     metric: str, tag: str = "") -> str:
    """The label-free encoder (or the variant `tag`) over its 3 training seeds: per probe the
    mean of every (training seed, sampling or probe seed) value, the best probe by it, and the
    min-max of the three training seeds' means."""
    sub = "eval-all" if k == "all" else "eval-fs"
    name = f"demo-lejepa-{tag}" if tag else "demo-lejepa"
    first = (full if k == "all" else few) if not tag else _read(runs / sub / f"lf-{tag}")
    sources = [(first, name)] + [
        (_read(runs / sub / f"lf-{tag + '-' if tag else ''}s{t}"), f"{name}-s{t}")
        for t in (1, 2)]
    per_probe: dict[str, list[list[float]]] = {}
    for rows, name in sources:
        got: dict[str, list[float]] = {}
        for r in rows:
            if r["encoder"] == name and str(r["k"]) == k and r["metric"] == metric:
                got.setdefault(r["probe"], []).append(r["value"])
        for probe, vals in got.items():
            per_probe.setdefault(probe, []).append(vals)
    per_probe = {p: v for p, v in per_probe.items() if len(v) == 3}
    if not per_probe:
        return "-"
    probe, seeds = max(per_probe.items(),
                       key=lambda pv: statistics.mean(x for v in pv[1] for x in v))
    means = [statistics.mean(v) for v in seeds]
    return (f"{statistics.mean(x for v in seeds for x in v):.3f} min-max [{min(means):.3f}, "
            f"{max(means):.3f}] ({probe}, 3 training seeds)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metric", default="cmap")
    ap.add_argument("--runs", default="runs", type=pathlib.Path)
    a = ap.parse_args()
    few = _read(a.runs / "eval-fewshot")
    full = _read(a.runs / "eval-demo")
    kinds = sorted({re.sub(r"-k\d+-s\d+$", "", d.name) for d in (a.runs / "eval-fs").glob("*")
                    if re.search(r"-k\d+-s\d+$", d.name)}, key=lambda n: (n != "sup", n))
    head = ["k", "label-free LeJEPA (frozen)", "label-free LeJEPA (frozen, 3 training seeds)",
            *[NAMES.get(n, n.replace("semi-w", "LeJEPA + k labels (weight ") + ")")
              for n in kinds], "supervised on all labels"]
    print(f"**{a.metric} on the demo soundscapes, best probe per cell; k = 1, 5, 10 under "
          "Bird-MAE's few-shot protocol (lenient sampling, seeds 1-3), k = all with "
          "configs/eval-demo.toml**\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in KS:
        src = full if k == "all" else few
        row = [k, best_group(src, "demo-lejepa", k, a.metric),
               label_free_seeds(a.runs, few, full, k, a.metric),
               *[(best_group(_read(a.runs / "eval-fs" / f"{n}-all"), None, k, a.metric)
                  if k == "all" else matched(a.runs, n, k, a.metric)) for n in kinds],
               best_group(src, "demo", k, a.metric)]
        print("| " + " | ".join(row) + " |")
    tags = sorted(d.name.removeprefix("lf-") for d in (a.runs / "eval-fs").glob("lf-*")
                  if not re.search(r"(^lf-|-)s\d+$", d.name))
    if tags:
        print(f"\n**Label-free variants, one setting each, training seed 0: {a.metric}, best "
              "probe, mean [95 % interval over sampling seeds and segments]**\n")
        print("| recipe | k = 1 | k = 5 | k = 10 | all |\n|---|---|---|---|---|")
        print("| the default (runs/demo-lejepa) | " + " | ".join(best_group(
            full if k == "all" else few, "demo-lejepa", k, a.metric) for k in KS) + " |")
        for tag in tags:
            rows = {k: _read(a.runs / ("eval-all" if k == "all" else "eval-fs") / f"lf-{tag}")
                    for k in KS}
            print(f"| {tag} | " + " | ".join(best_group(rows[k], None, k, a.metric)
                                             for k in KS) + " |")
            if (a.runs / "eval-all" / f"lf-{tag}-s2").is_dir():  # trained at seeds 1, 2 too
                print(f"| {tag}, 3 training seeds | " + " | ".join(
                    label_free_seeds(a.runs, few, full, k, a.metric, tag) for k in KS) + " |")


if __name__ == "__main__":
    main()
