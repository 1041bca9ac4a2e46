"""ViT encoder: shapes for square and non-square patches, position encodings, options, remat,
attention against an explicit reference, mixed precision."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import birdjepa.config.architecture
import birdjepa.model as model


def tiny(**kw) -> birdjepa.config.architecture.ModelConfig:
    return birdjepa.config.architecture.resolve(
        birdjepa.config.architecture.ModelConfig(**{"width": 32, "depth": 2, "n_heads": 2, "n_registers": 2, **kw}))


@pytest.mark.heavy
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


@pytest.mark.heavy
@pytest.mark.parametrize("remat", ["block", "dots", True])
def test_remat_matches(remat):
    x = jax.random.normal(jax.random.key(1), (2, 32, 64))
    outs = []
    for r in ("none", remat):
        enc = model.ViT(tiny(remat=r), n_frames=32, n_mels=64, key=jax.random.key(0))
        g = eqx.filter_jit(eqx.filter_grad(lambda e: jnp.square(e(x).pooled_bd).sum()))(enc)
        outs.append(g.blocks.fc1.w)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-7)
    assert birdjepa.config.architecture.resolve(tiny(remat=True)).remat == "block"
    assert birdjepa.config.architecture.resolve(tiny(remat=False)).remat == "none"


def reference_attention(q, k, v, n_valid=None):
    """softmax(q k^T / sqrt(d)) v by explicit einsums in float64 numpy (keys >= n_valid masked)."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    if n_valid is not None:
        logits[..., n_valid:] = -np.inf
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v)


@pytest.mark.parametrize("n,pad_to", [(13, None), (16, None), (13, 8), (21, 8)])
def test_attention_matches_einsum_reference(n, pad_to):
    """`model.attention` (jax.nn.dot_product_attention) equals the explicit reference to 1e-5 in
    float32, also when padded to a multiple of 8 with masked keys (the cuDNN path's layout)."""
    q, k, v = (2.0 * jax.random.normal(jax.random.key(i), (3, n, 2, 16)) for i in range(3))
    got = model.attention(q, k, v, impl="xla", pad_to=pad_to)
    assert got.shape == (3, n, 2, 16)
    np.testing.assert_allclose(got, reference_attention(q, k, v), atol=1e-5, rtol=1e-5)


def test_block_attention_matches_reference_with_rope_and_qk_norm():
    """A whole block (QK-norm, then RoPE on q and k, then attention) against the reference
    attention on the same q, k and v."""
    enc = model.ViT(tiny(pos="rope", qk_norm=True), n_frames=32, n_mels=64, key=jax.random.key(0))
    blk = jax.tree.map(lambda a: a[0], enc.blocks)
    x = jax.random.normal(jax.random.key(1), (2, 9, 32))
    ang = jax.random.uniform(jax.random.key(2), (2, 9, 8), maxval=6.0)
    h = blk.norm1(x)
    q, k, v = (lin(h).reshape(2, 9, 2, 16) for lin in (blk.wq, blk.wk, blk.wv))
    q, k = model.apply_rope(blk.q_norm(q), ang), model.apply_rope(blk.k_norm(k), ang)
    a = blk.wo(jnp.asarray(reference_attention(q, k, v), jnp.float32).reshape(2, 9, 32))
    m = blk.fc2(jax.nn.gelu(blk.fc1(blk.norm2(x + a))))
    np.testing.assert_allclose(blk(x, ang), x + a + m, atol=1e-5, rtol=1e-5)


def test_bf16_matmuls_with_float32_params_norms_and_outputs():
    """compute_dtype="bfloat16": the matmuls are bf16, params and outputs float32, and the
    output stays within bf16 rounding (~1e-2 relative after two blocks) of float32."""
    x = jax.random.normal(jax.random.key(1), (2, 32, 64))
    f32 = model.ViT(tiny(), n_frames=32, n_mels=64, key=jax.random.key(0))
    bf = model.ViT(tiny(compute_dtype="bfloat16"), n_frames=32, n_mels=64, key=jax.random.key(0))
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(eqx.filter(bf, eqx.is_array)))
    jaxpr = str(jax.make_jaxpr(bf)(x))
    assert "bf16[" in jaxpr and "bf16[" not in str(jax.make_jaxpr(f32)(x))
    out, ref = bf(x), f32(x)
    assert out.pooled_bd.dtype == jnp.float32 and out.patches_bnd.dtype == jnp.float32
    err = float(jnp.linalg.norm(out.patches_bnd - ref.patches_bnd) / jnp.linalg.norm(ref.patches_bnd))
    assert 1e-4 < err < 3e-2, err


