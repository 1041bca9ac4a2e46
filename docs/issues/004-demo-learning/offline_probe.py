"""Diagnostic: train from cached batches (cache_batches.py) with pretrain.update and, every eval_every
steps, fit an offline standardised logistic-regression probe on the encoder embedding (train: view 0
of 768 cached crops; eval: the 240 held-out centre crops). Usage, from the repo root:
`python offline_probe.py CACHE.npz --cfg configs/demo-lejepa.toml --n_steps=200 --eval_every=100`."""

import functools
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import birdjepa.config as C
import birdjepa.pretrain as P

cache = np.load(sys.argv[1])
cfg = P.finalize(C.cli(sys.argv[2:]))
mesh = P.make_mesh(1)
state, static, tx = P.init_state(cfg, mesh)
upd = jax.jit(functools.partial(P.update, static=static, tx=tx, cfg=cfg), donate_argnums=0)
x, y = cache["x"], cache["y"]
ex, ey = cache["ex"].astype(np.float32), cache["ey"]


def emb(state, a):
    m = eqx.combine(state["params"], static)
    f = jax.jit(lambda xx: m["encoder"](xx).pooled_bd)
    return np.concatenate([np.asarray(f(a[i : i + 48])) for i in range(0, len(a), 48)])


def linprobe(F, yy, E, eyy):
    mu, sd = F.mean(0), F.std(0) + 1e-6
    F, E = (F - mu) / sd, (E - mu) / sd
    p = (jnp.zeros((F.shape[1], 12)), jnp.zeros(12))
    o = optax.adam(1e-2)
    st = o.init(p)
    lf = lambda p: (
        optax.softmax_cross_entropy_with_integer_labels(F @ p[0] + p[1], yy).mean()
        + 1e-3 * (p[0] ** 2).sum()
    )

    @jax.jit
    def s(p, st):
        g = jax.grad(lf)(p)
        u, st = o.update(g, st)
        return optax.apply_updates(p, u), st

    for _ in range(1000):
        p, st = s(p, st)
    return float(((E @ p[0] + p[1]).argmax(1) == eyy).mean())


# train embeddings for the offline probe: view 0 of first 24 cached batches (unaugmented)
tx_ = x[:24, 0].reshape(-1, 512, 128).astype(np.float32)
ty = y[:24].reshape(-1)


def report(step):
    F, E = emb(state, tx_), emb(state, ex)
    print(
        f"step {step}: emb std across clips {E.std(0).mean():.4f} |mean| {np.abs(E.mean(0)).mean():.3f} offline-probe eval {linprobe(F, ty, E, ey):.3f}",
        flush=True,
    )


report(0)
t = time.time()
for step in range(cfg.n_steps):
    b = {"data": x[step % len(x)].astype(np.float32), "target": y[step % len(y)]}
    state, m = upd(state, P.shard_batch(b, cfg, mesh))
    if (step + 1) % 50 == 0:
        print(
            step + 1,
            {
                k: round(float(v), 4)
                for k, v in m.items()
                if k in ("loss", "inv", "sigreg", "probe_acc")
            },
            f"{time.time() - t:.0f}s",
            flush=True,
        )
    if (step + 1) % cfg.eval_every == 0:
        report(step + 1)
