"""`ModelConfig`: the encoder's architecture as plain data, its presets, and `resolve` (preset
defaults filled in and checked; called once, by birdjepa.config.finalize). No JAX here: the
Equinox modules that read it live in birdjepa.model."""

import dataclasses
import math
import typing


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    preset: typing.Literal["debug", "vit-s", "vit-b", "bird-mae-base", "bird-mae-large",
                           "bird-mae-huge"] = "debug"
    """Architecture preset; any field below that is set overrides the preset."""
    patch: tuple[int, int] | None = None
    """Patch size (time frames, mel bins); must divide (n_frames, n_mels). Preset: 16 16."""
    width: int | None = None
    """Token dimension: the width of every token and of the pooled embedding."""
    depth: int | None = None
    """Number of transformer blocks."""
    n_heads: int | None = None
    """Attention heads; width must be divisible by it."""
    mlp_ratio: float | None = None
    """MLP hidden size as a multiple of width (for SwiGLU, the hidden size is 2/3 of that)."""
    n_registers: int | None = None
    """Register tokens appended after CLS (Darcet et al. 2023); not pooled, not position-coded.
    The vit-s/vit-b presets use 7: with 256 patches (512 frames x 128 mels at 16 x 16) the
    sequence is 1 + 7 + 256 = 264 tokens, a multiple of 8, which cuDNN's fused attention needs
    (it refused 261). Other lengths are padded to a multiple of 8 with masked keys inside the
    attention call, and only when the cuDNN kernel is used (see `attention`)."""
    pos: typing.Literal["absolute", "sincos", "rope"] | None = None
    """Position encoding: learned 2-D absolute embedding added to patches, a fixed 2-D sin-cos
    table added to patches (MAE's; half the dims code the time index, half the mel index;
    nothing trained), or axial RoPE (half the head dim rotated by time index, half by mel
    index)."""
    train_pos: bool | None = None
    """With pos = "absolute": whether training updates the position table (true: ours). false
    keeps it as loaded (its gradient is stopped, and it has no weight decay): the Bird-MAE
    presets, since Bird-MAE keeps its sin-cos table frozen; an imported Bird-MAE's table
    (stored on a transposed grid, so imported as "absolute") then stays as published when it is
    fine-tuned or probed. Configs saved before this field mean true."""
    qk_norm: bool | None = None
    """RMS-normalise queries and keys per head before the dot product."""
    swiglu: bool | None = None
    """SwiGLU MLP instead of GELU."""
    layerscale: float | None = None
    """LayerScale initial value on each residual branch; 0 disables."""
    pool: typing.Literal["cls", "mean"] | None = None
    """Pooled embedding: final-normed CLS token, or mean of final-normed patch tokens (with
    `fc_norm`: the mean of the un-normed patch tokens through its own norm)."""
    fc_norm: bool | None = None
    """Norm placement of the mean pool: true pools the blocks' patch tokens first and normalises
    the mean with a separate LayerNorm (timm/MAE `global_pool="avg"` with `fc_norm`, Bird-MAE's
    pooling); false (default) normalises every token with the final norm, then pools;
    pool="cls" ignores it. Patch tokens in training are final-normed either way; `embed`'s
    pool="patches" gives them final-normed without fc_norm (our models) and un-normed with it
    (Bird-MAE: the last block's output, Hugging Face's `hidden_states[-1]`)."""
    gelu: typing.Literal["tanh", "erf"] | None = None
    """GELU of the MLP: the tanh approximation (JAX's default, ours) or the exact erf form
    (PyTorch's nn.GELU, timm, Bird-MAE)."""
    remat: typing.Literal["none", "block", "dots"] | bool | None = None
    """Rematerialisation in the backward pass: "none" keeps every activation; "block" keeps only
    each block's input and recomputes the block (least memory, one more forward); "dots" keeps
    the outputs of the weight matmuls and recomputes the rest (attention scores and softmax,
    norms, activations): less compute than "block", more memory. Booleans from older configs
    mean true -> "block", false -> "none"."""
    compute_dtype: typing.Literal["float32", "bfloat16"] | None = None
    """Dtype of the matmuls and the attention. Parameters, optimiser state and checkpoints stay
    float32; norm statistics, softmax, heads, losses and the probe run in float32 either way
    (the residual stream: `residual_dtype`). bfloat16 for GPUs; the debug preset (CPU demo) keeps
    float32, which is faster on CPU."""
    residual_dtype: typing.Literal["float32", "bfloat16"] | None = None
    """Dtype of the residual stream between blocks (and of what the backward pass keeps of it):
    float32 (default, and every run saved before the field) or bfloat16 (needs compute_dtype
    bfloat16), which halves the bytes of every residual add and norm: the largest single cost
    of a step beyond the plain ViT's (docs/issues/028-step-beats-peer). An update smaller than
    bfloat16's precision (a LayerScale branch at 1e-4 of the stream) rounds away in the forward
    pass, never in its gradient; the demo's 300-step loss curve stays within float32's
    seed-to-seed spread (same write-up). Norm statistics and the final outputs stay float32."""
    scan_layers: bool | None = None
    """true (default): the blocks run as one `lax.scan` (one compiled block, the fastest
    compile). False: a Python loop over the same stacked blocks (MaxText's and levanter's
    `scan_layers = false`): compile time grows with depth, but nothing the backward pass keeps
    is copied into the scan's stacked buffers (72 copies per vit-s step on an H200) and no
    such buffer is zero-filled, and without remat a step keeps only what it needs (vit-s 512 x
    2 views: 57 GB where the scan takes 118 GB). Same parameters, same checkpoints."""
    attention: typing.Literal["auto", "xla", "cudnn"] | None = None
    """Attention kernel, all through `jax.nn.dot_product_attention`: "xla" (any backend,
    materialises the scores), "cudnn" (fused flash attention; GPU, bfloat16, head dim <= 128 and
    a multiple of 8), "auto": cuDNN where those hold and the step is compiled for GPU devices
    (the platform of the devices its arrays are placed on, not the default backend), else XLA."""