def test_bf16_block_takes_norm_statistics_in_float32():
    """The residual stream is float32 and the norms read it in float32. Tokens with a large
    common offset (50 + N(0, 0.1^2)): in bfloat16 their spacing at 50 is 0.25, so statistics
    taken in bfloat16 would normalise rounding noise (relative error ~1); in float32 only the
    bf16 branch computation differs from the float32 block (a few 1e-3)."""
    x = 50.0 + 0.1 * jax.random.normal(jax.random.key(1), (2, 9, 32))
    outs = []
    for dt in ("float32", "bfloat16"):
        enc = model.ViT(tiny(compute_dtype=dt, layerscale=1.0), n_frames=32, n_mels=64,
                        key=jax.random.key(0))
        blk = jax.tree.map(lambda a: a[0], enc.blocks)
        outs.append(blk(x) - x)
    err = float(jnp.linalg.norm(outs[1] - outs[0]) / jnp.linalg.norm(outs[0]))
    assert err < 3e-2, err


def test_presets_and_errors():
    r = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(preset="vit-s", depth=3))
    assert (r.width, r.depth, r.n_heads, r.patch) == (384, 3, 6, (16, 16))
    assert birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(preset="vit-b")).width == 768
    with pytest.raises(ValueError, match=r"model.patch=\(16, 16\) must divide .*\(40, 128\)"):
        model.ViT(birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig()), n_frames=40, n_mels=128,
                  key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"expected a resolved ModelConfig.*unset fields \['patch'"):
        model.ViT(birdjepa.config.architecture.ModelConfig(), n_frames=32, n_mels=128, key=jax.random.key(0))
    with pytest.raises(ValueError, match="width=30 not divisible by model.n_heads=4"):
        birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(width=30, n_heads=4))
    with pytest.raises(ValueError, match=r"model.remat: expected one of .*'dots'.*, got 'all'"):
        birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(remat="all"))
    r = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(preset="vit-b"))
    assert (r.compute_dtype, r.remat, r.n_registers) == ("bfloat16", "block", 7)
    assert birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(preset="vit-s")).remat == "dots"
    assert birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig()).compute_dtype == "float32"


