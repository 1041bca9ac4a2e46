"""Where a clip's CPU time goes: decode, resample and fbank of one 6 s window (the GPU configs'
view window), one thread, over 200 random rows of a corpus (default: the demo corpus), by codec.

    .venv/bin/python docs/issues/022-gpu-kept-busy/stages.py [SHARDS]
"""

import collections
import sys
import time

import numpy as np

import birdjepa._rs
import birdjepa.data
import birdjepa.data.ipc


def main(shards: str) -> None:
    rows = [a["bytes"] for p in birdjepa.data.resolve_shards(shards)
            for a in birdjepa.data.ipc.read_table(p).column("audio").to_pylist()]
    rng = np.random.default_rng(0)
    acc = collections.defaultdict(float)
    by = collections.defaultdict(lambda: [0, 0.0])
    picked = rng.choice(len(rows), min(200, len(rows)), replace=False)
    for i in picked:
        b = rows[i]
        info = birdjepa._rs.info(b)
        start = float(rng.random()) * max(0.0, (info["n_frames"] or 0) / info["sample_rate"] - 6)
        t0 = time.process_time()
        w, sr, _, _ = birdjepa._rs.decode(b, start_s=start, duration_s=6.0)
        t1 = time.process_time()
        w = birdjepa._rs.resample(w, sr, 32000) if sr != 32000 else w
        t2 = time.process_time()
        birdjepa._rs.fbank(w)
        t3 = time.process_time()
        acc["decode"] += t1 - t0
        acc["resample"] += t2 - t1
        acc["fbank"] += t3 - t2
        key = f"{info['codec']} {sr} Hz"
        by[key][0] += 1
        by[key][1] += t1 - t0
    n = len(picked)
    print(" | ".join(f"{k} {1e3 * v / n:.2f} ms" for k, v in acc.items())
          + f" | total {1e3 * sum(acc.values()) / n:.2f} ms per clip")
    for k, (c, s) in sorted(by.items()):
        print(f"  decode {k:18s} {c:3d} clips {1e3 * s / c:.2f} ms")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data/demo/train")