_BASE = dict(
    patch=(16, 16), mlp_ratio=4.0, n_registers=4, pos="absolute", qk_norm=False,
    swiglu=False, layerscale=0.0, pool="cls", remat="none", compute_dtype="float32",
    attention="auto", fc_norm=False, gelu="tanh", train_pos=True, residual_dtype="float32",
    scan_layers=True,
)
_GPU = dict(n_registers=7, remat="block", compute_dtype="bfloat16")
"""GPU presets: a 264-token sequence, bf16 compute, and the cheapest remat that leaves >= 15 %
of 80 GB free at batch 256 x 2 views (XLA's CPU memory analysis, configs/vit-*.toml)."""
_BIRD_MAE = dict(
    _BASE, n_registers=0, pool="mean", fc_norm=True, gelu="erf", remat="block",
    compute_dtype="bfloat16", train_pos=False,
)
"""Bird-MAE (Rauch et al. 2025; birdjepa.models): a timm ViT with a CLS token, no registers, exact
GELU and a mean pool normalised by fc_norm; position table as imported (absolute)."""
PRESETS: dict[str, dict] = {
    "debug": {**_BASE, "width": 64, "depth": 2, "n_heads": 2, "n_registers": 1},
    "vit-s": {**_BASE, **_GPU, "width": 384, "depth": 12, "n_heads": 6, "remat": "dots"},
    "vit-b": {**_BASE, **_GPU, "width": 768, "depth": 12, "n_heads": 12},
    "bird-mae-base": {**_BIRD_MAE, "width": 768, "depth": 12, "n_heads": 12},
    "bird-mae-large": {**_BIRD_MAE, "width": 1024, "depth": 24, "n_heads": 16},
    "bird-mae-huge": {**_BIRD_MAE, "width": 1280, "depth": 32, "n_heads": 16},
}
LEGACY = {"model.fc_norm": False, "model.gelu": "tanh", "model.train_pos": True,
          "model.residual_dtype": "float32", "model.scan_layers": True}
