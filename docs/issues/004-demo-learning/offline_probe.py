"""Diagnostic: train from cached batches (cache_batches.py) with birdjepa.train.step.update and, every eval_every
steps, report on the 240 held-out centre crops: the online probe's accuracy (ONLINE), an offline
standardised logistic-regression probe fitted on view 0 of 768 cached train crops (offline), the
embedding's per-dimension spread and offset, and singular values of the centred eval embedding
(top / 5th / 20th: how much one direction dominates). Usage, from the repo root:
`python offline_probe.py CACHE.npz --cfg configs/demo-lejepa.toml --n_steps=300 --eval_every=100`."""

import functools
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

import birdjepa.config
import birdjepa.config.command_line
import birdjepa.train.state
import birdjepa.train.step

cache = np.load(sys.argv[1])
cfg = birdjepa.config.finalize(birdjepa.config.command_line.cli(sys.argv[2:]))
mesh = birdjepa.train.state.make_mesh(1)
state, static, tx = birdjepa.train.state.init_state(cfg, mesh)
upd = jax.jit(functools.partial(birdjepa.train.step.update, static=static, tx=tx, cfg=cfg), donate_argnums=0)
x, y = cache["x"], cache["y"]
ex, ey = cache["ex"].astype(np.float32), cache["ey"]
V = cfg.data.n_views


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
    def lf(p):
        return (
            optax.softmax_cross_entropy_with_integer_labels(F @ p[0] + p[1], yy).mean()
            + 1e-3 * (p[0] ** 2).sum()
        )

    @jax.jit
    def s(p, st):
        u, st = o.update(jax.grad(lf)(p), st)
        return optax.apply_updates(p, u), st

    for _ in range(500):
        p, st = s(p, st)
    return float(((E @ p[0] + p[1]).argmax(1) == eyy).mean())


tx_ = x[:24, 0].reshape(-1, 512, 128).astype(np.float32)
ty = y[:24].reshape(-1)


def report(step):
    F, E = emb(state, tx_), emb(state, ex)
    m = eqx.combine(state["params"], static)
    online = float((np.asarray(m["probe"](jnp.asarray(E))).argmax(1) == ey).mean())
    sv = np.linalg.svd(E - E.mean(0), compute_uv=False)
    print(
        f"step {step}: ONLINE {online:.3f} offline {linprobe(F, ty, E, ey):.3f} emb std {E.std(0).mean():.3f} |mean| {np.abs(E.mean(0)).mean():.3f} sv top/5th/20th {sv[0]:.1f}/{sv[4]:.1f}/{sv[19]:.1f}",
        flush=True,
    )


report(0)
t = time.time()
accs = []
for step in range(cfg.n_steps):
    xb = x[step % len(x)][:V].astype(np.float32)
    b = {"data": xb if V > 1 else xb[0], "target": y[step % len(y)]}
    state, mt = upd(state, birdjepa.train.state.shard_batch(b, cfg, mesh))
    accs.append(float(mt["probe_acc"]))
    if (step + 1) % 50 == 0:
        print(
            step + 1,
            {
                k: round(float(v), 4)
                for k, v in mt.items()
                if k in ("loss", "inv", "sigreg", "probe_loss")
            },
            f"trainprobe {np.mean(accs[-50:]):.3f}",
            f"{time.time() - t:.0f}s",
            flush=True,
        )
    if (step + 1) % cfg.eval_every == 0:
        report(step + 1)
