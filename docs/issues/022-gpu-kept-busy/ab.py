"""Clips per CPU-second of the loader at the GPU configs' data settings (batch 256, 2 views from
one 6 s window, 2 workers), for two builds of the Rust extension interleaved round by round (the
machine is shared: the spread between rounds is larger than some of the gains):

    .venv/bin/python docs/issues/022-gpu-kept-busy/ab.py OLD.so NEW.so SHARDS... [--rounds 5]

Each (build, corpus) run is a fresh process (benchmarks.loader.run_rust_isolated) reading 12
timed batches after one warm-up batch; run.sh builds 589d8d8's extension for OLD.so.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys

import birdjepa

SO = birdjepa.__path__[0] + "/_rs.abi3.so"
ONE = """
import sys, json, benchmarks.loader as L, birdjepa.data
r = L.run_rust(birdjepa.data.resolve_shards(sys.argv[1]), 12, 256, 2, "audio", n_views=2,
               view_window_s=6.0)
print(json.dumps({k: r[k] for k in ("clips_per_cpu_s", "worker_cpu_ms_per_clip")}))
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("shards", nargs="+")
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    keep = SO + ".ab-keep"
    shutil.copy(SO, keep)
    got: dict = {}
    try:
        for i in range(a.rounds):
            for name, so in (("589d8d8", a.old), ("this tree", a.new)):
                shutil.copy(so, SO)
                for shards in a.shards:
                    out = subprocess.run([sys.executable, "-c", ONE, shards], check=True,
                                         capture_output=True, text=True).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    got.setdefault((name, shards), []).append(r["clips_per_cpu_s"])
                    print(f"round {i + 1} {name:9s} {shards:30s} {r['clips_per_cpu_s']:7.1f} "
                          f"clips/CPU-s, transform {r['worker_cpu_ms_per_clip']:.2f} ms/clip",
                          flush=True)
    finally:
        shutil.copy(keep, SO)
    base = statistics.median(got[("589d8d8", a.shards[0])])
    print(f"\nmedians over {a.rounds} rounds, ratio to 589d8d8 on {a.shards[0]}:")
    for (name, shards), v in got.items():
        m = statistics.median(v)
        print(f"  {name:9s} {shards:30s} {m:7.1f} clips/CPU-s  {m / base:.2f}x")


if __name__ == "__main__":
    main()
