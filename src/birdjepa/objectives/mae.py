"""MAE-style objective: block-masked patch reconstruction with a light decoder.

Masks cover whole (block_t x block_m) cells of the patch grid: every cell draws one uniform
score, patches inherit their cell's score (plus a tiny jitter to break ties), and the
`mask_ratio` fraction of patches with the highest scores is hidden. Every example therefore
hides exactly the same number of patches, so shapes stay static. The encoder sees only visible
patches; the decoder sees visible tokens plus a learned mask token at every hidden position, and
predicts the hidden patches' per-patch-normalised values (MSE on hidden patches only).
"""


import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

import birdjepa.config.losses
import birdjepa.model
import birdjepa.objectives.terms as terms

MAEConfig = birdjepa.config.losses.MAEConfig


def n_keep(cfg: MAEConfig, n_patches: int) -> int:
    k = int(round(n_patches * (1 - cfg.mask_ratio)))
    if not 1 <= k < n_patches:
        raise ValueError(
            f"mae.mask_ratio={cfg.mask_ratio} keeps {k} of {n_patches} patches; "
            f"expected 1..{n_patches - 1}"
        )
    return k


def block_mask(
    cfg: MAEConfig, grid: tuple[int, int], b: int, *, key
) -> tuple[Int[Array, "b k"], Bool[Array, "b n"]]:
    """Indices of visible patches (sorted) and the hidden-patch mask, per example."""
    gt, gm = grid
    bt, bm = cfg.block
    ct, cm = -(-gt // bt), -(-gm // bm)
    k1, k2 = jax.random.split(key)
    cell = jax.random.uniform(k1, (b, ct, cm))
    score = jnp.repeat(jnp.repeat(cell, bt, 1), bm, 2)[:, :gt, :gm].reshape(b, gt * gm)
    score = score + 1e-3 * jax.random.uniform(k2, score.shape)
    keep = n_keep(cfg, gt * gm)
    order = jnp.argsort(score, axis=1)  # lowest scores are kept
    keep_bk = jnp.sort(order[:, :keep], axis=1)
    hidden_bn = jnp.ones((b, gt * gm), bool).at[jnp.arange(b)[:, None], keep_bk].set(False)
    return keep_bk, hidden_bn


class Heads(eqx.Module):
    embed: birdjepa.model.Linear
    mask_token: Float[Array, "1 d"]
    pos_embed: Float[Array, "n d"]
    blocks: birdjepa.model.Block
    norm: birdjepa.model.LayerNorm
    pred: birdjepa.model.Linear

    def __call__(self, vis_bkd, keep_bk, n_patches: int) -> Float[Array, "b n p"]:
        b = vis_bkd.shape[0]
        x = jnp.broadcast_to(self.mask_token, (b, n_patches, self.mask_token.shape[-1]))
        x = x.at[jnp.arange(b)[:, None], keep_bk].set(self.embed(vis_bkd)) + self.pos_embed
        dyn, static = eqx.partition(self.blocks, eqx.is_array)
        x, _ = jax.lax.scan(lambda h, blk: (eqx.combine(blk, static)(h), None), x, dyn)
        return self.pred(self.norm(x))


def init_heads(cfg: MAEConfig, encoder: birdjepa.model.ViT, n_classes: int, *, key):
    del n_classes
    dcfg = birdjepa.config.architecture.resolve(
        birdjepa.config.architecture.ModelConfig(width=cfg.dec_width, depth=cfg.dec_depth, n_heads=cfg.dec_heads,
                                   compute_dtype=encoder.cfg.compute_dtype,
                                   attention=encoder.cfg.attention)
    )
    k = jax.random.split(key, 5)
    pt, pm = encoder.cfg.patch
    n = encoder.n_patches
    return Heads(
        embed=birdjepa.model.Linear(encoder.width, cfg.dec_width, key=k[0]),
        mask_token=0.02 * jax.random.normal(k[1], (1, cfg.dec_width)),
        pos_embed=0.02 * jax.random.normal(k[2], (n, cfg.dec_width)),
        blocks=eqx.filter_vmap(lambda kk: birdjepa.model.Block(dcfg, key=kk))(
            jax.random.split(k[3], cfg.dec_depth)
        ),
        norm=birdjepa.model.LayerNorm(cfg.dec_width),
        pred=birdjepa.model.Linear(cfg.dec_width, pt * pm, key=k[4]),
    )


def targets(cfg: MAEConfig, patches_bnp: Float[Array, "b n p"]) -> Float[Array, "b n p"]:
    if not cfg.norm_pix:
        return patches_bnp
    mu = patches_bnp.mean(-1, keepdims=True)
    var = patches_bnp.var(-1, keepdims=True)
    return (patches_bnp - mu) / jnp.sqrt(var + 1e-6)


def loss(cfg: MAEConfig, encoder, heads: Heads, batch: dict, *, key):
    views = terms.as_views(batch["data"])
    v, b = views.shape[:2]
    x = views.reshape(v * b, *views.shape[2:])
    keep_bk, hidden_bn = block_mask(cfg, encoder.grid, v * b, key=key)
    out = encoder(x, keep_bk=keep_bk)
    pred_bnp = heads(out.patches_bnd, keep_bk, encoder.n_patches)
    tgt_bnp = targets(cfg, encoder.patchify(x))
    err_bn = jnp.square(pred_bnp - tgt_bnp).mean(-1)
    hid = hidden_bn.astype(jnp.float32)
    per_ex = (err_bn * hid).sum(1) / hid.sum(1)
    w = terms.tile_views(terms.weights(batch, b), v)
    mse = terms.wmean(per_ex, w)
    # Probe on the pooled embedding of the visible patches (no extra full forward).
    return mse, {"mse": mse}, out.pooled_bd, terms.tile_views(batch["target"], v), w
