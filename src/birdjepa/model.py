"""ViT encoder over log-mel spectrograms.

Input `x_btm` is (batch, time frames, mel bins). It is cut into (patch_t, patch_m) patches in
row-major (time, then mel) order; tokens are [CLS, registers..., patches...]. Blocks are stacked
into one module with a leading `depth` axis (built with `eqx.filter_vmap`) and applied with
`lax.scan`, optionally rematerialised. Linear weights are stored (d_in, d_out) and applied as
`x @ w`, so a stacked block weight is (depth, d_in, d_out).
"""

import dataclasses
import math
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    preset: typing.Literal["debug", "vit-s", "vit-b"] = "debug"
    """Architecture preset; any field below that is set overrides the preset."""
    patch: tuple[int, int] | None = None
    """Patch size (time frames, mel bins); must divide (n_frames, n_mels). Preset: 16 16."""
    width: int | None = None
    """Token dimension."""
    depth: int | None = None
    """Number of transformer blocks."""
    n_heads: int | None = None
    """Attention heads; width must be divisible by it."""
    mlp_ratio: float | None = None
    """MLP hidden size as a multiple of width (for SwiGLU, the hidden size is 2/3 of that)."""
    n_registers: int | None = None
    """Register tokens appended after CLS (Darcet et al. 2023); not pooled, not position-coded."""
    pos: typing.Literal["absolute", "rope"] | None = None
    """Position encoding: learned 2-D absolute embedding added to patches, or axial RoPE (half
    the head dim rotated by time index, half by mel index)."""
    qk_norm: bool | None = None
    """RMS-normalise queries and keys per head before the dot product."""
    swiglu: bool | None = None
    """SwiGLU MLP instead of GELU."""
    layerscale: float | None = None
    """LayerScale initial value on each residual branch; 0 disables."""
    pool: typing.Literal["cls", "mean"] | None = None
    """Pooled embedding: final-normed CLS token, or mean of final-normed patch tokens."""
    remat: bool | None = None
    """Rematerialise each block in the backward pass (jax.checkpoint): less memory, more compute."""


_BASE = dict(
    patch=(16, 16), mlp_ratio=4.0, n_registers=4, pos="absolute", qk_norm=False,
    swiglu=False, layerscale=0.0, pool="cls", remat=False,
)
PRESETS: dict[str, dict] = {
    "debug": {**_BASE, "width": 64, "depth": 2, "n_heads": 2, "n_registers": 1},
    "vit-s": {**_BASE, "width": 384, "depth": 12, "n_heads": 6},
    "vit-b": {**_BASE, "width": 768, "depth": 12, "n_heads": 12},
}


def resolve(cfg: ModelConfig) -> ModelConfig:
    """Fill every unset field from the preset; check divisibility constraints."""
    if cfg.preset not in PRESETS:
        raise ValueError(f"model.preset: expected one of {sorted(PRESETS)}, got {cfg.preset!r}")
    preset = PRESETS[cfg.preset]
    out = dataclasses.replace(
        cfg,
        **{k: preset[k] for k, v in dataclasses.asdict(cfg).items() if v is None and k in preset},
    )
    out = dataclasses.replace(out, patch=tuple(out.patch))
    if out.width % out.n_heads:
        raise ValueError(f"model.width={out.width} not divisible by model.n_heads={out.n_heads}")
    if out.pos == "rope" and (out.width // out.n_heads) % 4:
        raise ValueError(
            f"model.pos='rope' needs head dim divisible by 4, got {out.width // out.n_heads}"
        )
    return out


def _trunc_normal(key, shape, std=0.02):
    return std * jax.random.truncated_normal(key, -2.0, 2.0, shape, jnp.float32)


class Linear(eqx.Module):
    w: Float[Array, "d_in d_out"]
    b: Float[Array, " d_out"] | None

    def __init__(self, d_in: int, d_out: int, *, bias: bool = True, std: float = 0.02, key):
        self.w = _trunc_normal(key, (d_in, d_out), std)
        self.b = jnp.zeros((d_out,)) if bias else None

    def __call__(self, x: Float[Array, "... d_in"]) -> Float[Array, "... d_out"]:
        y = x @ self.w
        return y if self.b is None else y + self.b


class LayerNorm(eqx.Module):
    scale: Float[Array, " d"]
    bias: Float[Array, " d"]

    def __init__(self, d: int):
        self.scale = jnp.ones((d,))
        self.bias = jnp.zeros((d,))

    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        mu = x.mean(-1, keepdims=True)
        var = jnp.square(x - mu).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-6) * self.scale + self.bias


class RMSNorm(eqx.Module):
    scale: Float[Array, " d"]

    def __init__(self, d: int):
        self.scale = jnp.ones((d,))

    def __call__(self, x: Float[Array, "... d"]) -> Float[Array, "... d"]:
        return x * jax.lax.rsqrt(jnp.square(x).mean(-1, keepdims=True) + 1e-6) * self.scale


def rope_angles(coords_n2: Int[Array, "n 2"], head_dim: int) -> Float[Array, "n h2"]:
    """Axial RoPE angles: first half of the rotated pairs use the time index, second the mel."""
    n_freq = head_dim // 4
    freqs_f = 1.0 / (100.0 ** (jnp.arange(n_freq) / n_freq))
    ang_t = coords_n2[:, :1] * freqs_f
    ang_m = coords_n2[:, 1:] * freqs_f
    return jnp.concatenate([ang_t, ang_m], axis=-1)  # (n, head_dim // 2)


