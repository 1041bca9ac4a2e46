"""The probe_only objective (random-encoder baseline): zero loss, no heads, and with
weight_decay = 0 the encoder stays bit-identical to its initialisation while the probe learns."""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import tiny

import birdjepa.config as config
import birdjepa.model as model
import birdjepa.objectives as objectives
import birdjepa.train.state
import birdjepa.train.step


def test_loss_is_zero_and_encoder_gradient_exactly_zero():
    cfg = tiny.tiny_config("probe_only")
    obj, sub = objectives.get(cfg.objective)
    enc = model.ViT(cfg.model, n_frames=32, n_mels=64, key=jax.random.key(0))
    heads = obj.init_heads(sub, enc, 4, key=jax.random.key(1))
    assert jax.tree.leaves(eqx.filter(heads, eqx.is_array)) == []
    train, _ = tiny.tiny_loaders(cfg)
    batch = {k: jnp.asarray(v) for k, v in next(iter(train)).items()}

    def f(enc):
        loss, parts, emb, target, w = obj.loss(sub, enc, heads, batch, key=jax.random.key(2))
        return loss + emb.sum(), (loss, parts, emb, target, w)

    g, (loss, parts, emb, target, w) = eqx.filter_grad(f, has_aux=True)(enc)
    assert float(loss) == 0.0 and parts == {}
    assert emb.shape == (8, 32) and target.shape == (8,) and w.shape == (8,)
    for leaf in jax.tree.leaves(eqx.filter(g, eqx.is_array)):
        assert not np.any(np.asarray(leaf))


def run_updates(weight_decay: float, n: int = 6):
    cfg = tiny.tiny_config("probe_only")
    cfg = tiny.finalize(dataclasses.replace(
        cfg, optim=dataclasses.replace(cfg.optim, weight_decay=weight_decay, lr=1e-2)))
    mesh = birdjepa.train.state.make_mesh(1)
    state, static, tx = birdjepa.train.state.init_state(cfg, mesh)
    init = jax.device_get(state["params"])
    step = jax.jit(functools.partial(birdjepa.train.step.update, static=static, tx=tx, cfg=cfg))
    it = iter(tiny.tiny_loaders(cfg)[0])
    norms = []
    for _ in range(n):
        state, m = step(state, birdjepa.train.state.shard_batch(next(it), cfg, mesh))
        assert bool(m["finite"]) and float(m["loss"]) == 0.0 and float(m["grad_norm"]) == 0.0
        norms.append(float(m["param_norm"]))
    return init, jax.device_get(state["params"]), norms


def leaves_equal(a, b) -> bool:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb, strict=True)
    )


def test_encoder_stays_at_init_without_weight_decay():
    init, after, norms = run_updates(weight_decay=0.0)
    assert leaves_equal(init["encoder"], after["encoder"])
    assert len(set(norms)) == 1  # what the demo's run script checks in metrics.jsonl
    assert not leaves_equal(init["probe"], after["probe"])  # the probe does learn


def test_weight_decay_would_move_the_encoder():
    """Why configs/demo-random.toml sets weight_decay = 0: AdamW decays even at zero grads."""
    init, after, norms = run_updates(weight_decay=0.5)
    assert not leaves_equal(init["encoder"], after["encoder"])
    assert norms[-1] < norms[0]


def test_demo_random_config_keeps_the_encoder_frozen():
    cfg = config.load("configs/demo-random.toml")
    assert cfg.objective.name == "probe_only" and cfg.optim.weight_decay == 0.0


def test_demo_configs_share_the_encoder():
    """The random-encoder baseline probes the very encoder LeJEPA starts from, and the same
    probe config takes LeJEPA's final encoder (`--init_encoder`, which needs the same model and
    input shape)."""
    cfg = tiny.finalize(config.load("configs/demo-random.toml"))
    ref = tiny.finalize(config.load("configs/demo-lejepa.toml"))
    assert cfg.model == ref.model and cfg.seed == ref.seed
    assert (cfg.data.n_frames, cfg.data.n_mels) == (ref.data.n_frames, ref.data.n_mels)


def test_probe_statistics_follow_the_frozen_embedding():
    """After the first update the probe's running mean and variance are exactly the first
    batch's embedding statistics (all views), computed here from the encoder directly."""
    cfg = tiny.finalize(tiny.tiny_config("probe_only"))
    mesh = birdjepa.train.state.make_mesh(1)
    state, static, tx = birdjepa.train.state.init_state(cfg, mesh)
    enc = eqx.combine(state["params"], static)["encoder"]
    batch = next(iter(tiny.tiny_loaders(cfg)[0]))
    emb = np.asarray(enc(jnp.asarray(batch["data"])).pooled_bd, np.float64)
    step = jax.jit(functools.partial(birdjepa.train.step.update, static=static, tx=tx, cfg=cfg))
    state, _ = step(state, birdjepa.train.state.shard_batch(batch, cfg, mesh))
    got = jax.device_get(state["params"]["probe"])
    np.testing.assert_allclose(got.mean, emb.mean(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got.var, emb.var(0), rtol=1e-3, atol=1e-7)


def test_augment_identity_by_default_and_per_view_draws():
    import birdjepa.objectives.augment

    x = jax.random.uniform(jax.random.key(0), (2, 4, 16, 32), minval=-0.5, maxval=1.5)
    assert birdjepa.objectives.augment.augment_views(birdjepa.objectives.augment.AugmentConfig(), x, key=jax.random.key(1)) is x
    cfg = birdjepa.objectives.augment.AugmentConfig(gain=0.3, tilt=0.5, contrast=0.25, lowpass_p=1.0, lowpass_min=0.5)
    y = np.asarray(birdjepa.objectives.augment.augment_views(cfg, x, key=jax.random.key(1)))
    assert y.shape == x.shape and y.min() >= cfg.floor
    assert not np.allclose(y[0], y[1])  # the two views of a clip are augmented differently
    # lowpass_p = 1: every clip's top bin is at the floor.
    assert np.all(y[..., -1] == cfg.floor)
