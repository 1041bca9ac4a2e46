"""ViT encoder over log-mel spectrograms.

Input `x_btm` is (batch, time frames, mel bins). It is cut into (patch_t, patch_m) patches in
row-major (time, then mel) order; tokens are [CLS, registers..., patches...]. Blocks are stacked
into one module with a leading `depth` axis (built with `eqx.filter_vmap`) and applied with
`lax.scan`, optionally rematerialised. Linear weights are stored (d_in, d_out) and applied as
`x @ w`, so a stacked block weight is (depth, d_in, d_out).

Mixed precision: parameters are always float32 (so are the optimiser state and checkpoints).
With `compute_dtype = "bfloat16"` every matmul and the attention run in bfloat16 (weights are
cast at use); the norms' statistics (LayerNorm, RMSNorm), the attention softmax, RoPE's rotation
and the final norm stay float32, so the encoder's outputs (and every loss, head and probe
computed from them) are float32. The residual stream between blocks is `residual_dtype`
(float32 unless set). With `scan_layers = false` the stacked blocks run in a Python loop
instead of `lax.scan` (same parameters).
"""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

import birdjepa.config.architecture

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
REMAT_POLICIES = {
    "none": None,
    "block": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _trunc_normal(key, shape, std=0.02):
    return std * jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32)


class Linear(eqx.Module):
    """x @ w + b in the dtype of `x` (float32 parameters are cast at use)."""

    w: Float[Array, "d_in d_out"]
    b: Float[Array, " d_out"] | None

    def __init__(self, d_in: int, d_out: int, *, bias: bool = True, std: float = 0.02, key):
        self.w = _trunc_normal(key, (d_in, d_out), std)
        self.b = jnp.zeros((d_out,)) if bias else None

    def __call__(self, x: Float[Array, "... d_in"], scale: Float[Array, " d_out"] | None = None
                 ) -> Float[Array, "... d_out"]:
        """`(x @ w + b) * scale` with the scale folded into the (float32) weight and bias: no
        pass over the activations, and its gradient a reduction over the weight's gradient."""
        w, b = self.w, self.b
        if scale is not None:
            w, b = w * scale, None if b is None else b * scale
        y = x @ w.astype(x.dtype)
        return y if b is None else y + b.astype(x.dtype)


class LayerNorm(eqx.Module):
    """Statistics, scale and shift in float32; the result in `dtype` (default: that of x)."""

    scale: Float[Array, " d"]
    bias: Float[Array, " d"]

    def __init__(self, d: int):
        self.scale = jnp.ones((d,))
        self.bias = jnp.zeros((d,))

    def __call__(self, x: Float[Array, "... d"], dtype=None) -> Float[Array, "... d"]:
        x32 = x.astype(jnp.float32)
        mu = x32.mean(-1, keepdims=True)
        var = jnp.square(x32 - mu).mean(-1, keepdims=True)
        y = (x32 - mu) * jax.lax.rsqrt(var + 1e-6) * self.scale + self.bias
        return y.astype(dtype or x.dtype)


class RMSNorm(eqx.Module):
    """Statistics and scale in float32; the result in the dtype of x."""

    scale: Float[Array, " d"]

    def __init__(self, d: int):
        self.scale = jnp.ones((d,))

    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + 1e-6) * self.scale
        return y.astype(x.dtype)


def rope_angles(coords_n2: Int[Array, "n 2"], head_dim: int) -> Float[Array, "n h2"]:
    """Axial RoPE angles: first half of the rotated pairs use the time index, second the mel."""
    n_freq = head_dim // 4
    freqs_f = 1.0 / (100.0 ** (jnp.arange(n_freq) / n_freq))
    ang_t = coords_n2[:, :1] * freqs_f
    ang_m = coords_n2[:, 1:] * freqs_f
    return jnp.concatenate([ang_t, ang_m], axis=-1)  # (n, head_dim // 2)


