"""Parity figures of the Bird-MAE import: max |ours - reference| of the pooled embedding on
random weights under the published key names, against the independent numpy forward pass of
tests/test_models_import.py (float64). Run from the repository root:
    PYTHONPATH=src:tests python docs/issues/011-models-in-and-out/parity.py
"""

import tempfile

import jax.numpy as jnp
import numpy as np
import test_models_import as t

import birdjepa.models
import birdjepa.models.bird_mae as bird_mae
import birdjepa.models.inference
import birdjepa.models.safetensors

x = np.random.default_rng(1).standard_normal((2, t.T, t.M)).astype(np.float32)
for d, depth, heads, name in [(64, 2, 4, None), (768, 12, 12, "bird-mae-base")]:
    for sincos in (False, True):
        sd = t.random_state_dict(d, depth, seed=2, sincos=sincos)
        if name:
            with tempfile.TemporaryDirectory() as tmp:
                birdjepa.models.safetensors.save(sd, f"{tmp}/w.safetensors")
                enc = birdjepa.models.load(name, weights=f"{tmp}/w.safetensors")
        else:
            enc = bird_mae.convert(sd, width=d, depth=depth, n_heads=heads)
        for pool in ("mean", "cls"):
            want = t.reference(sd, x, heads, pool)
            got = np.asarray(birdjepa.models.inference.with_pool(enc, pool)(jnp.asarray(x))
                             .pooled_bd)
            print(f"width {d:4d} depth {depth:2d} pos {enc.cfg.pos:8s} pool {pool:4s} "
                  f"max|err| {np.abs(got - want).max():.2e}  max|ref| {np.abs(want).max():.2f}")
