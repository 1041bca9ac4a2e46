"""Each probe learns a separable synthetic multilabel problem, and only from its labels:
with shuffled training labels it is at chance."""

import dataclasses

import jax
import numpy as np
import pytest

import birdjepa.evaluate.metrics as metrics
import birdjepa.evaluate.probes as probes

C, D, P = 4, 16, 8


def problem(n: int, seed: int):
    """Rows with 1-2 classes; class c puts 9 * mu_c on one random patch token (the others are
    noise) and 4.5 * mu_c on the pooled embedding; 15 % of test-like rows have no class."""
    rng = np.random.default_rng(seed)
    mu = np.linalg.qr(np.random.default_rng(99).normal(size=(D, D)))[0][:C] * 3.0
    y = np.zeros((n, C), bool)
    y[np.arange(n), rng.integers(0, C, n)] = True
    y[np.arange(n), rng.integers(0, C, n)] |= rng.random(n) < 0.3
    y[rng.random(n) < 0.15] = False
    tokens = rng.normal(size=(n, P, D)).astype(np.float32)
    for i, j in zip(*np.nonzero(y), strict=True):
        tokens[i, rng.integers(0, P)] += 3.0 * mu[j]
    pooled = (rng.normal(size=(n, D)) + 1.5 * y.astype(float) @ mu).astype(np.float32)
    return tokens, pooled, y


def layered(tokens, seed: int, at: int = 1, n_layers: int = 3):
    """(n, L, P, D): `tokens` as block `at`, the other blocks noise of another scale."""
    rng = np.random.default_rng(seed + 50)
    out = (5.0 * rng.normal(size=(len(tokens), n_layers, *tokens.shape[1:]))).astype(np.float32)
    out[:, at] = tokens
    return out


CFG = probes.ProbeConfig(lr=3e-3, min_steps=150, epochs=1, n_prototypes=8, knn_k=5)


@pytest.mark.parametrize("kind", probes.KINDS)
def test_probe_learns_and_fails_on_shuffled_labels(kind):
    tok_tr, pool_tr, y_tr = problem(160, 0)
    tok_te, pool_te, y_te = problem(200, 1)
    field = probes.FIELDS[kind]
    x_tr, x_te = {"patches": (tok_tr, tok_te), "pooled": (pool_tr, pool_te),
                  "layers": (layered(tok_tr, 0), layered(tok_te, 1))}[field]
    scores, info = probes.fit_predict(kind, x_tr, y_tr, x_te, CFG, key=jax.random.key(0))
    assert scores.shape == (200, C) and np.isfinite(scores).all()
    good = metrics.cmap(scores, y_te)
    assert good > 0.9, (kind, good, info)
    shuffled = y_tr[np.random.default_rng(1).permutation(len(y_tr))]
    scores, _ = probes.fit_predict(kind, x_tr, shuffled, x_te, CFG, key=jax.random.key(0))
    chance = y_te.mean(0)[y_te.any(0)].mean()
    bad = metrics.cmap(scores, y_te)
    assert bad < chance + 0.15, (kind, bad, chance)
    if kind != "knn":
        assert info["n_steps"] == 150 and info["loss_last"] < info["loss_first"]


def test_asl_loss_trains_and_batches_cover_epochs():
    tok_tr, pool_tr, y_tr = problem(160, 0)
    _, pool_te, y_te = problem(200, 1)
    cfg = dataclasses.replace(CFG, loss="asl")
    scores, _ = probes.fit_predict("linear", pool_tr, y_tr, pool_te, cfg, key=jax.random.key(1))
    assert metrics.cmap(scores, y_te) > 0.9
    idx = probes.batch_indices(10, dataclasses.replace(CFG, batch_size=4, min_steps=1, epochs=3),
                               seed=0)
    assert idx.shape == (6, 4)  # 2 full batches per epoch, 3 epochs
    for e in range(3):  # an epoch never repeats a row
        assert len(np.unique(idx[2 * e : 2 * e + 2])) == 8
    with pytest.raises(ValueError, match=r"expected 3-D inputs, got \(160, 16\)"):
        probes.fit_predict("attentive", pool_tr, y_tr, pool_te, CFG, key=jax.random.key(0))