def apply_rope(x_bnhd: Float[Array, "b n h d"], ang_bnp: Float[Array, "b n p"]):
    x1, x2 = jnp.split(x_bnhd, 2, axis=-1)
    cos = jnp.cos(ang_bnp)[:, :, None, :]
    sin = jnp.sin(ang_bnp)[:, :, None, :]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


class Block(eqx.Module):
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

    def __init__(self, cfg: ModelConfig, *, key):
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
        ls = cfg.layerscale
        self.ls1 = jnp.full((d,), ls) if ls else None
        self.ls2 = jnp.full((d,), ls) if ls else None
        self.n_heads = h

    def __call__(self, x_bnd: Float[Array, "b n d"], ang_bnp=None) -> Float[Array, "b n d"]:
        b, n, d = x_bnd.shape
        h = self.norm1(x_bnd)
        q, k, v = (lin(h).reshape(b, n, self.n_heads, -1) for lin in (self.wq, self.wk, self.wv))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if ang_bnp is not None:
            q, k = apply_rope(q, ang_bnp), apply_rope(k, ang_bnp)
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
        attn = jax.nn.softmax(logits, axis=-1)
        a = self.wo(jnp.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, n, d))
        x_bnd = x_bnd + (a if self.ls1 is None else a * self.ls1)
        h = self.norm2(x_bnd)
        if self.fc_gate is None:
            m = self.fc2(jax.nn.gelu(self.fc1(h)))
        else:
            m = self.fc2(jax.nn.silu(self.fc_gate(h)) * self.fc1(h))
        return x_bnd + (m if self.ls2 is None else m * self.ls2)


class Output(typing.NamedTuple):
    pooled_bd: Float[Array, "b d"]
    """Pooled embedding (CLS or patch mean, after the final norm)."""
    patches_bnd: Float[Array, "b n d"]
    """Final-normed patch tokens (only the kept ones when `keep_bk` was given)."""


class ViT(eqx.Module):
    patch_embed: Linear
    pos_embed: Float[Array, "n d"] | None
    cls: Float[Array, "1 d"]
    registers: Float[Array, "r d"] | None
    blocks: Block
    norm: LayerNorm
    cfg: ModelConfig = eqx.field(static=True)
    grid: tuple[int, int] = eqx.field(static=True)

    def __init__(self, cfg: ModelConfig, *, n_frames: int, n_mels: int, key):
        cfg = resolve(cfg)
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
        self.norm = LayerNorm(d)

    @property
    def n_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def width(self) -> int:
        return self.cfg.width

    def patchify(self, x_btm: Float[Array, "b t m"]) -> Float[Array, "b n p"]:
        """Flatten (patch_t, patch_m) patches, row-major over the (time, mel) patch grid."""
        b = x_btm.shape[0]
        (pt, pm), (gt, gm) = self.cfg.patch, self.grid
        x = x_btm.reshape(b, gt, pt, gm, pm).transpose(0, 1, 3, 2, 4)
        return x.reshape(b, gt * gm, pt * pm)

    def __call__(
        self, x_btm: Float[Array, "b t m"], *, keep_bk: Int[Array, "b k"] | None = None
    ) -> Output:
        """Encode; `keep_bk` (patch indices) restricts the encoder to a subset (MAE)."""
        b = x_btm.shape[0]
        tok_bnd = self.patch_embed(self.patchify(x_btm))
        if self.pos_embed is not None:
            tok_bnd = tok_bnd + self.pos_embed
        idx_bn = jnp.broadcast_to(jnp.arange(self.n_patches), (b, self.n_patches))
        if keep_bk is not None:
            tok_bnd = jnp.take_along_axis(tok_bnd, keep_bk[:, :, None], axis=1)
            idx_bn = keep_bk
        special = [self.cls] if self.registers is None else [self.cls, self.registers]
        special_sd = jnp.concatenate(special, axis=0)
        n_special = special_sd.shape[0]
        x_bnd = jnp.concatenate([jnp.broadcast_to(special_sd, (b, *special_sd.shape)), tok_bnd], 1)
        ang = None
        if self.cfg.pos == "rope":
            coords = jnp.stack([idx_bn // self.grid[1], idx_bn % self.grid[1]], axis=-1) + 1
            coords = jnp.concatenate([jnp.zeros((b, n_special, 2), coords.dtype), coords], 1)
            head_dim = self.cfg.width // self.cfg.n_heads
            ang = jax.vmap(lambda c: rope_angles(c, head_dim))(coords)
        dyn, static = eqx.partition(self.blocks, eqx.is_array)

        def body(x, blk_dyn):
            return eqx.combine(blk_dyn, static)(x, ang), None

        if self.cfg.remat:
            body = jax.checkpoint(body)
        x_bnd, _ = jax.lax.scan(body, x_bnd, dyn)
        x_bnd = self.norm(x_bnd)
        patches = x_bnd[:, n_special:]
        pooled = x_bnd[:, 0] if self.cfg.pool == "cls" else patches.mean(1)
        return Output(pooled, patches)
