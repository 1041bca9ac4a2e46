"""ViT encoder over log-mel spectrograms.

Input `x_btm` is (batch, time frames, mel bins). It is cut into (patch_t, patch_m) patches in
row-major (time, then mel) order; tokens are [CLS, registers..., patches...]. Blocks are stacked
into one module with a leading `depth` axis (built with `eqx.filter_vmap`) and applied with
`lax.scan`, optionally rematerialised. Linear weights are stored (d_in, d_out) and applied as
`x @ w`, so a stacked block weight is (depth, d_in, d_out).

Mixed precision: parameters are always float32 (so are the optimiser state and checkpoints).
With `compute_dtype = "bfloat16"` every matmul and the attention run in bfloat16 (weights are
cast at use); the residual stream between blocks, the norms' statistics (LayerNorm, RMSNorm),
the attention softmax, RoPE's rotation and the final norm stay float32, so the encoder's outputs
(and every loss, head and probe computed from them) are float32.
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
    """Pre-norm transformer block. The residual stream `x` is float32; each branch runs in
    `dtype` from its norm's output and is added back in float32 (a bfloat16 residual would drop
    LayerScale-sized updates: 1e-4 x is below bfloat16's relative precision of 2^-8)."""

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

    def __call__(self, x_bnd: Float[Array, "b n d"], ang_bnp=None) -> Float[Array, "b n d"]:
        b, n, d = x_bnd.shape
        dt = DTYPES[self.dtype]
        x_bnd = x_bnd.astype(jnp.float32)
        h = self.norm1(x_bnd, dt)
        q, k, v = (lin(h).reshape(b, n, self.n_heads, -1) for lin in (self.wq, self.wk, self.wv))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if ang_bnp is not None:
            q, k = apply_rope(q, ang_bnp), apply_rope(k, ang_bnp)
        # LayerScale (ls1, ls2) scales the branch's last matmul (Linear's `scale`).
        a = self.wo(attention(q, k, v, impl=self.attention).reshape(b, n, d), self.ls1)
        x_bnd = x_bnd + a.astype(jnp.float32)
        h = self.norm2(x_bnd, dt)
        if self.fc_gate is None:
            u = jax.nn.gelu(self.fc1(h), approximate=self.gelu == "tanh")
        else:
            u = jax.nn.silu(self.fc_gate(h)) * self.fc1(h)
        return x_bnd + self.fc2(u, self.ls2).astype(jnp.float32)


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

    def __call__(
        self, x_btm: Float[Array, "b t m"], *, keep_bk: Int[Array, "b k"] | None = None,
        normed_patches: bool = True,
    ) -> Output:
        """Encode; `keep_bk` (patch indices) restricts the encoder to a subset (MAE).
        `normed_patches=False` returns the last block's patch tokens before the final norm
        (Hugging Face's `hidden_states[-1]`; what `embed` gives for a Bird-MAE model)."""
        b = x_btm.shape[0]
        dt = DTYPES[self.cfg.compute_dtype]
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
        ang = None
        if self.cfg.pos == "rope":  # (1, n) without keep_bk: no batch axis (ONNX export)
            idx = idx_bn if keep_bk is not None else jnp.arange(n)[None]
            coords = jnp.stack([idx // self.grid[1], idx % self.grid[1]], axis=-1) + 1
            coords = jnp.concatenate(
                [jnp.zeros((len(idx), n_special, 2), coords.dtype), coords], 1)
            head_dim = self.cfg.width // self.cfg.n_heads
            ang = jax.vmap(lambda c: rope_angles(c, head_dim))(coords)
        dyn, static = eqx.partition(self.blocks, eqx.is_array)

        def body(x, blk_dyn):
            return eqx.combine(blk_dyn, static)(x, ang), None

        policy = REMAT_POLICIES[self.cfg.remat]
        if policy is not None:
            body = jax.checkpoint(body, policy=policy, prevent_cse=False)
        x_bnd, _ = jax.lax.scan(body, x_bnd, dyn)
        norm, raw = self.norm, x_bnd[:, n_special:]
        if isinstance(norm, PoolNorms):
            if self.cfg.pool == "mean":  # timm/MAE global_pool="avg" with fc_norm
                pooled = norm.pooled(raw.mean(1))
                return Output(pooled, norm.tokens(raw) if normed_patches else raw)
            norm = norm.tokens
        x_bnd = norm(x_bnd)
        patches = x_bnd[:, n_special:]
        pooled = x_bnd[:, 0] if self.cfg.pool == "cls" else patches.mean(1)
        return Output(pooled, patches if normed_patches else raw)