"""Fields added after checkpoints were saved, with the value that reproduces the behaviour those
checkpoints were trained with. A saved config without the key means this value: config_diff
and config_hash (birdjepa.config.identity) treat "missing" and this value as the same, so old runs
resume and keep their run ids."""
DTYPES = ("float32", "bfloat16")
REMATS = ("none", "block", "dots")


def resolve(cfg: ModelConfig) -> ModelConfig:
    """Fill every unset field from the preset; map a boolean remat; check constraints."""
    if cfg.preset not in PRESETS:
        raise ValueError(f"model.preset: expected one of {sorted(PRESETS)}, got {cfg.preset!r}")
    preset = PRESETS[cfg.preset]
    out = dataclasses.replace(
        cfg,
        **{k: preset[k] for k, v in dataclasses.asdict(cfg).items() if v is None and k in preset},
    )
    remat = {True: "block", False: "none"}.get(out.remat, out.remat)
    out = dataclasses.replace(out, patch=tuple(out.patch), remat=remat)
    _check_sizes(out)
    if out.width % out.n_heads:
        raise ValueError(f"model.width={out.width} not divisible by model.n_heads={out.n_heads}")
    if out.pos == "rope" and (out.width // out.n_heads) % 4:
        raise ValueError(
            f"model.pos='rope' needs head dim divisible by 4, got {out.width // out.n_heads}"
        )
    if out.residual_dtype == "bfloat16" and out.compute_dtype != "bfloat16":
        raise ValueError(f"model.residual_dtype: expected 'float32' with compute_dtype "
                         f"{out.compute_dtype!r} (a bfloat16 residual needs bfloat16 compute), "
                         f"got {out.residual_dtype!r}")
    if not isinstance(out.scan_layers, bool):
        raise ValueError(f"model.scan_layers: expected true or false, got {out.scan_layers!r}")
    choices = {"remat": REMATS, "compute_dtype": DTYPES, "residual_dtype": DTYPES,
               "attention": ("auto", "xla", "cudnn"), "gelu": ("tanh", "erf"),
               "pos": ("absolute", "sincos", "rope"), "pool": ("cls", "mean")}
    for name, allowed in choices.items():
        if getattr(out, name) not in allowed:
            raise ValueError(f"model.{name}: expected one of {sorted(allowed)}, "
                             f"got {getattr(out, name)!r}")
    return out


def _check_sizes(m: ModelConfig) -> None:
    def require(ok, key, expected, got):
        if not ok:
            raise ValueError(f"model.{key}: expected {expected}, got {got!r}")

    require(len(m.patch) == 2 and all(p >= 1 for p in m.patch), "patch", "two ints >= 1",
            m.patch)
    for key in ("width", "depth", "n_heads"):
        require(getattr(m, key) >= 1, key, "an int >= 1", getattr(m, key))
    hidden = m.width * m.mlp_ratio * (2 / 3 if m.swiglu else 1) if math.isfinite(
        m.mlp_ratio) else 0
    require(m.mlp_ratio > 0 and hidden >= 1, "mlp_ratio",
            f"a finite number > 0 giving an MLP of >= 1 unit (width={m.width})", m.mlp_ratio)
    require(m.n_registers >= 0, "n_registers", "an int >= 0", m.n_registers)
    require(math.isfinite(m.layerscale) and m.layerscale >= 0, "layerscale",
            "a finite number >= 0 (0 disables)", m.layerscale)


def check_resolved(cfg: ModelConfig) -> None:
    """Raise unless `cfg` came out of `resolve` (no field left unset)."""
    unset = [k for k, v in dataclasses.asdict(cfg).items() if v is None]
    if unset:
        raise ValueError(f"model: expected a resolved ModelConfig (birdjepa.config.architecture.resolve "
                         f"or birdjepa.config.finalize), got unset fields {unset}")