@pytest.mark.parametrize("pos", ["absolute", "rope"])
def test_shorter_inputs_use_the_first_rows_of_the_grid(pos):
    """Local crops: an input of fewer patch rows encodes on a shorter grid; with absolute
    positions it is the encoder built for that length with the first rows of the table."""
    enc = model.ViT(tiny(patch=(8, 64), pos=pos), n_frames=32, n_mels=128, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (3, 16, 128))
    out = enc(x)
    assert out.patches_bnd.shape == (3, 4, 32)
    short = model.ViT(tiny(patch=(8, 64), pos=pos), n_frames=16, n_mels=128,
                      key=jax.random.key(0))
    if pos == "absolute":
        short = eqx.tree_at(lambda e: e.pos_embed, short, enc.pos_embed[:4])
    short = eqx.tree_at(lambda e: (e.patch_embed, e.blocks, e.cls, e.registers, e.norm), short,
                        (enc.patch_embed, enc.blocks, enc.cls, enc.registers, enc.norm))
    np.testing.assert_allclose(np.asarray(out.pooled_bd), np.asarray(short(x).pooled_bd),
                               rtol=1e-5, atol=1e-6)
    # A short input is not the same as its zero-padded full-length version.
    padded = enc(jnp.pad(x, ((0, 0), (0, 16), (0, 0))))
    assert not np.allclose(np.asarray(padded.pooled_bd), np.asarray(out.pooled_bd), atol=1e-4)
    for bad in (12, 40):
        with pytest.raises(ValueError, match=f"multiple of patch height 8 frames, at most 32, "
                                             f"got {bad}"):
            enc(jax.random.normal(jax.random.key(1), (1, bad, 128)))


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 1e-2)])
def test_fused_qk_norm_rope_equals_the_reference_forward_and_gradients(dtype, tol):
    """Issue 46: QK-norm and RoPE in one pass with their own backward (`qk_norm_rope`) against
    the plain definition (RMSNorm, then RoPE, autodiff): outputs and the gradients of q, k and
    both scales, with RoPE angles up to 100 rad (float32 rotation), in float32 to 1e-5 and in
    bfloat16 within its rounding. The block uses the fused path."""
    b, n, h, d = 2, 24, 3, 16
    ks = jax.random.split(jax.random.key(0), 7)
    q = (3.0 * jax.random.normal(ks[0], (b, n, h, d))).astype(dtype)
    k = (0.5 * jax.random.normal(ks[1], (b, n, h, d)) + 1.0).astype(dtype)
    g_q, g_k = (1.0 + 0.3 * jax.random.normal(ks[i], (d,)) for i in (2, 3))
    ang = jax.random.uniform(ks[4], (1, n, d // 2), maxval=100.0)
    ct = tuple(jax.random.normal(ks[i], (b, n, h, d)).astype(dtype) for i in (5, 6))

    def run(fn):
        out, vjp = jax.vjp(lambda *a: fn(*a, ang), q, k, g_q, g_k)
        return out, vjp(ct)

    (out, grads), (ref, ref_grads) = jax.jit(run, static_argnums=0)(model.qk_norm_rope), \
        jax.jit(run, static_argnums=0)(model.qk_norm_rope_reference)
    for got, want in zip((*out, *grads), (*ref, *ref_grads), strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert _rel(got, want) <= tol, (_rel(got, want), tol)
    enc = model.ViT(tiny(pos="rope", qk_norm=True), n_frames=32, n_mels=64, key=jax.random.key(0))
    assert "custom_vjp_call" in str(jax.make_jaxpr(enc)(jnp.zeros((1, 32, 64))))


@pytest.mark.heavy
def test_unrolled_layers_equal_the_scan_forward_and_gradients():
    """`scan_layers = false` runs the same stacked blocks in a Python loop (remat per block):
    the same outputs and gradients as the scan, traced without a scan."""
    cfg = tiny(pos="rope", qk_norm=True, layerscale=0.1, remat="dots", depth=3)
    x = jax.random.normal(jax.random.key(1), (2, 32, 64))
    encs = [model.ViT(dataclasses.replace(cfg, scan_layers=s), n_frames=32, n_mels=64,
                      key=jax.random.key(0)) for s in (True, False)]

    def loss(e):
        return jnp.square(e(x).pooled_bd).sum()

    (l_scan, g_scan), (l_loop, g_loop) = (
        eqx.filter_jit(eqx.filter_value_and_grad(loss))(e) for e in encs)
    np.testing.assert_allclose(l_loop, l_scan, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(g_loop), jax.tree.leaves(g_scan), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
    assert " scan[" in str(jax.make_jaxpr(loss)(encs[0]))
    assert " scan[" not in str(jax.make_jaxpr(loss)(encs[1]))


def test_bfloat16_residual_stream():
    """`residual_dtype = "bfloat16"`: the stream between blocks is bfloat16, the outputs stay
    float32 and within bfloat16's rounding of the float32 stream; a bfloat16 residual with
    float32 compute is refused naming both settings."""
    x = jax.random.normal(jax.random.key(1), (2, 32, 64))
    base = tiny(compute_dtype="bfloat16", layerscale=0.1, pos="rope", qk_norm=True)
    f32 = model.ViT(base, n_frames=32, n_mels=64, key=jax.random.key(0))
    bf = model.ViT(dataclasses.replace(base, residual_dtype="bfloat16"), n_frames=32, n_mels=64,
                   key=jax.random.key(0))
    out, ref = bf(x), f32(x)
    assert out.pooled_bd.dtype == jnp.float32 and out.patches_bnd.dtype == jnp.float32
    assert 0 < _rel(out.patches_bnd, ref.patches_bnd) < 3e-2
    carry = [e for e in jax.make_jaxpr(bf)(x).jaxpr.eqns if e.primitive.name == "scan"][0]
    assert carry.outvars[0].aval.dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="model.residual_dtype: expected 'float32' with "
                       "compute_dtype 'float32'.*got 'bfloat16'"):
        tiny(residual_dtype="bfloat16")
