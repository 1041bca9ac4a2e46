"""Model FLOPs per optimiser update, counted analytically, and device peak throughput: MFU.

A matmul of (m, k) by (k, n) is 2 m k n FLOPs. Per encoder sequence of n tokens (CLS, registers
and the patches it sees) and width d, each block does 2 n (4 d^2 + 2 d h) in its weight matmuls
(q, k, v, o; fc1, fc2, plus a gate for SwiGLU, h the MLP hidden size) and 4 n^2 d in attention
(q k^T and the attention-weighted sum of v); the patch embedding adds 2 n_patches p d. The
backward pass of a trained computation is twice its forward. Heads, projector, SIGReg's
projections, the MAE decoder and the online probe are counted the same way; elementwise work
(norms, softmax, activations, the optimiser) is not, as is usual for MFU.

MFU (model FLOPs utilisation, as in PaLM) counts the model's FLOPs only; the forward recomputed
by rematerialisation is extra work the hardware does, counted by `hardware=True` (HFU).

Usage, per logged interval of `n` updates taking `seconds` on `n_devices` devices:

    f = flops_per_update(cfg)                       # once, for the finalized config
    peak = peak_flops(jax.devices()[0], dtype=cfg.model.compute_dtype, override=None)
    tflops = f * n / seconds / 1e12                 # achieved, all devices together
    mfu = None if peak is None else f * n / seconds / (peak * n_devices)
"""

import birdjepa.config
import birdjepa.model
import birdjepa.objectives.mae

PEAK_BF16: dict[str, float] = {
    "H100": 989e12,
    "H200": 989e12,
    "GH200": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
}
"""Dense bfloat16 tensor-core peak FLOP/s by device-kind substring (SXM parts; an H100 PCIe is
~756e12: pass it as an override). float32 matmuls run as TF32 at half that on these GPUs."""


def peak_flops(device, *, dtype: str = "bfloat16", override: float | None = None):
    """Peak FLOP/s of one `device` (a jax.Device) for matmuls in `dtype`, or None if unknown
    (every CPU). `override` (FLOP/s) wins over the table."""
    if override is not None:
        return float(override)
    if device.platform != "gpu":
        return None
    kind = device.device_kind
    for name in sorted(PEAK_BF16, key=len, reverse=True):
        if name in kind:
            return PEAK_BF16[name] / (1 if dtype == "bfloat16" else 2)
    return None


def _hidden(m: birdjepa.config.architecture.ModelConfig) -> int:
    return int(m.width * m.mlp_ratio * (2 / 3 if m.swiglu else 1))


def block_flops(m: birdjepa.config.architecture.ModelConfig, n_tokens: int) -> tuple[float, float]:
    """Forward FLOPs of all `m.depth` blocks on one sequence: (weight matmuls, attention)."""
    d = m.width
    mats = 2 * n_tokens * (4 * d * d + (3 if m.swiglu else 2) * d * _hidden(m))
    return m.depth * mats, m.depth * 4 * n_tokens**2 * d


def encoder_flops(
    m: birdjepa.config.architecture.ModelConfig, n_patches: int, *, hardware: bool
) -> tuple[float, float]:
    """(Forward FLOPs of the encoder on one sequence of `n_patches` patches, FLOPs its blocks
    recompute in the backward pass under `m.remat`, counted only when `hardware`)."""
    mats, attn = block_flops(m, 1 + m.n_registers + n_patches)
    fwd = mats + attn + 2 * n_patches * m.patch[0] * m.patch[1] * m.width
    recompute = {"none": 0.0, "block": mats + attn, "dots": attn}[m.remat]
    return fwd, (recompute if hardware else 0.0)


def flops_per_update(cfg: birdjepa.config.Config, *, hardware: bool = False) -> float:
    """FLOPs of one optimiser update (all micro-batches, all views) of a finalized `cfg`."""
    m = cfg.model
    name, sub = cfg.objective.name, getattr(cfg.objective, cfg.objective.name)
    n_seq = cfg.batch_size * cfg.data.n_views
    n_patches = (cfg.data.n_frames // m.patch[0]) * (cfg.data.n_mels // m.patch[1])
    d, c = m.width, cfg.n_classes
    probe = n_seq * 2 * (2 * d * c)  # forward and the weight gradient (no input gradient)
    if name == "mae":
        return probe + n_seq * _mae_flops(m, sub, n_patches, hardware=hardware)
    fwd, recompute = encoder_flops(m, n_patches, hardware=hardware)
    if name == "probe_only":
        return probe + n_seq * fwd
    if name == "supervised":
        return probe + n_seq * (3 * (fwd + 2 * d * c) + recompute)
    if name != "lejepa":
        raise ValueError(f"objective.name: expected one of supervised, lejepa, mae, probe_only; "
                         f"got {name!r}")
    proj = 2 * (d * sub.proj_hidden + sub.proj_hidden * sub.proj_dim) if sub.proj_dim else 0
    k = sub.proj_dim or d
    sig = 2 * k * sub.n_slices + 2 * 2 * sub.n_slices * sub.n_points  # per example and view
    clean = fwd if sub.augment.enabled else 0.0  # the probe's forward on un-augmented views
    total = probe + n_seq * (3 * (fwd + proj + sig) + recompute + clean)
    if cfg.data.n_local:  # multi-crop: the local crops' shorter sequences
        n_loc = (cfg.data.local_frames // m.patch[0]) * (cfg.data.n_mels // m.patch[1])
        fwd_l, rec_l = encoder_flops(m, n_loc, hardware=hardware)
        total += cfg.batch_size * cfg.data.n_local * (3 * (fwd_l + proj + sig) + rec_l)
    return total


def _mae_flops(m, sub: birdjepa.objectives.mae.MAEConfig, n_patches: int, *, hardware: bool):
    """Per example: encoder on the kept patches, decoder on all of them, trained (3x)."""
    keep = birdjepa.objectives.mae.n_keep(sub, n_patches)
    fwd, recompute = encoder_flops(m, keep, hardware=hardware)
    dec = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(
        width=sub.dec_width, depth=sub.dec_depth, n_heads=sub.dec_heads))
    mats, attn = block_flops(dec, n_patches)
    p = m.patch[0] * m.patch[1]
    heads = 2 * keep * m.width * sub.dec_width + mats + attn + 2 * n_patches * sub.dec_width * p
    return 3 * (fwd + heads) + recompute
