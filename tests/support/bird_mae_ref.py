"""An independent reference of Bird-MAE as published, written from its description (its Hugging
Face feature extractor and the timm-style MAE encoder), with numpy, scipy, soxr and
kaldi-native-fbank only: nothing from birdjepa.

Feature extractor (DBD-research-group/Bird-MAE-*, preprocessor_config.json; the steps in
/work/shared/FACTS.md and issue 27):
1. a 32 kHz mono waveform (a user resamples other rates themselves: here soxr "HQ"), its first
   5 s, zero-padded to 160,000 samples;
2. Kaldi fbank: 128 mels, 25 ms hanning frames every 10 ms, preemphasis 0.97, DC offset removed,
   no dither, no energy, power spectrum, log -> 498 frames;
3. padded to 512 frames with the clip's minimum fbank value, before normalising;
4. normalised as (x + 7.2) / (2 * 4.43).

Encoder: conv patch embedding (16 x 16 over the (1, 512 time, 128 mel) image), CLS token,
position table, pre-norm blocks (qkv attention, exact-GELU MLP), LayerNorm eps 1e-6; the mean of
the patch tokens through fc_norm (global_pool="mean"), or the CLS token through norm;
`hidden_states[-1]` are the last block's tokens, un-normed.
"""

import kaldi_native_fbank as knf
import numpy as np
import scipy.special
import soxr

SR, CLIP_S, T, M, P = 32000, 5.0, 512, 128, 16
MEAN, STD = -7.2, 4.43
SIZES = {"base": (768, 12, 12), "large": (1024, 24, 16), "huge": (1280, 32, 16)}
"""Published sizes: (width, depth, heads)."""


def kaldi_fbank(wave: np.ndarray, sr: int = SR) -> np.ndarray:
    """(frames, 128) float64 Kaldi log-mel fbank with Bird-MAE's options."""
    o = knf.FbankOptions()
    o.frame_opts.samp_freq = sr
    o.frame_opts.frame_length_ms = 25
    o.frame_opts.frame_shift_ms = 10
    o.frame_opts.dither = 0.0
    o.frame_opts.window_type = "hanning"
    o.frame_opts.preemph_coeff = 0.97
    o.frame_opts.remove_dc_offset = True
    o.frame_opts.round_to_power_of_two = True
    o.frame_opts.snip_edges = True
    o.mel_opts.num_bins = M
    o.mel_opts.low_freq = 20
    o.mel_opts.high_freq = 0
    o.use_energy = False
    o.use_log_fbank = True
    o.use_power = True
    fb = knf.OnlineFbank(o)
    fb.accept_waveform(sr, np.asarray(wave, np.float32).tolist())
    fb.input_finished()
    return np.stack([fb.get_frame(i) for i in range(fb.num_frames_ready)]).astype(np.float64)


def to_mono_32k(wave: np.ndarray, sr: int) -> np.ndarray:
    """What a user of the extractor does first: average the channels ((n, channels) layout),
    resample to 32 kHz with soxr HQ."""
    x = np.asarray(wave, np.float64)
    if x.ndim == 2:
        x = x.mean(1)
    if sr != SR:
        x = soxr.resample(x, sr, SR, quality="HQ")
    return x


def features(wave_32k: np.ndarray, *, pad: str = "min") -> np.ndarray:
    """(512, 128) float64 encoder input of the first 5 s of a 32 kHz mono waveform (steps 1-4);
    pad="zero" puts 0.0 after normalising instead (what we did before issue 27)."""
    n = int(SR * CLIP_S)
    x = np.zeros(n, np.float64)
    x[: min(n, len(wave_32k))] = wave_32k[:n]
    f = kaldi_fbank(x)  # (498, 128)
    out = np.full((T, M), f.min() if pad == "min" else MEAN, np.float64)
    out[: len(f)] = f[:T]
    return (out - MEAN) / (2 * STD)


