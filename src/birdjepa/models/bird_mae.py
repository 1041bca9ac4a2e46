"""Bird-MAE (Rauch et al. 2025, "Can Masked Autoencoders Also Listen to Birds?") into our ViT.

The published encoders (Hugging Face `DBD-research-group/Bird-MAE-{Base,Large}`; see
docs/guides/models.md, "Use Bird-MAE") are timm-style ViTs on a (512 frames, 128 mel) Kaldi
fbank at 32 kHz, normalised as (x + 7.2) / (2 * 4.43), the transform our loader computes. Their state dict (an
optional leading "model." is dropped) maps onto `birdjepa.model.ViT` as follows, D = width,
torch Linear weights being (out, in) and ours (in, out):

    patch_embed.proj.weight (D, 1, 16, 16)   patch_embed.w (256, D) = W.reshape(D, 256).T
    patch_embed.proj.bias   (D,)             patch_embed.b
    cls_token   (1, 1, D)                    cls (1, D) = cls_token[0] + pos_embed[0, :1]
    pos_embed   (1, 1 + 256, D)              pos_embed (256, D) = pos_embed[0, 1:], or nothing
                                             with model.pos="sincos" when it equals that table
    blocks.{i}.norm1.weight / .bias          blocks.norm1.scale / .bias [i]
    blocks.{i}.attn.qkv.weight (3D, D)       blocks.wq.w, wk.w, wv.w [i] = rows [0:D], [D:2D],
    blocks.{i}.attn.qkv.bias (3D,)           [2D:3D] transposed; the bias split likewise
    blocks.{i}.attn.proj.weight / .bias      blocks.wo.w (transposed) / .b [i]
    blocks.{i}.norm2.weight / .bias          blocks.norm2.scale / .bias [i]
    blocks.{i}.mlp.fc1.weight / .bias        blocks.fc1.w (transposed) / .b [i]
    blocks.{i}.mlp.fc2.weight / .bias        blocks.fc2.w (transposed) / .b [i]
    norm.weight / .bias                      norm.tokens.scale / .bias (tokens; pool="cls")
    fc_norm.weight / .bias                   norm.pooled.scale / .bias (the mean pool)

Patches: the input image is (B, 1, 512 time, 128 mel), so the conv's (32, 8) output grid is
row-major over (time, mel) like our patchify, and within a patch (i, j) = (frame, mel) is our
i * 16 + j. The architecture options this needs: no registers, exact (erf) GELU, LayerNorm eps
1e-6 (ours), `fc_norm` with pool="mean" (Bird-MAE's global_pool="mean"; "cls" takes the CLS
token through `norm`). Keys of a pre-training checkpoint's decoder (decoder_*, mask_token) and a
classifier (head.*) are not part of the encoder and are skipped.
"""

import dataclasses
import os
import pathlib

import equinox as eqx
import jax
import numpy as np

import birdjepa.config.architecture
import birdjepa.data
import birdjepa.model
import birdjepa.models.arrays as arrays
import birdjepa.models.safetensors as safetensors

PRESETS = {"bird-mae-base": "bird-mae-base", "bird-mae-large": "bird-mae-large",
           "bird-mae-huge": "bird-mae-huge"}
SKIPPED = ("decoder_", "decoder.", "mask_token", "head.")
"""Published keys that are not the encoder's (a pre-training checkpoint's decoder, a classifier)."""
AUDIO = {"sample_rate": 32000, "n_mels": 128, "n_frames": 512, "window_s": 5.0,
         "mean": -7.2, "std": 4.43, "pad": "min", "window": "start", "resampler": "soxr-hq"}
"""Bird-MAE's feature extractor (preprocessor_config.json): the first 5 s of a 32 kHz waveform,
zero-padded to 160,000 samples; Kaldi fbank, 128 mels (498 frames); padded to 512 frames with the
clip's minimum fbank value before normalising (pad="min"); (x + 7.2) / (2 * 4.43). Audio at
other rates is resampled as its training data was (Hugging Face `datasets`: soxr HQ)."""
PREFIXES = ("model.", "encoder.")
"""Leading key prefixes dropped (in this order) when every key has them: "model." (Hugging
Face), "encoder." (Bird-SSL's Lightning checkpoints, once converted to safetensors)."""
SINCOS_ATOL = 1e-5