@pytest.mark.parametrize("how", ["vmap", "map"])
@pytest.mark.parametrize("kind", ["linear", "prototypical"])
def test_batched_runs_equal_one_at_a_time(kind, how, monkeypatch):
    """fit_predict_many trains subsets of different sizes (and so batch widths and lengths)
    in one compiled scan, vmapped or mapped; each run's scores equal its own fit_predict run
    (which is one run of the same program)."""
    monkeypatch.setattr(probes, "BATCHING", how)
    tok, pool, y = problem(160, 0)
    tok_te, pool_te, _ = problem(40, 1)
    x, x_te = (tok, tok_te) if kind in probes.TOKEN_KINDS else (pool, pool_te)
    x, x_te = probes.standardise(x, x, x_te)[1:]
    cfg = dataclasses.replace(CFG, batch_size=32, min_steps=20, epochs=2)
    subsets = [np.arange(0, 20), np.arange(10, 160), np.arange(0, 150, 2), np.arange(5, 25)]
    keys = [jax.random.key(i) for i in range(len(subsets))]
    calls = []
    many = probes.fit_predict_many(kind, x, y, x_te, subsets, cfg, keys=keys,
                                   progress=calls.append)
    assert sum(calls) == len(subsets) and len(calls) < len(subsets)  # buckets, not one by one
    for sel, key, (scores, info) in zip(subsets, keys, many, strict=True):
        want, want_info = probes.fit_predict(kind, x[sel], y[sel], x_te, cfg, key=key,
                                             norm_stats_from=x)
        np.testing.assert_allclose(scores, want, rtol=1e-4, atol=1e-4)
        assert info["n_steps"] == want_info["n_steps"]
        assert info["loss_first"] == pytest.approx(want_info["loss_first"], rel=1e-4)


@pytest.mark.heavy
def test_multilayer_probe_reads_what_only_an_earlier_block_holds():
    """The species are in block 0's tokens; the last block's are noise: the multi-layer
    attentive probe finds them, the attentive probe on the last block cannot."""
    tok_tr, _, y_tr = problem(160, 0)
    tok_te, _, y_te = problem(200, 1)
    x_tr, x_te = layered(tok_tr, 0, at=0), layered(tok_te, 1, at=0)
    ml, _ = probes.fit_predict("multilayer", x_tr, y_tr, x_te, CFG, key=jax.random.key(0))
    last, _ = probes.fit_predict("attentive", x_tr[:, -1], y_tr, x_te[:, -1], CFG,
                                 key=jax.random.key(0))
    chance = y_te.mean(0)[y_te.any(0)].mean()
    assert metrics.cmap(ml, y_te) > 0.9
    assert metrics.cmap(last, y_te) < chance + 0.15
    with pytest.raises(ValueError, match=r"probe 'multilayer': expected 4-D inputs"):
        probes.fit_predict("multilayer", tok_tr, y_tr, tok_te, CFG, key=jax.random.key(0))


@pytest.mark.heavy
def test_layer_patches_are_the_blocks_outputs():
    """ViT.layer_patches: the last block's tokens equal the forward's un-normed patch tokens,
    and an earlier block's are what running only the blocks up to it gives."""
    import equinox as eqx

    import birdjepa.config.architecture as architecture
    import birdjepa.model

    cfg = architecture.resolve(architecture.ModelConfig(preset="debug", patch=(8, 16), depth=3))
    enc = birdjepa.model.ViT(cfg, n_frames=32, n_mels=32, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (2, 32, 32))
    got = np.asarray(enc.layer_patches(x, (0, -1)))
    assert got.shape == (2, 2, 8, cfg.width)  # (32 / 8) x (32 / 16) patches
    np.testing.assert_allclose(got[:, 1], np.asarray(enc(x, normed_patches=False).patches_bnd),
                               rtol=1e-5, atol=1e-5)
    one = eqx.tree_at(lambda e: e.blocks, enc, jax.tree.map(
        lambda a: a[:1] if eqx.is_array(a) else a, enc.blocks))
    np.testing.assert_allclose(got[:, 0], np.asarray(one(x, normed_patches=False).patches_bnd),
                               rtol=1e-5, atol=1e-5)
