"""Cache loader batches for quick sweeps: `python cache_batches.py N_BATCHES N_VIEWS OUT.npz` (from the
repo root) writes N train batches of 32 (float16) from data/demo/train and the whole eval split."""

import sys
import time

import numpy as np

import birdjepa.data

n_batches, n_views, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
t = time.time()
tr = birdjepa.data.Loader("data/demo/train", mode="train", batch_size=32, n_views=n_views, seed=0, n_workers=2)
xs, ys = [], []
for i, b in enumerate(tr):
    if i == n_batches:
        break
    xs.append(b["data"].astype(np.float16))
    ys.append(b["target"])
tr.close()
ev = birdjepa.data.Loader("data/demo/eval", mode="eval", batch_size=48, seed=0, n_workers=2)
ex, ey, ev_ = [], [], []
for b in ev:
    ex.append(b["data"].astype(np.float16))
    ey.append(b["target"])
    ev_.append(b["valid"])
ev.close()
np.savez(
    out,
    x=np.stack(xs),
    y=np.stack(ys),
    ex=np.concatenate(ex),
    ey=np.concatenate(ey),
    ev=np.concatenate(ev_),
)
print("cached", np.stack(xs).shape, np.concatenate(ex).shape, time.time() - t)
