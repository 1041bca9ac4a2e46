"""LeJEPA (Balestriero & LeCun 2025): multi-view invariance plus SIGReg.

loss = (1 - lambd) * invariance + lambd * SIGReg, on projector outputs z (V, B, K):
- invariance: mean squared distance of each view's embedding to the mean over the global views
  (with multi-crop, `batch["local"]` (L, B, T', M), the local crops' embeddings too are pulled to
  that centre, as in the paper's reference algorithm);
- SIGReg: project each view's embeddings on M random unit directions (resampled every step from
  the key), and for every direction compare the empirical characteristic function to the
  standard Gaussian's, exp(-t^2/2), with the Epps-Pulley statistic
  N * integral |ecf(t) - exp(-t^2/2)|^2 exp(-t^2/2) dt (trapezoid rule on [-t_max, t_max]);
  averaged over directions and views.
"""


import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

import birdjepa.config.losses
import birdjepa.model
import birdjepa.objectives.augment as augment
import birdjepa.objectives.terms as terms

LeJEPAConfig = birdjepa.config.losses.LeJEPAConfig


def sigreg(
    z_nk: Float[Array, "n k"], *, key, n_slices: int, n_points: int = 17, t_max: float = 5.0,
    w_n: Float[Array, " n"] | None = None,
) -> Float[Array, ""]:
    """Epps-Pulley SIGReg statistic averaged over `n_slices` random unit directions."""
    n, k = z_nk.shape
    a_km = jax.random.normal(key, (k, n_slices))
    a_km = a_km / jnp.linalg.norm(a_km, axis=0, keepdims=True)
    t_p = jnp.linspace(-t_max, t_max, n_points)
    phi_p = jnp.exp(-0.5 * t_p**2)
    x_nmp = (z_nk @ a_km)[:, :, None] * t_p
    if w_n is None:
        w_n = jnp.ones((n,), z_nk.dtype)
    n_eff = w_n.sum()
    w_n = w_n / jnp.maximum(n_eff, 1.0)
    ecf_re = jnp.einsum("n,nmp->mp", w_n, jnp.cos(x_nmp))
    ecf_im = jnp.einsum("n,nmp->mp", w_n, jnp.sin(x_nmp))
    err_mp = ((ecf_re - phi_p) ** 2 + ecf_im**2) * phi_p
    stat_m = jnp.trapezoid(err_mp, t_p, axis=-1) * n_eff
    return stat_m.mean()


class BatchNorm(eqx.Module):
    """Standardise each feature over the (valid rows of the) batch, then scale and shift. Batch
    statistics only: the projector is never used at evaluation. Under a data-parallel mesh the
    statistics are over the global batch."""

    scale: Float[Array, " d"]
    bias: Float[Array, " d"]

    def __init__(self, d: int):
        self.scale = jnp.ones((d,))
        self.bias = jnp.zeros((d,))

    def __call__(self, x_nd: Float[Array, "n d"], w_n: Float[Array, " n"]):
        w_n1 = (w_n / jnp.maximum(w_n.sum(), 1.0))[:, None]
        mu = (w_n1 * x_nd).sum(0)
        var = (w_n1 * jnp.square(x_nd - mu)).sum(0)
        return (x_nd - mu) * jax.lax.rsqrt(var + 1e-5) * self.scale + self.bias


class Heads(eqx.Module):
    """The projector: Linear -> BatchNorm -> GELU -> Linear, as in the paper. A LayerNorm in its
    place let one direction of the pooled embedding (with ~30x the spread of the next) dominate
    every example's hidden vector, and the encoder lost species information
    (docs/issues/004-demo-learning)."""

    fc1: birdjepa.model.Linear | None
    norm: BatchNorm | None
    fc2: birdjepa.model.Linear | None

    def __call__(self, x_nd, w_n):
        if self.fc1 is None:
            return x_nd
        return self.fc2(jax.nn.gelu(self.norm(self.fc1(x_nd), w_n)))


class SemiHeads(Heads):
    """The projector and the class head of `supervised_weight` > 0. A class of its own, so that
    a label-free run's tree (its checkpoints) stays what it was before the option."""

    cls: birdjepa.model.Linear


def init_heads(cfg: LeJEPAConfig, encoder: birdjepa.model.ViT, n_classes: int, *, key):
    k1, k2 = jax.random.split(key)
    parts = (None, None, None) if cfg.proj_dim == 0 else (
        birdjepa.model.Linear(encoder.width, cfg.proj_hidden, key=k1),
        BatchNorm(cfg.proj_hidden),
        birdjepa.model.Linear(cfg.proj_hidden, cfg.proj_dim, key=k2))
    if not cfg.supervised_weight:
        return Heads(*parts)
    # its own key: the projector starts as it does without the class head
    return SemiHeads(*parts, birdjepa.model.Linear(encoder.width, n_classes,
                                                   key=jax.random.fold_in(key, 7)))


def loss(cfg: LeJEPAConfig, encoder, heads: Heads, batch: dict, *, key):
    """The probe trains on the clean (un-augmented) views when augmentations are on: what it
    measures is the embedding of the data, not of the augmented views. All V views, so it sees
    as many examples per step as the probe on a frozen encoder (objective `probe_only`)."""
    views = terms.as_views(batch["data"])
    v, b = views.shape[:2]
    if v < 2:
        raise ValueError(f"objective 'lejepa' needs data.n_views >= 2, got {v} view(s)")
    clean = views
    views = augment.augment_views(cfg.augment, views, key=jax.random.fold_in(key, 1))
    emb = encoder(views.reshape(v * b, *views.shape[2:])).pooled_bd
    w_b = terms.weights(batch, b)
    z_vbk = heads(emb, terms.tile_views(w_b, v)).reshape(v, b, -1)
    center_bk = z_vbk.mean(0)
    if "local" in batch:  # multi-crop: own forward (shorter token grid) and projector statistics
        local = augment.augment_views(cfg.augment, batch["local"], key=jax.random.fold_in(key, 2))
        n_l = local.shape[0]
        emb_l = encoder(local.reshape(n_l * b, *local.shape[2:])).pooled_bd
        z_l = heads(emb_l, terms.tile_views(w_b, n_l)).reshape(n_l, b, -1)
        z_vbk = jnp.concatenate([z_vbk, z_l])
    inv = terms.wmean(jnp.square(z_vbk - center_bk).mean((0, 2)), w_b)
    # Same directions for every view, as in the paper's reference code.
    sig = jax.vmap(
        lambda z: sigreg(
            z, key=key, n_slices=cfg.n_slices, n_points=cfg.n_points, t_max=cfg.t_max, w_n=w_b
        )
    )(z_vbk).mean()
    total = (1 - cfg.lambd) * inv + cfg.lambd * sig
    parts = {"inv": inv, "sigreg": sig}
    target_n, w_n = terms.tile_views(batch["target"], v), terms.tile_views(w_b, v)
    if isinstance(heads, SemiHeads):  # semi-supervised: labelled rows only (xent masks others)
        ce, acc = terms.xent(heads.cls(emb), target_n, w_n)
        total = total + cfg.supervised_weight * ce
        parts = {**parts, "ce": ce, "train_acc": acc}
    if cfg.augment.enabled:
        emb = encoder(clean.reshape(v * b, *clean.shape[2:])).pooled_bd
    return total, parts, emb, target_n, w_n
