"""Per-view spectrogram augmentations for the self-supervised objectives, in JAX.

Two crops of one recording share everything recording-specific: sample rate and codec (a 22.05
kHz file has nothing above 11 kHz, so its top mel bins sit at the floor), gain, noise colour and
SNR. Invariance between such views rewards exactly those nuisance cues. Drawing them
independently per view breaks that shortcut: every augmentation below acts on the normalised
log-mel clip (B, T, M) of one view, with its own random draw per view and example.

- gain: add a constant, uniform in [-gain, gain] (log domain: a level change);
- tilt: add a linear ramp over mel bins from -s/2 to +s/2, s uniform in [-tilt, tilt] (spectral
  colour / EQ);
- contrast: scale deviations from the clip mean by a factor in [1 - contrast, 1 + contrast];
- lowpass: with probability lowpass_p, set every bin at or above a cutoff, uniform in
  [lowpass_min * M, lowpass_max * M), to `floor` (what band-limited audio gives);
- time_mask / freq_mask (SpecAugment): one run of frames (bins) of a width uniform in
  [0, time_mask * T] ([0, freq_mask * M]) at a uniform position, set to the clip's mean;
then everything is clamped to >= floor. All zeros (the default) is the identity. The
supervised objective takes the same settings (objective.supervised.augment).
"""


import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import birdjepa.config.losses

AugmentConfig = birdjepa.config.losses.AugmentConfig

LOADER_STD = 4.43
"""birdjepa.data.DEFAULT_STD: the loader's normalisation is (log mel - mean) / (2 * std)."""


def augment(cfg: AugmentConfig, x_btm: Float[Array, "b t m"], *, key) -> Float[Array, "b t m"]:
    """Augment a batch of clips, independently per clip."""
    if not cfg.enabled:
        return x_btm
    b, t, m = x_btm.shape
    k = jax.random.split(key, 9)
    u = lambda kk, lo, hi: jax.random.uniform(kk, (b, 1, 1), minval=lo, maxval=hi)  # noqa: E731
    x = x_btm
    if cfg.mix:
        # Normalised log-mel is (log power - mean) / (2 std) (birdjepa.data): mix the powers.
        scale = 2 * LOADER_STD
        other = jnp.roll(x, jax.random.randint(k[5], (), 1, max(b, 2)), 0)
        lam = u(k[6], 0.0, cfg.mix)
        x = jnp.logaddexp(jnp.log1p(-lam) + scale * x, jnp.log(lam + 1e-12) + scale * other) / scale
    if cfg.contrast:
        mu = x.mean((1, 2), keepdims=True)
        x = mu + (x - mu) * u(k[0], 1 - cfg.contrast, 1 + cfg.contrast)
    if cfg.gain:
        x = x + u(k[1], -cfg.gain, cfg.gain)
    if cfg.tilt:
        ramp = jnp.linspace(-0.5, 0.5, m)
        x = x + u(k[2], -cfg.tilt, cfg.tilt) * ramp
    if cfg.lowpass_p:
        cut = u(k[3], cfg.lowpass_min * m, cfg.lowpass_max * m)
        on = jax.random.bernoulli(k[4], cfg.lowpass_p, (b, 1, 1))
        x = jnp.where(on & (jnp.arange(m) >= cut), cfg.floor, x)
    for frac, n, kk, axis in ((cfg.time_mask, t, k[7], 1), (cfg.freq_mask, m, k[8], 2)):
        if frac:
            x = _mask(x, frac, n, axis, key=kk)
    return jnp.maximum(x, cfg.floor)


def _mask(x_btm, frac: float, n: int, axis: int, *, key):
    """One run along `axis` (1: frames, 2: mel bins) per clip, of a width uniform in
    [0, floor(frac * n)] at a uniform start, set to the clip's mean."""
    b = x_btm.shape[0]
    k_w, k_s = jax.random.split(key)
    width = jax.random.randint(k_w, (b,), 0, int(frac * n) + 1)
    start = jax.random.randint(k_s, (b,), 0, n + 1 - width)
    at = jnp.arange(n)[None, :]
    on = (at >= start[:, None]) & (at < (start + width)[:, None])  # (b, n)
    on = on[:, :, None] if axis == 1 else on[:, None, :]
    return jnp.where(on, x_btm.mean((1, 2), keepdims=True), x_btm)


def augment_views(cfg: AugmentConfig, views_vbtm: Float[Array, "v b t m"], *, key):
    """Augment every view with its own draws."""
    if not cfg.enabled:
        return views_vbtm
    keys = jax.random.split(key, views_vbtm.shape[0])
    return jax.vmap(lambda x, kk: augment(cfg, x, key=kk))(views_vbtm, keys)
