"""The step to beat: a plain-JAX ViT of the same shape as a birdjepa config, written as a user
would write it without birdjepa (nothing of birdjepa's model, objectives or optimiser is used).

Same input (n_frames x n_mels log-mel), patches, width, depth, heads, MLP ratio, CLS + registers
(the same token count), compute dtype (float32 parameters, matmuls and attention in the compute
dtype), attention kernel (cuDNN on a GPU in bfloat16, else XLA), `lax.scan` over stacked blocks
with the same rematerialisation policy (where birdjepa runs its blocks unrolled,
`model.scan_layers = false`, which a plain ViT does not, the peer keeps its own best
arrangement that fits: a scan with remat "dots"; a scan without remat needs 118 GB at vit-s
512 x 2 views and moves 2.6x the bytes), AdamW with weight decay and clipping; the same number
of sequences per update (clips x views). Pre-LN blocks with a fused QKV projection, GELU MLP, a
learned position table; the loss is a mean square of the pooled output, so the encoder's forward
and backward are all the work. birdjepa's step does more (its objective's heads and loss, the
online probe, RoPE, QK-norm, LayerScale): it should still not be slower.
"""

import jax
import jax.numpy as jnp
import optax

POLICIES = {"none": None, "block": jax.checkpoint_policies.nothing_saveable,
            "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


class PeerViT:
    """`init(key)` -> (params, opt_state); `update(params, opt, x_btm)` (jitted, donating
    params and opt) -> (params, opt, loss); `batch(key)` -> a batch of the config's shape."""

    def __init__(self, cfg, platform: str | None = None):
        """`platform`: what the step is compiled for (default: the default backend)."""
        m = cfg.model  # a finalized birdjepa config: only its numbers are read
        self.t, self.mels = cfg.data.n_frames, cfg.data.n_mels
        self.pt, self.pm = m.patch
        self.d, self.depth, self.heads = m.width, m.depth, m.n_heads
        self.hidden = int(m.width * m.mlp_ratio)
        self.n_special = 1 + m.n_registers
        self.n_patches = (self.t // self.pt) * (self.mels // self.pm)
        self.dtype = jnp.bfloat16 if m.compute_dtype == "bfloat16" else jnp.float32
        self.n_seq = cfg.batch_size * cfg.data.n_views
        on_gpu = (platform or jax.default_backend()) in ("gpu", "cuda")
        self.attention = "cudnn" if on_gpu and self.dtype == jnp.bfloat16 else None
        self.policy = POLICIES[m.remat if m.scan_layers else "dots"]
        self.tx = optax.chain(optax.clip_by_global_norm(cfg.optim.clip or 1e9),
                              optax.adamw(cfg.optim.lr, weight_decay=cfg.optim.weight_decay))
        self.update = jax.jit(self._update, donate_argnums=(0, 1))
        self.init = jax.jit(self._init)

    def _init(self, key):
        d, h, n = self.d, self.hidden, self.depth
        ks = iter(jax.random.split(key, 8))

        def normal(shape):
            return 0.02 * jax.random.normal(next(ks), shape, jnp.float32)

        params = {
            "patch_w": normal((self.pt * self.pm, d)), "patch_b": jnp.zeros((d,)),
            "pos": normal((self.n_patches, d)), "special": normal((self.n_special, d)),
            "blocks": {
                "ln1_g": jnp.ones((n, d)), "ln1_b": jnp.zeros((n, d)),
                "qkv_w": normal((n, d, 3 * d)), "qkv_b": jnp.zeros((n, 3 * d)),
                "o_w": normal((n, d, d)), "o_b": jnp.zeros((n, d)),
                "ln2_g": jnp.ones((n, d)), "ln2_b": jnp.zeros((n, d)),
                "fc1_w": normal((n, d, h)), "fc1_b": jnp.zeros((n, h)),
                "fc2_w": normal((n, h, d)), "fc2_b": jnp.zeros((n, d)),
            },
            "ln_g": jnp.ones((d,)), "ln_b": jnp.zeros((d,)),
        }
        return params, self.tx.init(params)

    def _ln(self, x, g, b):
        x32 = x.astype(jnp.float32)
        mu = x32.mean(-1, keepdims=True)
        var = jnp.square(x32 - mu).mean(-1, keepdims=True)
        return ((x32 - mu) * jax.lax.rsqrt(var + 1e-6) * g + b).astype(self.dtype)

    def _dense(self, x, w, b):
        return x @ w.astype(self.dtype) + b.astype(self.dtype)

    def _block(self, x, w):
        b, n, d = x.shape
        h = self._ln(x, w["ln1_g"], w["ln1_b"])
        qkv = self._dense(h, w["qkv_w"], w["qkv_b"]).reshape(b, n, 3, self.heads, d // self.heads)
        a = jax.nn.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2],
                                         implementation=self.attention)
        x = x + self._dense(a.reshape(b, n, d), w["o_w"], w["o_b"])
        h = self._ln(x, w["ln2_g"], w["ln2_b"])
        h = self._dense(jax.nn.gelu(self._dense(h, w["fc1_w"], w["fc1_b"])), w["fc2_w"], w["fc2_b"])
        return x + h

    def _forward(self, params, x_btm):
        b = x_btm.shape[0]
        gt, gm = self.t // self.pt, self.mels // self.pm
        p = x_btm.reshape(b, gt, self.pt, gm, self.pm).transpose(0, 1, 3, 2, 4)
        x = self._dense(p.reshape(b, gt * gm, -1).astype(self.dtype), params["patch_w"],
                        params["patch_b"]) + params["pos"].astype(self.dtype)
        special = jnp.broadcast_to(params["special"].astype(self.dtype), (b, self.n_special, self.d))
        x = jnp.concatenate([special, x], axis=1)

        def body(x, w):
            return self._block(x, w), None

        if self.policy is not None:
            body = jax.checkpoint(body, policy=self.policy, prevent_cse=False)
        x, _ = jax.lax.scan(body, x, params["blocks"])
        return self._ln(x[:, 0], params["ln_g"], params["ln_b"])

    def _update(self, params, opt, x_btm):
        def loss_fn(p):
            return jnp.mean(jnp.square(self._forward(p, x_btm).astype(jnp.float32)))

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt = self.tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, loss

    def batch(self, key):
        return jax.random.normal(key, (self.n_seq, self.t, self.mels), jnp.float32)