def read_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """A state dict from `safetensors`. A PyTorch .bin/.pt or Lightning .ckpt (pickles) is
    refused with the one-line conversion (torch is not a dependency)."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise safetensors.FormatError(f"{path}: expected a .safetensors file, got a directory")
    if not path.is_file():
        raise FileNotFoundError(f"weights: expected a .safetensors file, got {str(path)!r}, "
                                "which does not exist")
    with open(path, "rb") as f:
        magic = f.read(2)
    try:
        if magic == b"PK":  # torch.save's zip archive
            raise safetensors.FormatError("zip")
        return safetensors.load(path)[0]
    except safetensors.FormatError:
        if magic != b"PK" and not (magic[:1] == b"\x80" and magic[1:] in b"\x02\x03\x04\x05"):
            raise
    raise arrays.ConversionError(
        f"{path}: a PyTorch pickle checkpoint (.bin/.pt, or a Lightning .ckpt); convert it to "
        "safetensors first, where torch is installed: python -c \"import torch, "
        f"safetensors.torch as s; d = torch.load('{path}', map_location='cpu', "
        "weights_only=False); d = d.get('state_dict', d.get('model', d)); "
        "s.save_file({k: v.contiguous() for k, v in d.items() if torch.is_tensor(v)}, "
        f"'{path.stem}.safetensors')\"")


def expected_shapes(cfg: birdjepa.config.architecture.ModelConfig, n_patches: int) -> dict[str, tuple]:
    d, (pt, pm) = cfg.width, cfg.patch
    h = int(d * cfg.mlp_ratio)
    per = {"norm1.weight": (d,), "norm1.bias": (d,), "attn.qkv.weight": (3 * d, d),
           "attn.qkv.bias": (3 * d,), "attn.proj.weight": (d, d), "attn.proj.bias": (d,),
           "norm2.weight": (d,), "norm2.bias": (d,), "mlp.fc1.weight": (h, d),
           "mlp.fc1.bias": (h,), "mlp.fc2.weight": (d, h), "mlp.fc2.bias": (d,)}
    out = {"patch_embed.proj.weight": (d, 1, pt, pm), "patch_embed.proj.bias": (d,),
           "cls_token": (1, 1, d), "pos_embed": (1, 1 + n_patches, d), "norm.weight": (d,),
           "norm.bias": (d,), "fc_norm.weight": (d,), "fc_norm.bias": (d,)}
    for i in range(cfg.depth):
        out.update({f"blocks.{i}.{k}": s for k, s in per.items()})
    return out


def check(sd: dict[str, np.ndarray], cfg, n_patches: int, what: str) -> dict[str, np.ndarray]:
    """`sd` without its prefix and skipped keys; ConversionError naming every fault at once."""
    sd = {k: v for k, v in sd.items()
          if not k.removeprefix("model.").removeprefix("encoder.").startswith(SKIPPED)}
    for prefix in PREFIXES:
        if sd and all(k.startswith(prefix) for k in sd):
            sd = {k.removeprefix(prefix): v for k, v in sd.items()}
    want = expected_shapes(cfg, n_patches)
    missing = [k for k in want if k not in sd]
    unexpected = sorted(k for k in sd if k not in want)
    shapes = [f"{k}: expected {want[k]}, got {tuple(sd[k].shape)}"
              for k in want if k in sd and tuple(sd[k].shape) != want[k]]
    if missing or unexpected or shapes:
        parts = [f"missing keys {missing}" if missing else "",
                 f"unexpected keys {unexpected}" if unexpected else "",
                 f"shape mismatches [{'; '.join(shapes)}]" if shapes else ""]
        raise arrays.ConversionError(f"{what}: " + "; ".join(p for p in parts if p))
    return sd


def convert(sd: dict[str, np.ndarray], preset: str = "bird-mae-base", *, n_frames: int = 512,
            n_mels: int = 128, what: str = "state dict", **overrides) -> birdjepa.model.ViT:
    """Our float32 ViT holding the Bird-MAE state dict `sd` (published key names). `overrides`
    (width, depth, n_heads, patch, ...) change the preset: the same mapping for any timm-style
    MAE encoder of another size."""
    if preset not in PRESETS:
        raise ValueError(f"model: expected one of {sorted(PRESETS)}, got {preset!r}")
    base = birdjepa.config.architecture.resolve(birdjepa.config.architecture.ModelConfig(
        preset=PRESETS[preset], compute_dtype="float32", remat="none", **overrides))
    (pt, pm), d = base.patch, base.width
    grid = (n_frames // pt, n_mels // pm)
    sd = check(sd, base, grid[0] * grid[1], f"{what} as {preset}")
    safetensors.check_weights(sd, what)
    f32 = {k: np.asarray(v, np.float32) for k, v in sd.items()}
    table = f32["pos_embed"][0, 1:]
    sincos = np.allclose(table, birdjepa.model.sincos_2d(grid, d), atol=SINCOS_ATOL, rtol=0)
    cfg = dataclasses.replace(base, pos="sincos" if sincos else "absolute")
    skel = eqx.filter_eval_shape(
        lambda: birdjepa.model.ViT(cfg, n_frames=n_frames, n_mels=n_mels, key=jax.random.key(0)))

    def stack(part, fn=lambda a: a):
        return np.stack([fn(f32[f"blocks.{i}.{part}"]) for i in range(cfg.depth)])

    qkv_w, qkv_b = stack("attn.qkv.weight"), stack("attn.qkv.bias")
    t = lambda a: a.T  # noqa: E731  (torch Linear (out, in) -> ours (in, out))
    values = {
        "patch_embed.w": f32["patch_embed.proj.weight"].reshape(d, pt * pm).T,
        "patch_embed.b": f32["patch_embed.proj.bias"],
        "cls": f32["cls_token"][0] + f32["pos_embed"][0, :1],
        "norm.tokens.scale": f32["norm.weight"], "norm.tokens.bias": f32["norm.bias"],
        "norm.pooled.scale": f32["fc_norm.weight"], "norm.pooled.bias": f32["fc_norm.bias"],
        "blocks.norm1.scale": stack("norm1.weight"), "blocks.norm1.bias": stack("norm1.bias"),
        "blocks.norm2.scale": stack("norm2.weight"), "blocks.norm2.bias": stack("norm2.bias"),
        "blocks.wq.w": qkv_w[:, :d].transpose(0, 2, 1), "blocks.wq.b": qkv_b[:, :d],
        "blocks.wk.w": qkv_w[:, d : 2 * d].transpose(0, 2, 1),
        "blocks.wk.b": qkv_b[:, d : 2 * d],
        "blocks.wv.w": qkv_w[:, 2 * d :].transpose(0, 2, 1), "blocks.wv.b": qkv_b[:, 2 * d :],
        "blocks.wo.w": stack("attn.proj.weight", t), "blocks.wo.b": stack("attn.proj.bias"),
        "blocks.fc1.w": stack("mlp.fc1.weight", t), "blocks.fc1.b": stack("mlp.fc1.bias"),
        "blocks.fc2.w": stack("mlp.fc2.weight", t), "blocks.fc2.b": stack("mlp.fc2.bias"),
    }
    if not sincos:
        values["pos_embed"] = table
    return arrays.fill(skel, values)


def load(preset: str, weights: str | os.PathLike) -> birdjepa.model.ViT:
    """Bird-MAE from a downloaded state dict (.safetensors) as our encoder."""
    return convert(read_state_dict(weights), preset, what=str(weights))
