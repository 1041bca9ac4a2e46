"""ViT encoder: shapes for square and non-square patches, position encodings, options, remat."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import birdjepa.model as model


def tiny(**kw) -> model.ModelConfig:
    return model.ModelConfig(**{"width": 32, "depth": 2, "n_heads": 2, "n_registers": 2, **kw})


@pytest.mark.parametrize(
    "patch,pos",
    [((16, 16), "absolute"), ((4, 64), "rope"), ((2, 128), "absolute")],
)
def test_shapes_and_finite_grads(patch, pos):
    t, m = 32, 128
    enc = model.ViT(tiny(patch=patch, pos=pos), n_frames=t, n_mels=m, key=jax.random.key(0))
    n = (t // patch[0]) * (m // patch[1])
    assert enc.n_patches == n
    x = jax.random.normal(jax.random.key(1), (3, t, m))
    out = enc(x)
    assert out.pooled_bd.shape == (3, 32)
    assert out.patches_bnd.shape == (3, n, 32)
    # Blocks are stacked along a leading depth axis.
    assert enc.blocks.wq.w.shape == (2, 32, 32)
    grads = eqx.filter_jit(eqx.filter_grad(lambda e: jnp.square(e(x).pooled_bd).sum()))(enc)
    leaves = jax.tree.leaves(grads)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    assert float(jnp.abs(grads.blocks.wq.w).sum()) > 0


def test_patchify_is_row_major_over_time_then_mel():
    enc = model.ViT(tiny(patch=(2, 4)), n_frames=4, n_mels=8, key=jax.random.key(0))
    x = jnp.arange(32.0).reshape(1, 4, 8)
    p = np.asarray(enc.patchify(x))
    assert p.shape == (1, 4, 8)
    np.testing.assert_array_equal(p[0, 0], [0, 1, 2, 3, 8, 9, 10, 11])  # frames 0-1, mels 0-3
    np.testing.assert_array_equal(p[0, 1], [4, 5, 6, 7, 12, 13, 14, 15])  # frames 0-1, mels 4-7
    np.testing.assert_array_equal(p[0, 2], [16, 17, 18, 19, 24, 25, 26, 27])  # frames 2-3


def test_options_and_keep_subset():
    cfg = tiny(pos="rope", qk_norm=True, swiglu=True, layerscale=1e-4, pool="mean")
    enc = model.ViT(cfg, n_frames=32, n_mels=64, key=jax.random.key(0))
    assert enc.blocks.q_norm is not None and enc.blocks.ls1.shape == (2, 32)
    assert enc.blocks.fc_gate is not None
    x = jax.random.normal(jax.random.key(1), (2, 32, 64))
    keep = jnp.array([[0, 3, 5], [1, 2, 7]])
    out = enc(x, keep_bk=keep)
    assert out.patches_bnd.shape == (2, 3, 32)
    np.testing.assert_allclose(out.pooled_bd, out.patches_bnd.mean(1), rtol=1e-6)


def test_rope_is_position_sensitive():
    enc = model.ViT(tiny(pos="rope"), n_frames=32, n_mels=64, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (1, 32, 64))
    a = enc(x, keep_bk=jnp.array([[0, 1]])).pooled_bd
    b = enc(x, keep_bk=jnp.array([[0, 1]])).pooled_bd
    np.testing.assert_array_equal(a, b)
    # Same two patch contents presented at other grid positions give another embedding.
    x_swapped = x.at[:, 16:, :16].set(x[:, :16, :16])  # copy patch 0 to a later time row
    c = enc(x_swapped, keep_bk=jnp.array([[4, 1]])).pooled_bd
    assert float(jnp.abs(a - c).max()) > 1e-4


def test_remat_matches():
    x = jax.random.normal(jax.random.key(1), (2, 32, 64))
    outs = []
    for remat in (False, True):
        enc = model.ViT(tiny(remat=remat), n_frames=32, n_mels=64, key=jax.random.key(0))
        g = eqx.filter_jit(eqx.filter_grad(lambda e: jnp.square(e(x).pooled_bd).sum()))(enc)
        outs.append(g.blocks.fc1.w)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-7)


def test_presets_and_errors():
    r = model.resolve(model.ModelConfig(preset="vit-s", depth=3))
    assert (r.width, r.depth, r.n_heads, r.patch) == (384, 3, 6, (16, 16))
    assert model.resolve(model.ModelConfig(preset="vit-b")).width == 768
    with pytest.raises(ValueError, match=r"model.patch=\(16, 16\) must divide .*\(40, 128\)"):
        model.ViT(model.ModelConfig(), n_frames=40, n_mels=128, key=jax.random.key(0))
    with pytest.raises(ValueError, match="width=30 not divisible by model.n_heads=4"):
        model.resolve(model.ModelConfig(width=30, n_heads=4))
