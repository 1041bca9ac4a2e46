"""Probes on cached frozen-encoder embeddings: linear, attentive, prototypical and kNN.

* linear: one affine layer on the pooled embedding.
* attentive: one cross-attention pooling layer (a learned query per head over the patch tokens'
  keys and values), then linear.
* prototypical (Bird-MAE, after AudioProtoPNet): J prototypes per class in token space; a
  prototype's similarity is the cosine similarity to its best-matching patch token (max-pool
  over patches); a class's logit is a learned weighting of its own J similarities plus a bias.
  Prototypes start at (unit-norm) patch tokens of random training rows of their class.
* multilayer (multi-layer attentive probing, as in "Unmute the Patch Tokens", arXiv
  2509.24901): the attentive probe's pooling applied to the patch tokens after each of several
  blocks (EvalConfig.layers), each layer with its own queries and projections, the pooled
  vectors joined, then linear.
* knn: cosine k-nearest neighbours on the pooled embedding (no training); a class's score is
  the softmax(similarity / 0.07)-weighted vote of the neighbours holding it.

Inputs are standardised per dimension with statistics of all training rows (no labels used).
Training is multilabel sigmoid BCE or the asymmetric loss (Ridnik et al. 2021) with AdamW, a
cosine schedule with linear warmup and global-norm clipping (defaults: Bird-MAE's frozen-probe
recipe), fully jitted: a run is one `lax.scan` over precomputed batch indices, row weights and
learning rates, and `fit_predict_many` trains many runs (seeds, few-shot subsets) of one probe
kind in one compiled program over the shared training rows, `vmap`ped (or `lax.map`ped, see
BATCHING): subsets of different sizes are padded (weight-0 rows, rate-0 steps), which leaves
each run's updates as they are alone, and every k and seed reuses one compilation. Probe kinds
are not batched together: their parameters differ in structure.
"""

import dataclasses
import math
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float

KINDS = ("linear", "attentive", "prototypical", "knn", "multilayer")
TOKEN_KINDS = ("attentive", "prototypical")
"""Probes that read patch tokens (N, P, D); "multilayer" reads several blocks' patch tokens
(N, L, P, D); the others read pooled embeddings (N, D)."""
FIELDS = {"attentive": "patches", "prototypical": "patches", "multilayer": "layers",
          "linear": "pooled", "knn": "pooled"}
"""The cached embedding each probe reads (birdjepa.evaluate.cache)."""


@dataclasses.dataclass(frozen=True)
class ProbeConfig:
    lr: float = 4e-4
    """AdamW peak learning rate (Bird-MAE frozen probe: 4e-4)."""
    weight_decay: float = 3e-4
    """AdamW weight decay (Bird-MAE: 3e-4)."""
    batch_size: int = 64
    """Training batch (capped at the number of training rows)."""
    epochs: int = 30
    """Passes over the training rows (Bird-MAE: 30)."""
    min_steps: int = 300
    """At least this many updates, so few-shot subsets (k=1: one batch per epoch) train too;
    not in Bird-MAE's recipe, whose datasets are large."""
    warmup_frac: float = 0.05
    """Fraction of the updates spent warming the learning rate up linearly from 0."""
    grad_clip: float = 2.0
    """Global gradient-norm clip (Bird-MAE: 2)."""
    loss: typing.Literal["bce", "asl"] = "bce"
    """Sigmoid binary cross-entropy, or the asymmetric loss (ASL)."""
    asl_gamma_neg: float = 4.0
    """ASL focusing exponent of negatives."""
    asl_gamma_pos: float = 0.0
    """ASL focusing exponent of positives."""
    asl_clip: float = 0.05
    """ASL probability margin shifted off negatives."""
    n_heads: int = 4
    """Attentive probe: attention heads (learned queries); must divide the embedding width."""
    n_prototypes: int = 8
    """Prototypical probe: prototypes per class (J). Max-pooling passes gradient only to the
    best-matching token, so a prototype started on a background token tends to stay there:
    with J = 2 the synthetic test problem reached cmAP 0.63, with J = 8 0.96."""
    knn_k: int = 10
    """kNN: neighbours (capped at the number of training rows)."""
    knn_temperature: float = 0.07
    """kNN: temperature of the similarity weighting."""


