"""Views from one decode: `python -m benchmarks views [--window S] [--workers 1,2]`.

Two views per sample, each its own decode (view_window_s=0) against both cut from one decoded
window of `--window` s (docs/issues/008-views-from-one-decode): views/s, views per CPU-second of
the whole process and peak RSS, each configuration in a fresh process, best of --repeat. The
corpus is `benchmarks.loader`'s (60 s demo recordings by default).
"""

import argparse
import json
import os
import tempfile

import benchmarks.loader as loader


def bench(paths, args) -> dict:
    """Two views per sample, each its own decode (view_window_s=0) against both cut from one
    decoded window of `--window` s: views/s and views per CPU-second, best of --repeat."""
    workers = [int(x) for x in args.workers.split(",")]
    w_s = args.window
    print(f"{os.cpu_count()} cores; load average {loader._load()}; 2 views per sample, batch "
          f"{args.batch_size}, {args.batches} timed batches per run; window {w_s} s")
    print(f"{'views from':<16} {'workers':>7} {'views/s':>8} {'views/cpu-s':>11} {'peak RSS':>8}")
    out: dict = {}
    for w in workers:
        for name, window in (("a decode each", 0.0), (f"one {w_s:g} s window", w_s)):
            best = None
            for _ in range(args.repeat):
                r = loader.run_rust_isolated(paths, args.batches, args.batch_size, w, args.transform,
                                      n_views=2, view_window_s=window)
                if best is None or r["clips_per_cpu_s"] > best["clips_per_cpu_s"]:
                    best = r
            vps, vpc = 2 * best["clips_per_s"], 2 * best["clips_per_cpu_s"]
            out[(w, window)] = {"views_per_s": vps, "views_per_cpu_s": vpc,
                                "peak_rss_mb": best["peak_rss_mb"]}
            print(f"{name:<16} {w:>7} {vps:8.1f} {vpc:11.1f} {best['peak_rss_mb']:6.0f}MB  "
                  f"{loader._load()}", flush=True)
        ratio = out[(w, w_s)]["views_per_cpu_s"] / out[(w, 0.0)]["views_per_cpu_s"]
        print(f"  {w} worker(s): one window / a decode each, views per CPU-s: {ratio:.2f}x "
              f"(goal >= 2x: {loader._verdict(ratio >= 2)}); views per CPU-s "
              f"{out[(w, w_s)]['views_per_cpu_s']:.0f} (goal >= 200: "
              f"{loader._verdict(out[(w, w_s)]['views_per_cpu_s'] >= 200)})")
    return {f"{w}w-{win:g}s": v for (w, win), v in out.items()}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks views", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="corpus directory: used if it holds *.arrow, else written there")
    p.add_argument("--rows", type=int, default=48, help="recordings of a written corpus")
    p.add_argument("--seconds", type=float, default=60.0, help="recording length of a corpus")
    p.add_argument("--transform", default="audio", choices=["audio", "debug"])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batches", type=int, default=8, help="timed batches per configuration")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--repeat", type=int, default=2, help="runs per configuration (best kept)")
    p.add_argument("--window", type=float, default=6.0, help="window seconds (>= the 5 s clip)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        paths = loader.demo_corpus(args.data or os.path.join(tmp, "demo"), args.rows, args.seconds)
        res = bench(paths, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0