def apply_rope(x_bnhd: Float[Array, "b n h d"], ang_bnp: Float[Array, "b n p"]):
    """Rotate in float32 (angles of ~100 rad lose their phase in bfloat16); result in x's dtype.
    The halves (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos) as x c + swap(x) s, the swap a
    reverse of the (2, d/2) view: one elementwise pass XLA fuses with what precedes it (a split
    and concatenate made it write a float32 copy of the input first)."""
    *lead, d = x_bnhd.shape
    x = x_bnhd.astype(jnp.float32).reshape(*lead, 2, d // 2)
    cos, sin = jnp.cos(ang_bnp)[:, :, None, None, :], jnp.sin(ang_bnp)[:, :, None, None, :]
    sign = jnp.array([-1.0, 1.0], jnp.float32)[:, None]
    out = x * cos + x[..., ::-1, :] * (sign * sin)
    return out.reshape(x_bnhd.shape).astype(x_bnhd.dtype)


def _rotate(x: Float[Array, "... d"], cos, sin, *, inverse: bool = False) -> Float[Array, "... d"]:
    """RoPE's rotation of the halves (x1, x2) by the angles whose cos and sin are given (float32,
    broadcast over x's (..., d/2) halves): (x1 cos - x2 sin, x1 sin + x2 cos), or its inverse
    (the transpose: the rotation by minus the angles). As `x c + swap(x) s` on a (2, d/2) view,
    the swap a reverse, so the pass reads x only at its own and its partner's position."""
    *lead, d = x.shape
    x = x.reshape(*lead, 2, d // 2)
    sign = jnp.array([1.0, -1.0] if inverse else [-1.0, 1.0], jnp.float32)[:, None]
    return (x * cos + x[..., ::-1, :] * (sign * sin)).reshape(*lead, d)


def _rms(t32):
    return jax.lax.rsqrt(jnp.square(t32).mean(-1, keepdims=True) + 1e-6)


def _norm_rotate(t, g, cos, sin):
    """rope(rmsnorm(t) * g) as r * rope(t * g), r = 1 / rms(t) per head: the rotation is linear
    and r a per-row scalar, so the one row statistic and one elementwise pass that reads t (at
    its own and its partner's position) give it; float32 inside, t's dtype out."""
    t32 = t.astype(jnp.float32)
    return (_rotate(t32 * g, cos, sin) * _rms(t32)).astype(t.dtype)


@jax.custom_vjp
def _qk_norm_rope(q, k, g_q, g_k, cos, sin):
    return _norm_rotate(q, g_q, cos, sin), _norm_rotate(k, g_k, cos, sin)


def _qk_norm_rope_fwd(q, k, g_q, g_k, cos, sin):
    return _qk_norm_rope(q, k, g_q, g_k, cos, sin), (q, k, g_q, g_k, cos, sin)


def _norm_rotate_bwd(t, g, cos, sin, dout):
    """Gradients of `_norm_rotate` for its output's cotangent `dout`: y = t g r rotated, so with
    dy = rotate^T(dout) and u = dy g: dt = r u - t r^3 mean(u t) (per head), dg = sum over
    rows of dy t r. One row statistic, one pass that writes dt, one column sum: the only
    activation it needs is t, the matmul's output that the backward pass keeps anyway."""
    t32 = t.astype(jnp.float32)
    r = _rms(t32)
    dy = _rotate(dout.astype(jnp.float32), cos, sin, inverse=True)
    mean_ut = (dy * g * t32).mean(-1, keepdims=True)
    dt = r * (dy * g) - t32 * (r * r * r) * mean_ut
    dg = (dy * t32 * r).reshape(-1, t.shape[-1]).sum(0)
    return dt.astype(t.dtype), dg


def _qk_norm_rope_bwd(res, cts):
    q, k, g_q, g_k, cos, sin = res
    dq, dg_q = _norm_rotate_bwd(q, g_q, cos, sin, cts[0])
    dk, dg_k = _norm_rotate_bwd(k, g_k, cos, sin, cts[1])
    return dq, dk, dg_q, dg_k, jnp.zeros_like(cos), jnp.zeros_like(sin)


_qk_norm_rope.defvjp(_qk_norm_rope_fwd, _qk_norm_rope_bwd)


def qk_norm_rope(q_bnhd: Float[Array, "b n h d"], k_bnhd: Float[Array, "b n h d"],
                 g_q: Float[Array, " d"], g_k: Float[Array, " d"],
                 ang_bnp: Float[Array, "b n p"]):
    """QK-norm (RMSNorm per head with scales g_q, g_k) then RoPE of q and k, fused: one pass
    over each in the forward and its own backward (`_norm_rotate_bwd`) instead of autodiff's
    float32 intermediates between the norm and the rotation. Equal to `qk_norm_rope_reference`
    within bfloat16's rounding (tests/test_model.py); (q, k) in q's dtype."""
    cos, sin = jnp.cos(ang_bnp)[:, :, None, None, :], jnp.sin(ang_bnp)[:, :, None, None, :]
    return _qk_norm_rope(q_bnhd, k_bnhd, g_q, g_k, cos, sin)


def qk_norm_rope_reference(q_bnhd, k_bnhd, g_q, g_k, ang_bnp):
    """The same as `qk_norm_rope` written plainly (RMSNorm, then `apply_rope`, gradients by
    autodiff): the definition the fused path is tested against."""
    def norm(t, g):
        t32 = t.astype(jnp.float32)
        return (t32 * _rms(t32) * g).astype(t.dtype)

    return apply_rope(norm(q_bnhd, g_q), ang_bnp), apply_rope(norm(k_bnhd, g_k), ang_bnp)


def sincos_1d(pos_n: np.ndarray, d: int) -> np.ndarray:
    """(n, d) float32 [sin(pos w), cos(pos w)] with w_i = 10000^(-i / (d/2)) (MAE's table)."""
    omega = 1.0 / 10000.0 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
    out = pos_n.reshape(-1, 1).astype(np.float64) * omega
    return np.concatenate([np.sin(out), np.cos(out)], axis=1).astype(np.float32)


def sincos_2d(grid: tuple[int, int], d: int) -> np.ndarray:
    """Fixed 2-D sin-cos position table (n = gt * gm, d), patches row-major over (time, mel):
    the first d/2 dims code the time index, the last d/2 the mel index (MAE's construction on
    this grid). A constant: nothing is trained."""
    gt, gm = grid
    t, m = np.meshgrid(np.arange(gt), np.arange(gm), indexing="ij")
    return np.concatenate([sincos_1d(t, d // 2), sincos_1d(m, d // 2)], axis=1)


def target_platform(x) -> str:
    """The platform of the devices `x` (an array or a tracer) is placed on, as its sharding's
    mesh records it: what a step is compiled for, which may differ from `jax.default_backend()`
    (a step compiled for a CUDA topology on a CPU machine). The default backend when unknown."""
    device = getattr(getattr(jax.typeof(x).sharding, "mesh", None), "abstract_device", None)
    return device.platform if device is not None else jax.default_backend()


def use_cudnn(attention: str, dtype, head_dim: int, platform: str | None = None) -> bool:
    """Whether `attention` resolves to the cuDNN kernel for this dtype, head dim and target
    `platform` (default: the default backend)."""
    if attention != "auto":
        return attention == "cudnn"
    ok_shape = head_dim <= 128 and head_dim % 8 == 0
    on_gpu = (platform or jax.default_backend()) in ("gpu", "cuda")
    return on_gpu and dtype in (jnp.bfloat16, jnp.float16) and ok_shape


def attention(
    q_bnhd: Float[Array, "b n h d"], k_bnhd: Float[Array, "b n h d"],
    v_bnhd: Float[Array, "b n h d"], *, impl: str = "auto", pad_to: int | None = None,
) -> Float[Array, "b n h d"]:
    """softmax(q k^T / sqrt(d)) v through `jax.nn.dot_product_attention` (softmax in float32 in
    both kernels). A sequence that is not a multiple of `pad_to` (default: 8 for cuDNN, else 1)
    is padded with zero tokens whose keys are masked (key_value_seq_lengths); the padded query
    rows are dropped."""
    b, n = q_bnhd.shape[:2]
    cudnn = use_cudnn(impl, q_bnhd.dtype, q_bnhd.shape[-1], target_platform(q_bnhd))
    kernel = "cudnn" if cudnn else "xla"
    pad = -n % (pad_to or (8 if cudnn else 1))
    if not pad:
        return jax.nn.dot_product_attention(q_bnhd, k_bnhd, v_bnhd, implementation=kernel)
    widths = ((0, 0), (0, pad), (0, 0), (0, 0))
    q, k, v = (jnp.pad(t, widths) for t in (q_bnhd, k_bnhd, v_bnhd))
    out = jax.nn.dot_product_attention(
        q, k, v, key_value_seq_lengths=jnp.full((b,), n, jnp.int32), implementation=kernel)
    return out[:, :n]


class Block(eqx.Module):
    """Pre-norm transformer block. The residual stream `x` is `residual` (float32 unless set);
    each branch runs in `dtype` from its norm's output and is added back in the residual's dtype
    (a bfloat16 residual rounds away LayerScale-sized updates in the forward pass: 1e-4 x is
    below bfloat16's relative precision of 2^-8; their gradients are kept). With QK-norm and
    RoPE both on, they run fused (`qk_norm_rope`)."""

    norm1: LayerNorm
    wq: Linear
    wk: Linear
    wv: Linear
    wo: Linear
    q_norm: RMSNorm | None
    k_norm: RMSNorm | None
    ls1: Float[Array, " d"] | None
    norm2: LayerNorm
    fc1: Linear
    fc_gate: Linear | None
    fc2: Linear
    ls2: Float[Array, " d"] | None
    n_heads: int = eqx.field(static=True)
    dtype: str = eqx.field(static=True)
    attention: str = eqx.field(static=True)
    gelu: str = eqx.field(static=True, default="tanh")
    residual: str = eqx.field(static=True, default="float32")

    def __init__(self, cfg: birdjepa.config.architecture.ModelConfig, *, key):
        d, h = cfg.width, cfg.n_heads
        k = jax.random.split(key, 7)
        hidden = int(d * cfg.mlp_ratio * (2 / 3 if cfg.swiglu else 1))
        self.norm1, self.norm2 = LayerNorm(d), LayerNorm(d)
        self.wq, self.wk, self.wv = (Linear(d, d, key=k[i]) for i in range(3))
        self.wo = Linear(d, d, key=k[3])
        self.q_norm = RMSNorm(d // h) if cfg.qk_norm else None
        self.k_norm = RMSNorm(d // h) if cfg.qk_norm else None
        self.fc1 = Linear(d, hidden, key=k[4])
        self.fc_gate = Linear(d, hidden, key=k[5]) if cfg.swiglu else None
        self.fc2 = Linear(hidden, d, key=k[6])
        ls = cfg.layerscale  # float32, not weakly typed: the update returns what it was given
        self.ls1 = jnp.full((d,), ls, jnp.float32) if ls else None
        self.ls2 = jnp.full((d,), ls, jnp.float32) if ls else None
        self.n_heads = h
        self.dtype = cfg.compute_dtype or "float32"
        self.attention = cfg.attention or "auto"
        self.gelu = cfg.gelu or "tanh"
        self.residual = cfg.residual_dtype or "float32"

    def __call__(self, x_bnd: Float[Array, "b n d"], ang_bnp=None) -> Float[Array, "b n d"]:
        b, n, d = x_bnd.shape
        dt, rdt = DTYPES[self.dtype], DTYPES[self.residual]
        x_bnd = x_bnd.astype(rdt)
        h = self.norm1(x_bnd, dt)
        q, k, v = (lin(h).reshape(b, n, self.n_heads, -1) for lin in (self.wq, self.wk, self.wv))
        if self.q_norm is not None and ang_bnp is not None:
            q, k = qk_norm_rope(q, k, self.q_norm.scale, self.k_norm.scale, ang_bnp)
        elif self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        elif ang_bnp is not None:
            q, k = apply_rope(q, ang_bnp), apply_rope(k, ang_bnp)
        # LayerScale (ls1, ls2) scales the branch's last matmul (Linear's `scale`).
        a = self.wo(attention(q, k, v, impl=self.attention).reshape(b, n, d), self.ls1)
        x_bnd = x_bnd + a.astype(rdt)
        h = self.norm2(x_bnd, dt)
        if self.fc_gate is None:
            u = jax.nn.gelu(self.fc1(h), approximate=self.gelu == "tanh")
        else:
            u = jax.nn.silu(self.fc_gate(h)) * self.fc1(h)
        return x_bnd + self.fc2(u, self.ls2).astype(rdt)


class PoolNorms(eqx.Module):
    """The final norms with `model.fc_norm`: one for the tokens, one for their mean. A model
    without fc_norm keeps a plain LayerNorm in `ViT.norm`, so the parameter tree (and every
    checkpoint written before this option) is unchanged."""

    tokens: LayerNorm
    pooled: LayerNorm


class Output(typing.NamedTuple):
    pooled_bd: Float[Array, "b d"]
    """Pooled embedding: CLS or patch mean after the final norm, or with `model.fc_norm` the
    mean of the un-normed patch tokens through its own norm (`PoolNorms.pooled`)."""
    patches_bnd: Float[Array, "b n d"]
    """Final-normed patch tokens (only the kept ones when `keep_bk` was given)."""


class ViT(eqx.Module):
    patch_embed: Linear
    pos_embed: Float[Array, "n d"] | None
    cls: Float[Array, "1 d"]
    registers: Float[Array, "r d"] | None
    blocks: Block
    norm: "LayerNorm | PoolNorms"
    cfg: birdjepa.config.architecture.ModelConfig = eqx.field(static=True)
    grid: tuple[int, int] = eqx.field(static=True)

    @property
    def input_shape(self) -> tuple[int, int]:
        """(n_frames, n_mels) of the clips it takes: its patch grid times the patch."""
        return self.grid[0] * self.cfg.patch[0], self.grid[1] * self.cfg.patch[1]

    def __init__(self, cfg: birdjepa.config.architecture.ModelConfig, *, n_frames: int, n_mels: int, key):
        birdjepa.config.architecture.check_resolved(cfg)
        pt, pm = cfg.patch
        if n_frames % pt or n_mels % pm:
            raise ValueError(
                f"model.patch={cfg.patch} must divide the input (n_frames, n_mels)="
                f"({n_frames}, {n_mels})"
            )
        self.cfg, self.grid = cfg, (n_frames // pt, n_mels // pm)
        k = jax.random.split(key, 5)
        d = cfg.width
        self.patch_embed = Linear(pt * pm, d, key=k[0])
        n = self.grid[0] * self.grid[1]
        self.pos_embed = _trunc_normal(k[1], (n, d)) if cfg.pos == "absolute" else None
        self.cls = _trunc_normal(k[2], (1, d))
        self.registers = _trunc_normal(k[3], (cfg.n_registers, d)) if cfg.n_registers else None
        keys = jax.random.split(k[4], cfg.depth)
        self.blocks = eqx.filter_vmap(lambda kk: Block(cfg, key=kk))(keys)
        self.norm = PoolNorms(LayerNorm(d), LayerNorm(d)) if cfg.fc_norm else LayerNorm(d)

    def _blocks(self, x_bnd: Float[Array, "b n d"], ang) -> Float[Array, "b n d"]:
        """Every block in turn: one `lax.scan` over the stacked blocks (`scan_layers`), or a
        Python loop over them; each block rematerialised by `remat`'s policy. The scan's body
        may be CSE'd (XLA cannot merge across iterations); an unrolled block keeps JAX's
        barrier, else XLA would merge the recomputation with the forward and keep everything."""
        dyn, static = eqx.partition(self.blocks, eqx.is_array)
        policy = REMAT_POLICIES[self.cfg.remat]

        def block(x, blk_dyn):
            return eqx.combine(blk_dyn, static)(x, ang)

        if not self.cfg.scan_layers:
            if policy is not None:
                block = jax.checkpoint(block, policy=policy)
            for i in range(self.cfg.depth):
                x_bnd = block(x_bnd, jax.tree.map(lambda a, i=i: a[i], dyn))
            return x_bnd

        def body(x, blk_dyn):
            return block(x, blk_dyn), None

        if policy is not None:
            body = jax.checkpoint(body, policy=policy, prevent_cse=False)
        return jax.lax.scan(body, x_bnd, dyn)[0]

    @property
    def n_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def width(self) -> int:
        return self.cfg.width

    def time_grid(self, n_frames: int) -> int:
        """Patch rows of an input of `n_frames` frames: any multiple of the patch height up to
        the configured input (shorter inputs, e.g. local crops, use the first rows of the
        position table; RoPE needs nothing)."""
        pt, gt = self.cfg.patch[0], self.grid[0]
        if n_frames % pt or not 0 < n_frames <= pt * gt:
            raise ValueError(f"encoder input: expected a multiple of patch height {pt} frames, "
                             f"at most {pt * gt}, got {n_frames}")
        return n_frames // pt

    def patchify(self, x_btm: Float[Array, "b t m"]) -> Float[Array, "b n p"]:
        """Flatten (patch_t, patch_m) patches, row-major over the (time, mel) patch grid."""
        b = x_btm.shape[0]
        (pt, pm), gm = self.cfg.patch, self.grid[1]
        gt = self.time_grid(x_btm.shape[1])
        x = x_btm.reshape(b, gt, pt, gm, pm).transpose(0, 1, 3, 2, 4)
        return x.reshape(b, gt * gm, pt * pm)

    def _tokens(self, x_btm: Float[Array, "b t m"], keep_bk: Int[Array, "b k"] | None = None):
        """The first block's input: patch embeddings (+ positions), CLS and registers first;
        with the RoPE angles and the number of special tokens."""
        b = x_btm.shape[0]
        dt, rdt = DTYPES[self.cfg.compute_dtype], DTYPES[self.cfg.residual_dtype]
        tok_bnd = self.patch_embed(self.patchify(x_btm).astype(dt)).astype(jnp.float32)
        n = tok_bnd.shape[1]  # n_patches, or fewer for a shorter input (first rows of the grid)
        if self.pos_embed is not None:  # frozen with train_pos = false (Bird-MAE)
            pos = self.pos_embed if self.cfg.train_pos is not False else \
                jax.lax.stop_gradient(self.pos_embed)
            tok_bnd = tok_bnd + pos[:n]
        elif self.cfg.pos == "sincos":
            tok_bnd = tok_bnd + sincos_2d(self.grid, self.cfg.width)[:n]
        idx_bn = jnp.broadcast_to(jnp.arange(n), (b, n))
        if keep_bk is not None:
            tok_bnd = jnp.take_along_axis(tok_bnd, keep_bk[:, :, None], axis=1)
            idx_bn = keep_bk
        special = [self.cls] if self.registers is None else [self.cls, self.registers]
        special_sd = jnp.concatenate(special, axis=0)
        n_special = special_sd.shape[0]
        x_bnd = jnp.concatenate([jnp.broadcast_to(special_sd, (b, *special_sd.shape)), tok_bnd], 1)
        x_bnd = x_bnd.astype(rdt)
        ang = None
        if self.cfg.pos == "rope":  # (1, n) without keep_bk: no batch axis (ONNX export)
            idx = idx_bn if keep_bk is not None else jnp.arange(n)[None]
            coords = jnp.stack([idx // self.grid[1], idx % self.grid[1]], axis=-1) + 1
            coords = jnp.concatenate(
                [jnp.zeros((len(idx), n_special, 2), coords.dtype), coords], 1)
            head_dim = self.cfg.width // self.cfg.n_heads
            ang = jax.vmap(lambda c: rope_angles(c, head_dim))(coords)
        return x_bnd, ang, n_special

    def layer_patches(self, x_btm: Float[Array, "b t m"], layers: tuple[int, ...]
                      ) -> Float[Array, "b l n d"]:
        """The patch tokens after each block of `layers` (0 = the first block; negative: from
        the last), as the residual stream holds them (before any final norm), float32: what a
        multi-layer probe reads (birdjepa.evaluate.probes.MultiLayer). Runs every block once."""
        x_bnd, ang, n_special = self._tokens(x_btm)
        dyn, static = eqx.partition(self.blocks, eqx.is_array)
        picked = [range(self.cfg.depth)[i] for i in layers]  # IndexError names a bad one
        outs = []
        for i in range(max(picked) + 1):
            x_bnd = eqx.combine(jax.tree.map(lambda a, i=i: a[i], dyn), static)(x_bnd, ang)
            if i in picked:
                outs.append(x_bnd[:, n_special:].astype(jnp.float32))
        return jnp.stack([outs[sorted(set(picked)).index(i)] for i in picked], axis=1)

    def __call__(
        self, x_btm: Float[Array, "b t m"], *, keep_bk: Int[Array, "b k"] | None = None,
        normed_patches: bool = True,
    ) -> Output:
        """Encode; `keep_bk` (patch indices) restricts the encoder to a subset (MAE).
        `normed_patches=False` returns the last block's patch tokens before the final norm
        (Hugging Face's `hidden_states[-1]`; what `embed` gives for a Bird-MAE model)."""
        x_bnd, ang, n_special = self._tokens(x_btm, keep_bk)
        x_bnd = self._blocks(x_bnd, ang)
        norm, raw = self.norm, x_bnd[:, n_special:].astype(jnp.float32)
        if isinstance(norm, PoolNorms):
            if self.cfg.pool == "mean":  # timm/MAE global_pool="avg" with fc_norm
                pooled = norm.pooled(raw.mean(1))
                return Output(pooled, norm.tokens(raw) if normed_patches else raw)
            norm = norm.tokens
        x_bnd = norm(x_bnd, jnp.float32)
        patches = x_bnd[:, n_special:]
        pooled = x_bnd[:, 0] if self.cfg.pool == "cls" else patches.mean(1)
        return Output(pooled, patches if normed_patches else raw)