class Linear(eqx.Module):
    w_dc: Float[Array, "d c"]
    b_c: Float[Array, " c"]

    def __init__(self, d: int, c: int, *, key):
        self.w_dc = jax.random.normal(key, (d, c)) * (1.0 / math.sqrt(d)) * 0.1
        self.b_c = jnp.zeros((c,))

    def __call__(self, x_bd: Float[Array, "b d"]) -> Float[Array, "b c"]:
        return x_bd @ self.w_dc + self.b_c


class Attentive(eqx.Module):
    q_hk: Float[Array, "h k"]
    w_k: Float[Array, "d d"]
    w_v: Float[Array, "d d"]
    head: Linear

    def __init__(self, d: int, c: int, n_heads: int, *, key):
        if d % n_heads:
            raise ValueError(f"attentive probe: n_heads={n_heads} must divide width {d}")
        kq, kk, kv, kh = jax.random.split(key, 4)
        self.q_hk = jax.random.normal(kq, (n_heads, d // n_heads)) * 0.02
        self.w_k = jax.random.normal(kk, (d, d)) / math.sqrt(d)
        self.w_v = jax.random.normal(kv, (d, d)) / math.sqrt(d)
        self.head = Linear(d, c, key=kh)

    def __call__(self, x_bpd: Float[Array, "b p d"]) -> Float[Array, "b c"]:
        """Per head: softmax over patches of (x W_k)_h . q_h, then that average of (x W_v)_h.
        Computed with the projections folded (the same function, ~16x fewer FLOPs at d = 64,
        4 heads): x W_k q = x (W_k q) scores each patch with one d-vector per head, and the
        attention-weighted mean of x W_v is (attention-weighted mean of x) W_v."""
        b, p, d = x_bpd.shape
        h = self.q_hk.shape[0]
        w_k_dhk = self.w_k.reshape(d, h, d // h)
        w_v_dhk = self.w_v.reshape(d, h, d // h)
        u_dh = jnp.einsum("dhk,hk->dh", w_k_dhk, self.q_hk) / math.sqrt(d // h)
        attn_bph = jax.nn.softmax(x_bpd @ u_dh, axis=1)
        xbar_bhd = jnp.einsum("bph,bpd->bhd", attn_bph, x_bpd)
        pooled_bd = jnp.einsum("bhd,dhk->bhk", xbar_bhd, w_v_dhk).reshape(b, d)
        return self.head(pooled_bd)


class MultiLayer(eqx.Module):
    q_lhk: Float[Array, "l h k"]
    w_k_ldd: Float[Array, "l d d"]
    w_v_ldd: Float[Array, "l d d"]
    head: Linear

    def __init__(self, n_layers: int, d: int, c: int, n_heads: int, *, key):
        if d % n_heads:
            raise ValueError(f"multilayer probe: n_heads={n_heads} must divide width {d}")
        kq, kk, kv, kh = jax.random.split(key, 4)
        self.q_lhk = jax.random.normal(kq, (n_layers, n_heads, d // n_heads)) * 0.02
        self.w_k_ldd = jax.random.normal(kk, (n_layers, d, d)) / math.sqrt(d)
        self.w_v_ldd = jax.random.normal(kv, (n_layers, d, d)) / math.sqrt(d)
        self.head = Linear(n_layers * d, c, key=kh)

    def __call__(self, x_blpd: Float[Array, "b l p d"]) -> Float[Array, "b c"]:
        """`Attentive`'s pooling (projections folded the same way) per layer, joined."""
        b, n_layers, p, d = x_blpd.shape
        h = self.q_lhk.shape[1]
        w_k = self.w_k_ldd.reshape(n_layers, d, h, d // h)
        w_v = self.w_v_ldd.reshape(n_layers, d, h, d // h)
        u_ldh = jnp.einsum("ldhk,lhk->ldh", w_k, self.q_lhk) / math.sqrt(d // h)
        attn_blph = jax.nn.softmax(jnp.einsum("blpd,ldh->blph", x_blpd, u_ldh), axis=2)
        xbar_blhd = jnp.einsum("blph,blpd->blhd", attn_blph, x_blpd)
        pooled = jnp.einsum("blhd,ldhk->blhk", xbar_blhd, w_v).reshape(b, n_layers * d)
        return self.head(pooled)


class Prototypical(eqx.Module):
    protos_cjd: Float[Array, "c j d"]
    w_cj: Float[Array, "c j"]
    b_c: Float[Array, " c"]

    def __init__(self, protos_cjd: np.ndarray):
        c, j, _ = protos_cjd.shape
        self.protos_cjd = jnp.asarray(protos_cjd)
        self.w_cj = jnp.full((c, j), 8.0 / j, jnp.float32)
        self.b_c = jnp.full((c,), -4.0, jnp.float32)

    def __call__(self, x_bpd: Float[Array, "b p d"]) -> Float[Array, "b c"]:
        x = x_bpd * jax.lax.rsqrt(jnp.sum(x_bpd**2, -1, keepdims=True) + 1e-8)
        pr = self.protos_cjd
        pr = pr * jax.lax.rsqrt(jnp.sum(pr**2, -1, keepdims=True) + 1e-8)
        b, p, d = x.shape
        c, j, _ = pr.shape  # one (b p, d) x (d, c j) product: faster on CPU than the einsum
        sim_bcj = (x.reshape(b * p, d) @ pr.reshape(c * j, d).T).reshape(b, p, c, j).max(axis=1)
        return jnp.einsum("bcj,cj->bc", sim_bcj, self.w_cj) + self.b_c


def loss_fn(logits_bc, y_bc, cfg: ProbeConfig, w_b=None):
    """Mean over classes and rows of BCE or ASL; rows weighted by `w_b` (0 = padding)."""
    if cfg.loss == "bce":
        per_bc = optax.sigmoid_binary_cross_entropy(logits_bc, y_bc)
    else:
        p = jax.nn.sigmoid(logits_bc)
        p_neg = jnp.maximum(p - cfg.asl_clip, 0.0)
        pos = y_bc * (1 - p) ** cfg.asl_gamma_pos * jnp.log(jnp.clip(p, 1e-8))
        neg = (1 - y_bc) * p_neg**cfg.asl_gamma_neg * jnp.log(jnp.clip(1 - p_neg, 1e-8))
        per_bc = -(pos + neg)
    if w_b is None:
        return per_bc.mean()
    return (per_bc.mean(1) * w_b).sum() / jnp.maximum(w_b.sum(), 1.0)


def _optimizer(cfg: ProbeConfig):
    """AdamW without its learning rate (optax.adamw's chain up to the schedule); the per-step
    rate comes in as data, so runs of different lengths share one compiled scan."""
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip), optax.scale_by_adam(),
                       optax.add_decayed_weights(cfg.weight_decay))


def lr_schedule(cfg: ProbeConfig, n_steps: int) -> np.ndarray:
    """(n_steps,) learning rates: linear warmup over warmup_frac of the updates, then cosine."""
    warm = int(cfg.warmup_frac * n_steps)
    sched = optax.warmup_cosine_decay_schedule(0.0, cfg.lr, warm, max(n_steps, warm + 1))
    return np.asarray(jax.vmap(sched)(jnp.arange(n_steps)), np.float32)


def _train_one(params, static, x, y, idx_sb, w_sb, lr_s, cfg: ProbeConfig):
    """One probe's updates: a `lax.scan` over (batch indices, row weights, learning rate)."""
    tx = _optimizer(cfg)

    def step(carry, inp):
        params, opt = carry
        idx_b, w_b, lr = inp

        def loss(p):
            return loss_fn(eqx.combine(p, static)(x[idx_b]), y[idx_b], cfg, w_b)

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt = tx.update(grads, opt, params)
        updates = jax.tree.map(lambda u: -lr * u, updates)
        return (optax.apply_updates(params, updates), opt), value

    (params, _), losses = jax.lax.scan(step, (params, tx.init(params)), (idx_sb, w_sb, lr_s))
    return params, losses


BATCHING = "auto"
"""How `fit_predict_many` runs a bucket of runs in its one compiled program: "vmap" (batched
arrays), "map" (`lax.map`, one run after the other), or "auto": vmap, except for the
prototypical probe on CPU, whose vmapped max-over-patches XLA's CPU backend runs ~1.5x slower
than the same runs mapped (measured on the demo protocol; docs/issues/010-evaluation-report)."""


def _batching(kind: str) -> str:
    if BATCHING != "auto":
        return BATCHING
    return "map" if kind == "prototypical" and jax.default_backend() == "cpu" else "vmap"


@eqx.filter_jit
def _train_many(params_r, static, x, y, idx_rsb, w_rsb, lr_rs, cfg: ProbeConfig, how: str):
    """`_train_one` for every run (seeds, subsets) sharing the training rows `x`, `y`, in one
    program: vmapped, or mapped one run after the other."""
    def one(args):
        p, i, w, lr = args
        return _train_one(p, static, x, y, i, w, lr, cfg)

    args = (params_r, idx_rsb, w_rsb, lr_rs)
    return jax.vmap(lambda *a: one(a))(*args) if how == "vmap" else jax.lax.map(one, args)


@eqx.filter_jit
def _predict_many(params_r, static, x, how: str):
    def one(p):
        return eqx.combine(p, static)(x)

    return jax.vmap(one)(params_r) if how == "vmap" else jax.lax.map(one, params_r)


def batch_indices(n: int, cfg: ProbeConfig, *, seed: int) -> np.ndarray:
    """(steps, batch) row indices: reshuffled epochs, at least `min_steps` updates."""
    b = min(cfg.batch_size, n)
    per_epoch = n // b
    n_steps = max(cfg.epochs * per_epoch, cfg.min_steps)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9B0]))
    epochs = -(-n_steps // per_epoch)
    perm = np.concatenate([rng.permutation(n)[: per_epoch * b] for _ in range(epochs)])
    return perm[: n_steps * b].reshape(n_steps, b).astype(np.int32)


def standardise(train, *others):
    """Per-dimension z-scores with the training rows' (and tokens') mean and std; several
    layers' tokens (N, L, P, D) per layer and dimension (each block's stream has its own
    scale). Float32 out (a cache may hold float16)."""
    if train.ndim == 4:
        mu = train.mean((0, 2), dtype=np.float64)[None, :, None]
        sd = train.std((0, 2), dtype=np.float64)[None, :, None] + 1e-6
    else:
        flat = train.reshape(-1, train.shape[-1])
        mu, sd = flat.mean(0, dtype=np.float64), flat.std(0, dtype=np.float64) + 1e-6
    return tuple(((a - mu) / sd).astype(np.float32) for a in (train, *others))


def _init(kind: str, x_train, y_train, cfg: ProbeConfig, *, key):
    d, c = x_train.shape[-1], y_train.shape[1]
    if kind == "linear":
        return Linear(d, c, key=key)
    if kind == "attentive":
        return Attentive(d, c, cfg.n_heads, key=key)
    if kind == "multilayer":
        return MultiLayer(x_train.shape[1], d, c, cfg.n_heads, key=key)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    protos = np.zeros((c, cfg.n_prototypes, d), np.float32)
    for ci in range(c):
        rows = np.flatnonzero(y_train[:, ci])
        rows = rows if len(rows) else np.arange(len(y_train))
        r = rng.choice(rows, cfg.n_prototypes)
        protos[ci] = x_train[r, rng.integers(0, x_train.shape[1], cfg.n_prototypes)]
    # Unit norm: similarity is scale-free, and AdamW's steps (about lr per coordinate) then
    # turn a prototype by about lr * sqrt(d) radians, enough to move off its starting token.
    protos /= np.linalg.norm(protos, axis=-1, keepdims=True) + 1e-8
    return Prototypical(protos)


def knn_scores(train_nd, y_train_nc, test_md, cfg: ProbeConfig) -> np.ndarray:
    """(m, c) neighbour-vote scores; cosine similarity on standardised embeddings."""
    def unit(a):
        return a / (np.linalg.norm(a, axis=1, keepdims=True) + 1e-8)

    sim = unit(test_md) @ unit(train_nd).T
    k = min(cfg.knn_k, len(train_nd))
    nn = np.argpartition(-sim, k - 1, axis=1)[:, :k]
    s = np.take_along_axis(sim, nn, 1) / cfg.knn_temperature
    w = np.exp(s - s.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    return np.einsum("mk,mkc->mc", w, y_train_nc[nn].astype(np.float32))


def _check_inputs(kind: str, x_train, x_test) -> None:
    if kind not in KINDS:
        raise ValueError(f"probe: expected one of {KINDS}, got {kind!r}")
    want = {"patches": 3, "layers": 4, "pooled": 2}[FIELDS[kind]]
    if x_train.ndim != want or x_test.ndim != want:
        raise ValueError(f"probe {kind!r}: expected {want}-D inputs, got {x_train.shape} and "
                         f"{x_test.shape}")


def fit_predict(kind: str, x_train, y_train, x_test, cfg: ProbeConfig, *, key,
                norm_stats_from=None) -> tuple[np.ndarray, dict]:
    """Train probe `kind` on (x_train, y_train multi-hot) and score x_test: ((m, c) scores,
    info with the loss curve's first/last values and the number of updates). Standardisation
    uses `norm_stats_from` (default x_train): pass every training row's embedding for few-shot
    subsets. One run of `fit_predict_many`."""
    _check_inputs(kind, x_train, x_test)
    ref = x_train if norm_stats_from is None else norm_stats_from
    _, x_train, x_test = standardise(ref, x_train, x_test)
    out = fit_predict_many(kind, x_train, y_train, x_test, [np.arange(len(x_train))], cfg,
                           keys=[key])
    return out[0]


def _buckets(n_steps: list[int], slack: float = 1.25) -> list[list[int]]:
    """Run indices grouped so that a group's longest run is at most `slack` x its shortest (the
    shorter ones are padded with zero-rate steps)."""
    order = sorted(range(len(n_steps)), key=lambda i: n_steps[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and n_steps[i] <= slack * n_steps[groups[-1][0]]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _plans(subsets, keys, cfg: ProbeConfig) -> list[dict]:
    """Per run: its global batch indices, row weights (1; 0 pads), rates and its init key."""
    plans = []
    for sel, key in zip(subsets, keys, strict=True):
        k_init, k_order = jax.random.split(key)
        seed = int(np.asarray(jax.random.key_data(k_order)).ravel()[-1])
        idx = np.asarray(sel)[batch_indices(len(sel), cfg, seed=seed)]
        plans.append({"idx": idx, "lr": lr_schedule(cfg, len(idx)), "key": k_init, "sel": sel})
    return plans


def _stack(plans: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(idx (R, S, B), weights (R, S, B), lr (R, S)) padded to the longest run and widest batch:
    padded slots have weight 0, padded steps rate 0 (the parameters do not move)."""
    s = max(len(p["idx"]) for p in plans)
    b = max(p["idx"].shape[1] for p in plans)
    idx = np.zeros((len(plans), s, b), np.int32)
    w = np.zeros((len(plans), s, b), np.float32)
    lr = np.zeros((len(plans), s), np.float32)
    for r, p in enumerate(plans):
        n, m = p["idx"].shape
        idx[r, :n, :m], w[r, :n, :m], lr[r, :n] = p["idx"], 1.0, p["lr"]
    return idx, w, lr


def _fit_bucket(kind, x, y, x_test, plans: list[dict], cfg: ProbeConfig):
    """Train the runs of one bucket at once; ((R, m, c) scores, (R, S) losses)."""
    models = [_init(kind, x[p["sel"]], y[p["sel"]], cfg, key=p["key"]) for p in plans]
    parts = [eqx.partition(m, eqx.is_array) for m in models]
    static = parts[0][1]
    params = jax.tree.map(lambda *a: jnp.stack(a), *[p for p, _ in parts])
    idx, w, lr = _stack(plans)
    how = _batching(kind)
    params, losses = _train_many(params, static, jnp.asarray(x), jnp.asarray(y, jnp.float32),
                                 jnp.asarray(idx), jnp.asarray(w), jnp.asarray(lr), cfg, how)
    scores = np.concatenate([np.asarray(_predict_many(params, static,
                                                      jnp.asarray(x_test[i : i + 512]), how))
                             for i in range(0, len(x_test), 512)], axis=1)
    return scores, np.asarray(losses)


def fit_predict_many(kind: str, x, y, x_test, subsets: list[np.ndarray], cfg: ProbeConfig, *,
                     keys: list, progress=None) -> list[tuple[np.ndarray, dict]]:
    """Probe `kind` trained on each subset (row indices of `x`, `y`) with its key: one
    ((m, c) scores, info) per subset, as `fit_predict` would give for `x[subset]` (`x` and
    `x_test` already standardised). Runs of similar length train together in one compiled
    scan over the shared rows (BATCHING); `progress(n)` is called as n runs finish."""
    _check_inputs(kind, x, x_test)
    y = np.asarray(y, bool)
    if len(subsets) != len(keys):
        raise ValueError(f"expected one key per subset, got {len(keys)} for {len(subsets)}")
    if kind == "knn":
        out = []
        for sel in subsets:
            out.append((knn_scores(x[sel], y[sel], x_test, cfg), {"n_steps": 0}))
            if progress:
                progress(1)
        return out
    plans = _plans(subsets, keys, cfg)
    out: list = [None] * len(plans)
    for group in _buckets([len(p["idx"]) for p in plans]):
        scores, losses = _fit_bucket(kind, x, y, x_test, [plans[i] for i in group], cfg)
        for r, i in enumerate(group):
            n = len(plans[i]["idx"])
            out[i] = (scores[r], {"n_steps": n, "loss_first": float(losses[r, 0]),
                                  "loss_last": float(losses[r, n - 1])})
        if progress:
            progress(len(group))
    return out