def ln(x, w, b, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def forward(sd: dict, x_btm: np.ndarray, n_heads: int, pool: str = "mean") -> np.ndarray:
    """Bird-MAE's encoder in float64 on (b, T, M) input: pool "mean" (fc_norm of the patch
    mean), "cls" (CLS through norm) or "patches" (hidden_states[-1] without CLS: un-normed)."""
    sd = {k: np.asarray(v, np.float64) for k, v in sd.items()}
    x = np.asarray(x_btm, np.float64)
    b, t, m = x.shape
    w = sd["patch_embed.proj.weight"]  # (D, 1, P, P)
    d = w.shape[0]
    gt, gm = t // P, m // P
    img = x.reshape(b, gt, P, gm, P)  # conv with stride = kernel: one dot per patch
    tok = np.einsum("btimj,dij->btmd", img, w[:, 0]).reshape(b, gt * gm, d)
    tok = tok + sd["patch_embed.proj.bias"] + sd["pos_embed"][:, 1:]
    cls = sd["cls_token"] + sd["pos_embed"][:, :1]
    h = np.concatenate([np.broadcast_to(cls, (b, 1, d)), tok], axis=1)
    depth = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    hd = d // n_heads
    for i in range(depth):
        p = lambda n, i=i: sd[f"blocks.{i}.{n}"]  # noqa: E731
        y = ln(h, p("norm1.weight"), p("norm1.bias"))
        qkv = y @ p("attn.qkv.weight").T + p("attn.qkv.bias")  # (b, n, 3d)
        q, k, v = (qkv[..., j * d : (j + 1) * d].reshape(b, -1, n_heads, hd).transpose(0, 2, 1, 3)
                   for j in range(3))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(0, 2, 1, 3).reshape(b, -1, d)
        h = h + o @ p("attn.proj.weight").T + p("attn.proj.bias")
        y = ln(h, p("norm2.weight"), p("norm2.bias"))
        y = y @ p("mlp.fc1.weight").T + p("mlp.fc1.bias")
        y = 0.5 * y * (1 + scipy.special.erf(y / np.sqrt(2)))
        h = h + y @ p("mlp.fc2.weight").T + p("mlp.fc2.bias")
    if pool == "patches":
        return h[:, 1:]
    if pool == "mean":
        return ln(h[:, 1:].mean(1), sd["fc_norm.weight"], sd["fc_norm.bias"])
    return ln(h, sd["norm.weight"], sd["norm.bias"])[:, 0]


def shapes(d: int, depth: int, n_patches: int = (T // P) * (M // P)) -> dict[str, tuple]:
    """The published state dict's keys and torch shapes (MLP ratio 4)."""
    per = {"norm1.weight": (d,), "norm1.bias": (d,), "attn.qkv.weight": (3 * d, d),
           "attn.qkv.bias": (3 * d,), "attn.proj.weight": (d, d), "attn.proj.bias": (d,),
           "norm2.weight": (d,), "norm2.bias": (d,), "mlp.fc1.weight": (4 * d, d),
           "mlp.fc1.bias": (4 * d,), "mlp.fc2.weight": (d, 4 * d), "mlp.fc2.bias": (d,)}
    out = {"patch_embed.proj.weight": (d, 1, P, P), "patch_embed.proj.bias": (d,),
           "cls_token": (1, 1, d), "pos_embed": (1, 1 + n_patches, d), "norm.weight": (d,),
           "norm.bias": (d,), "fc_norm.weight": (d,), "fc_norm.bias": (d,)}
    for i in range(depth):
        out.update({f"blocks.{i}.{k}": s for k, s in per.items()})
    return out


def random_state_dict(d: int, depth: int, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights under the published key names (norms away from 1/0)."""
    rng = np.random.default_rng(seed)
    sd = {}
    for k, shape in shapes(d, depth).items():
        scale = 0.5 if k.endswith("bias") or k in ("cls_token", "pos_embed") else 0.08
        base = 1.0 if "norm" in k and k.endswith("weight") else 0.0
        sd[k] = (base + scale * rng.standard_normal(shape)).astype(np.float32)
    return sd
