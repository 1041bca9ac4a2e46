"""Objectives: shapes and finite gradients, SIGReg against plain numpy, probe stop-gradient,
MAE block masks."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tiny

import birdjepa.config.losses
import birdjepa.model as model
import birdjepa.objectives as objectives
import birdjepa.objectives.lejepa as lejepa
import birdjepa.objectives.mae as mae
import birdjepa.objectives.probe as probe
import birdjepa.train.log


def sigreg_numpy(z, a, n_points, t_max):
    """Epps-Pulley SIGReg from the LeJEPA paper, written out in numpy.

    For each unit direction a_m: x = z a_m; ecf(t) = mean_n exp(i t x_n);
    T_m = N * integral_{-t_max}^{t_max} |ecf(t) - exp(-t^2/2)|^2 exp(-t^2/2) dt (trapezoid);
    return mean_m T_m.
    """
    n = z.shape[0]
    t = np.linspace(-t_max, t_max, n_points)
    gauss = np.exp(-(t**2) / 2)
    stats = []
    for m in range(a.shape[1]):
        x = z @ a[:, m]
        ecf = np.exp(1j * np.outer(x, t)).mean(axis=0)
        integrand = np.abs(ecf - gauss) ** 2 * gauss
        integral = np.sum((integrand[1:] + integrand[:-1]) / 2 * np.diff(t))
        stats.append(n * integral)
    return float(np.mean(stats))


@pytest.mark.parametrize("dist", ["gauss", "skewed"])
def test_sigreg_matches_numpy(dist):
    rng = np.random.default_rng(0)
    z = rng.standard_normal((64, 8))
    if dist == "skewed":
        z = np.exp(z) - 1.5
    key = jax.random.key(3)
    # The same directions our implementation draws: normal, normalised per column.
    a = np.asarray(jax.random.normal(key, (8, 32)), np.float64)
    a /= np.linalg.norm(a, axis=0, keepdims=True)
    ours = lejepa.sigreg(jnp.asarray(z, jnp.float32), key=key, n_slices=32, n_points=17,
                         t_max=5.0)
    ref = sigreg_numpy(z, a, 17, 5.0)
    np.testing.assert_allclose(float(ours), ref, rtol=2e-4, atol=1e-6)


def test_sigreg_separates_gaussian_from_collapsed():
    key = jax.random.key(0)
    z = jax.random.normal(jax.random.key(1), (256, 16))
    gauss = float(lejepa.sigreg(z, key=key, n_slices=64))
    collapsed = float(lejepa.sigreg(0.1 * z[:, :1] * jnp.ones((1, 16)), key=key, n_slices=64))
    assert gauss < 3.0 and collapsed > 30 * gauss
    # Padding rows (weight 0) do not change the statistic.
    w = jnp.concatenate([jnp.ones(256), jnp.zeros(16)])
    zp = jnp.concatenate([z, 100 * jnp.ones((16, 16))])
    np.testing.assert_allclose(float(lejepa.sigreg(zp, key=key, n_slices=64, w_n=w)), gauss,
                               rtol=1e-5)


def build(name: str):
    cfg = tiny.tiny_config(name)
    obj, sub = objectives.get(cfg.objective)
    enc = model.ViT(cfg.model, n_frames=32, n_mels=64, key=jax.random.key(0))
    heads = obj.init_heads(sub, enc, 4, key=jax.random.key(1))
    train, _ = tiny.tiny_loaders(cfg)
    batch = {k: jnp.asarray(v) for k, v in next(iter(train)).items()}
    return obj, sub, enc, heads, batch


@pytest.mark.parametrize("name", ["supervised", "lejepa", "mae"])
def test_objective_loss_and_grads(name):
    obj, sub, enc, heads, batch = build(name)
    v = 2 if name == "lejepa" else 1

    @eqx.filter_jit
    def run(enc, heads):
        def f(enc, heads):
            loss, parts, emb, target, w = obj.loss(sub, enc, heads, batch, key=jax.random.key(2))
            return loss, (parts, emb, target, w)

        return eqx.filter_value_and_grad(f, has_aux=True)(enc, heads)

    (loss, (parts, emb, target, w)), grads = run(enc, heads)
    assert loss.shape == () and np.isfinite(float(loss))
    assert emb.shape == (v * 8, 32) and target.shape == (v * 8,) and w.shape == (v * 8,)
    assert all(np.isfinite(float(p)) for p in parts.values())
    assert sorted(set(parts) - {"train_acc"}) == sorted(birdjepa.config.losses.TERMS[name])  # curves.png's
    g_leaves = jax.tree.leaves(eqx.filter(grads, eqx.is_array))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in g_leaves)
    assert float(jnp.abs(grads.blocks.wq.w).sum()) > 0  # the encoder is trained


def test_lejepa_invariance_is_zero_for_identical_views():
    obj, sub, enc, heads, batch = build("lejepa")
    same = {**batch, "data": jnp.stack([batch["data"][0], batch["data"][0]])}
    _, parts, *_ = obj.loss(sub, enc, heads, same, key=jax.random.key(2))
    assert float(parts["inv"]) < 1e-10
    _, parts, *_ = obj.loss(sub, enc, heads, batch, key=jax.random.key(2))
    assert float(parts["inv"]) > 1e-6


def test_lejepa_needs_two_views():
    obj, sub, enc, heads, batch = build("lejepa")
    with pytest.raises(ValueError, match="n_views >= 2, got 1"):
        obj.loss(sub, enc, heads, {**batch, "data": batch["data"][0]}, key=jax.random.key(0))


def test_lejepa_projector_ignores_invalid_rows():
    """The projector's batch statistics come from valid rows only: garbage in padded rows does
    not change what the valid rows project to."""
    _, sub, enc, heads, batch = build("lejepa")
    emb = enc(batch["data"][0]).pooled_bd
    w = jnp.ones(8).at[6:].set(0.0)
    z = heads(emb, w)
    z_garbage = heads(emb.at[6:].set(1e3), w)
    np.testing.assert_allclose(np.asarray(z_garbage[:6]), np.asarray(z[:6]), rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.asarray(heads(emb, jnp.ones(8))[:6]), np.asarray(z[:6]))


def test_lejepa_probe_sees_the_clean_views():
    """With augmentations on, the probe trains on the un-augmented views (V * B rows)."""
    import dataclasses

    import birdjepa.objectives.augment

    obj, sub, enc, heads, batch = build("lejepa")
    sub = dataclasses.replace(sub, augment=birdjepa.objectives.augment.AugmentConfig(gain=0.3, tilt=0.5, mix=0.5))
    _, _, emb, target, w = obj.loss(sub, enc, heads, batch, key=jax.random.key(2))
    v, b = batch["data"].shape[:2]
    clean = enc(batch["data"].reshape(v * b, *batch["data"].shape[2:])).pooled_bd
    np.testing.assert_allclose(np.asarray(emb), np.asarray(clean), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(target), np.tile(np.asarray(batch["target"]), v))
    assert w.shape == (v * b,)


def test_probe_standardises_with_running_statistics():
    emb = jax.random.normal(jax.random.key(0), (64, 32)) * 0.5 + 5.0  # offset >> spread
    w = jnp.ones(64).at[60:].set(0.0)
    mean, sq = probe.batch_stats(emb.at[60:].set(1e6), w)  # invalid rows are ignored
    var = sq - mean**2
    np.testing.assert_allclose(np.asarray(mean), np.asarray(emb[:60].mean(0)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(var), np.asarray(emb[:60].var(0)), rtol=1e-3)
    pr = probe.init(32, 4, key=jax.random.key(1))
    first = probe.update_stats(pr, mean, sq, first=jnp.array(True))
    np.testing.assert_array_equal(np.asarray(first.mean), np.asarray(mean))
    np.testing.assert_allclose(np.asarray(first.var), np.asarray(var), rtol=1e-6)
    second = probe.update_stats(first, 0 * mean, 2 * var, first=jnp.array(False))
    np.testing.assert_allclose(np.asarray(second.mean), 0.9 * np.asarray(mean), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(second.var), 1.1 * np.asarray(var), rtol=1e-5)
    # Standardised input: an affine change of the embedding with matching statistics gives the
    # same logits.
    lin = eqx.tree_at(lambda p: p.linear.w, first, jax.random.normal(jax.random.key(2), (32, 4)))
    moved = eqx.tree_at(lambda p: (p.mean, p.var), lin, (3 * lin.mean - 7, 9 * lin.var))
    np.testing.assert_allclose(np.asarray(moved(3 * emb - 7)), np.asarray(lin(emb)), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.heavy
def test_probe_gradient_to_encoder_is_exactly_zero():
    obj, sub, enc, heads, batch = build("supervised")
    pr = probe.init(32, 4, key=jax.random.key(5))
    pr = eqx.tree_at(lambda p: p.linear.w, pr,
                     jax.random.normal(jax.random.key(6), pr.linear.w.shape))

    def probe_loss(enc, pr):
        _, _, emb, target, w = obj.loss(sub, enc, heads, batch, key=jax.random.key(0))
        return probe.loss(pr, emb, target, w)[0]

    g_enc, g_probe = eqx.filter_grad(probe_loss)(enc, pr), None
    g_probe = eqx.filter_grad(lambda pr, enc: probe_loss(enc, pr))(pr, enc)
    for g in jax.tree.leaves(eqx.filter(g_enc, eqx.is_array)):
        assert np.array_equal(np.asarray(g), np.zeros_like(g))
    assert float(jnp.abs(g_probe.linear.w).sum()) > 0


def test_mae_block_mask():
    cfg = mae.MAEConfig(mask_ratio=0.75, block=(2, 2))
    keep, hidden = mae.block_mask(cfg, (4, 8), 16, key=jax.random.key(0))
    keep, hidden = np.asarray(keep), np.asarray(hidden)
    assert keep.shape == (16, 8) and hidden.shape == (16, 32)
    assert (hidden.sum(1) == 24).all()
    for k, h in zip(keep, hidden, strict=True):
        assert (np.diff(k) > 0).all() and not h[k].any()
        # 8 kept patches = exactly two whole 2x2 cells (scores are constant within a cell).
        cells = {(i // 8 // 2, i % 8 // 2) for i in k}
        assert len(cells) == 2
    assert len({tuple(k) for k in keep}) > 1  # masks differ between examples


def test_mae_targets_are_normalised_per_patch():
    p = jax.random.normal(jax.random.key(0), (2, 5, 16)) * 3 + 7
    t = mae.targets(mae.MAEConfig(), p)
    np.testing.assert_allclose(t.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(t.std(-1), 1, atol=1e-3)


@pytest.mark.heavy
def test_lejepa_multi_crop_pulls_every_crop_to_the_global_centre():
    """With local crops (batch["local"], a shorter token grid), the invariance term is the mean
    squared distance of global AND local embeddings to the mean of the global ones, and SIGReg
    averages over all of them (the paper's reference algorithm), here against numpy."""
    import dataclasses

    obj, sub, enc, heads, batch = build("lejepa")
    sub = dataclasses.replace(sub, proj_dim=0)  # z = the pooled embedding: checkable by hand
    heads = obj.init_heads(sub, enc, 4, key=jax.random.key(1))
    local = jax.random.normal(jax.random.key(5), (3, 8, 16, 64))  # 3 crops of 16 frames
    key = jax.random.key(2)
    _, parts, emb, *_ = obj.loss(sub, enc, heads, {**batch, "local": local}, key=key)
    g = np.asarray(batch["data"])
    zg = np.asarray(enc(jnp.asarray(g.reshape(16, 32, 64))).pooled_bd).reshape(2, 8, -1)
    zl = np.asarray(enc(local.reshape(24, 16, 64)).pooled_bd).reshape(3, 8, -1)
    z = np.concatenate([zg, zl])
    want_inv = np.square(z - zg.mean(0)).mean((0, 2)).mean()
    np.testing.assert_allclose(float(parts["inv"]), want_inv, rtol=1e-4)
    want_sig = np.mean([float(lejepa.sigreg(jnp.asarray(zv), key=key, n_slices=sub.n_slices,
                                            n_points=sub.n_points, t_max=sub.t_max))
                        for zv in z])
    np.testing.assert_allclose(float(parts["sigreg"]), want_sig, rtol=1e-4)
    # Without the local crops the centre is the same but only the globals are pulled to it.
    _, plain, *_ = obj.loss(sub, enc, heads, batch, key=key)
    np.testing.assert_allclose(float(plain["inv"]), np.square(zg - zg.mean(0)).mean(), rtol=1e-4)
    assert emb.shape == (16, zg.shape[-1]), "the probe sees the global views only"


@pytest.mark.parametrize("name, panels", [
    ("lejepa", ["loss, objective lejepa", "sigreg (SIGReg statistic)", "inv (invariance)",
                "accuracy"]),
    ("mae", ["loss = mse (reconstruction error), objective mae", "accuracy"]),
    ("supervised", ["loss = ce (cross-entropy), objective supervised", "accuracy"]),
])
def test_curves_plot_the_objectives_own_terms(name, panels, tmp_path):
    """Issue 36 item 6.6: curves.png drew the total loss and accuracy only, not the terms a
    LeJEPA run is judged by (README: SIGReg falling, invariance not collapsing). Each objective
    now gets its terms' panels, named by what they measure; with no objective given, the terms
    in the rows say which it was."""
    rows = [{"step": s, "loss": 2.0 / s, "probe_loss": 1.5 / s, "probe_acc": 0.1 * s,
             **{t: 1.0 / s for t in birdjepa.config.losses.TERMS[name]}} for s in range(1, 6)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for objective in (name, None):
        drawn = birdjepa.train.log.plot(path, tmp_path / "c.png", objective)
        assert [t for t, _ in drawn] == panels
        assert drawn[0][1] == ["loss", "online probe"]
        if name == "lejepa":
            assert drawn[1][1] == ["sigreg"] and drawn[2][1] == ["inv"]
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_a_sigmoid_runs_curves_name_binary_cross_entropy(tmp_path):
    """Issue 47 item 21: curves.png titled a sigmoid (multilabel) run "ce (cross-entropy)"."""
    rows = [{"step": s, "loss": 1.0 / s, "probe_loss": 1.0 / s, "probe_acc": 0.1, "ce": 1.0 / s}
            for s in range(1, 4)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = birdjepa.train.log.plot(path, tmp_path / "c.png", "supervised", multilabel=True)
    assert drawn[0][0] == ("loss = ce (binary cross-entropy, sigmoid per class), objective "
                           "supervised")


@pytest.mark.heavy
def test_semi_supervised_lejepa_learns_from_labelled_rows_only():
    """objective.lejepa.supervised_weight: the LeJEPA loss plus w x the class head's
    cross-entropy over labelled rows (the label-free heads keep their tree: a run saved before
    the option restores, tests/test_resume_pre_schema.py); an unlabelled row (-1) adds nothing to it, a labelled
    row's label changes the loss and the encoder's gradient, and weight 0 is the label-free loss exactly."""
    import dataclasses

    obj, sub, enc, _, batch = build("lejepa")
    semi = dataclasses.replace(sub, supervised_weight=0.5)
    heads = obj.init_heads(semi, enc, 4, key=jax.random.key(1))
    plain = obj.init_heads(sub, enc, 4, key=jax.random.key(1))
    assert isinstance(heads, lejepa.SemiHeads) and not hasattr(plain, "cls")
    # the projector starts as it does without the option
    np.testing.assert_array_equal(np.asarray(heads.fc1.w), np.asarray(plain.fc1.w))
    target = jnp.asarray(batch["target"]).at[4:].set(-1)  # rows 4..7 unlabelled
    b = {**batch, "target": target}

    @eqx.filter_jit  # one compile per heads class (cfg is static: equal configs share one)
    def grad(cfg, enc, hd, bt):
        def f(enc, hd):
            return obj.loss(cfg, enc, hd, bt, key=jax.random.key(2))[:2]

        return eqx.filter_value_and_grad(f, has_aux=True)(enc, hd)

    def run(bt, cfg=semi, hd=heads):
        (loss, parts), g = grad(cfg, enc, hd, bt)
        return float(loss), parts, g

    loss, parts, g = run(b)
    np.testing.assert_allclose(
        loss, (1 - semi.lambd) * float(parts["inv"]) + semi.lambd * float(parts["sigreg"])
        + 0.5 * float(parts["ce"]), rtol=1e-6)
    want_ce = np.mean([float(jax.nn.logsumexp(lg) - lg[t]) for lg, t in zip(
        np.asarray(heads.cls(obj.loss(semi, enc, heads, b, key=jax.random.key(2))[2])),
        np.tile(np.asarray(target), 2), strict=True) if t >= 0])
    np.testing.assert_allclose(float(parts["ce"]), want_ce, rtol=1e-5)
    unlabelled = run({**b, "target": target.at[:].set(-1)})[1]
    assert float(unlabelled["ce"]) == 0.0  # no labelled row: no supervised term
    relabel = run({**b, "target": target.at[1].set((int(target[1]) + 1) % 4)})
    assert relabel[0] != loss and not np.allclose(np.asarray(relabel[2].blocks.wq.w),
                                                  np.asarray(g.blocks.wq.w))
    assert float(jnp.abs(g.blocks.wq.w).sum()) > 0
    label_free, _, _ = run(b, cfg=dataclasses.replace(semi, supervised_weight=0.0), hd=plain)
    want, _, _ = run(b, cfg=sub, hd=plain)
    assert label_free == want
