"""ONNX export (`python -m birdjepa.export MODEL --out_dir DIR --format onnx`): onnxruntime on the
exported graph equals `birdjepa.embeddings` to 1e-4 relative, for one of our runs (RoPE, registers,
supervised head) and a Bird-MAE-shaped import (published key names, sincos table, fc_norm mean
pool), both on the input our transform computes and on the input the model card's recipe
computes with kaldi-native-fbank alone; the card and config.json state the contract."""

import dataclasses
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import kaldi_native_fbank as knf
import numpy as np
import onnxruntime as ort
import pytest
import soxr
import test_models_import
import tiny

import birdjepa
import birdjepa.config.architecture
import birdjepa.export
import birdjepa.model
import birdjepa.models.arrays as arrays
import birdjepa.models.artifact as artifact
import birdjepa.models.bird_mae as bird_mae
import birdjepa.models.features as features
import birdjepa.models.onnx_export as onnx_export
import birdjepa.models.safetensors
import birdjepa.optim
import birdjepa.params
import birdjepa.runtime.checkpoint
import birdjepa.runtime.rundir

SR = 32000


def rel(got: np.ndarray, want: np.ndarray) -> float:
    assert np.abs(want).max() > 0.1  # not a trivial comparison
    return float(np.abs(got - want).max() / np.abs(want).max())


def wave(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * 3000 * t) + 0.1 * rng.standard_normal(t.size)).astype(
        np.float32)


def card_input(x_n: np.ndarray, audio: dict, window_s: float) -> np.ndarray:
    """The graph's input as README.md tells a user to compute it, with kaldi-native-fbank."""
    win = round(window_s * SR)
    starts = range(0, max(1, -(-(len(x_n) - win) // win) + 1) * win, win)
    out = []
    for s in starts:
        w = np.zeros(win, np.float32)
        seg = x_n[s:s + win]
        w[:len(seg)] = seg
        o = knf.FbankOptions()
        f = o.frame_opts
        f.samp_freq, f.dither, f.window_type, f.snip_edges = SR, 0.0, "hanning", True
        o.mel_opts.num_bins, o.mel_opts.low_freq, o.mel_opts.high_freq = audio["n_mels"], 20, 0
        o.use_energy, o.use_log_fbank, o.use_power = False, True, True
        fb = knf.OnlineFbank(o)
        fb.accept_waveform(SR, w.tolist())
        fb.input_finished()
        x = np.stack([fb.get_frame(i) for i in range(fb.num_frames_ready)])
        n = audio["n_frames"]
        if audio.get("pad") == "min":  # the card's step 4: the raw minimum, then normalise
            x = np.pad(x[:n], ((0, max(0, n - len(x))), (0, 0)), constant_values=x.min())
            out.append((x - audio["mean"]) / (2 * audio["std"]))
            continue
        x = (x - audio["mean"]) / (2 * audio["std"])
        out.append(np.pad(x[:n], ((0, max(0, n - len(x))), (0, 0))))
    return np.stack(out).astype(np.float32)


def our_input(model, x_n: np.ndarray, window_s: float) -> np.ndarray:
    a = model.audio
    w = features.Windows.for_model(a, window_s=window_s)
    return np.concatenate([b[0] for b in features.features((x_n, SR), w)])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny supervised run (RoPE, one register, 32 frames x 64 mels, 4 classes) as training
    leaves it, without the training."""
    run = tmp_path_factory.mktemp("onnx-run") / "run"
    model = birdjepa.config.architecture.ModelConfig(width=32, depth=1, n_heads=2,
                                                     n_registers=1, pos="rope")
    cfg = tiny.finalize(tiny.tiny_config("supervised", n_steps=2, run_dir=str(run),
                                         model=model))
    # a non-zero head, so that the probabilities are not uniform
    return tiny.untrained_run(cfg, adjust=lambda params: eqx.tree_at(
        lambda p: p["heads"].head.w, params,
        jax.random.normal(jax.random.key(3), params["heads"].head.w.shape)))


@pytest.mark.heavy
def test_run_export_equals_embed_and_the_card_recipe(run_dir, tmp_path):
    out = tmp_path / "onnx"
    assert birdjepa.export.main([str(run_dir), "--out_dir", str(out), "--format", "onnx"]) == 0
    meta = json.loads((out / "config.json").read_text())
    assert meta["onnx"]["input"] == {"fbank": ["batch", 32, 64]}
    assert meta["onnx"]["outputs"] == {"embedding": ["batch", 32], "logits": ["batch", 4],
                                       "probabilities": ["batch", 4]}
    card = (out / "README.md").read_text()
    assert "equals `birdjepa.embeddings` to 1e-4 relative (tests/" in card
    assert "## ONNX" in card and "(x - (-7.2)) / (2 * 4.43)" in card.replace("fbank", "x")
    # A run whose config names no resampler trained before issue 36: the card names that filter.
    assert meta["audio"]["resampler"] == "rubato-bh2-1024"
    assert 'resampler="rubato-bh2-1024"' in card
    sess = ort.InferenceSession(str(out / "model.onnx"))
    assert [o.name for o in sess.get_outputs()] == ["embedding", "logits", "probabilities"]

    m = artifact.open_model(run_dir)
    x_n = wave(2.5)
    want = birdjepa.embeddings(run_dir, (x_n, SR), window_s=1.0)[f"emb_{m.encoder.cfg.pool}"]
    assert want.shape == (3, 32)
    emb, logits, probs = sess.run(None, {"fbank": our_input(m, x_n, 1.0)})
    assert rel(emb, want) < 1e-4
    want_logits = np.asarray(m.head(jnp.asarray(want)))
    assert rel(logits, want_logits) < 1e-4
    np.testing.assert_allclose(probs, jax.nn.softmax(want_logits, axis=-1), atol=1e-5)
    assert np.ptp(probs) > 0.05  # not uniform
    # the card's recipe (kaldi-native-fbank, no birdjepa) gives the same embedding
    emb_card = sess.run(["embedding"], {"fbank": card_input(x_n, m.audio, 1.0)})[0]
    assert rel(emb_card, want) < 1e-4


def test_bird_mae_shaped_export_equals_embed_and_the_numpy_reference(tmp_path):
    sd = test_models_import.random_state_dict(64, 2, sincos=True)
    enc = bird_mae.convert(sd, width=64, depth=2, n_heads=4)
    m = artifact.Model(enc, artifact.input_settings(bird_mae.AUDIO, "bird-mae-shaped"),
                       source="bird-mae-shaped")
    out = onnx_export.export(m, tmp_path / "onnx")
    sess = ort.InferenceSession(str(out / "model.onnx"))
    assert [o.name for o in sess.get_outputs()] == ["embedding"]
    assert "no class head" in (out / "README.md").read_text()
    x_n = wave(7.0, seed=1)  # two 5 s windows; the second is zero-padded, 498 -> 512 frames
    want = birdjepa.embeddings(enc, (x_n, SR))["emb_mean"]
    fb = our_input(m, x_n, 5.0)
    (emb,) = sess.run(None, {"fbank": fb})
    assert rel(emb, want) < 1e-4
    assert rel(emb, test_models_import.reference(sd, fb, 4, "mean")) < 1e-4
    (emb_card,) = sess.run(None, {"fbank": card_input(x_n, m.audio, 5.0)})
    assert rel(emb_card, want) < 1e-4
    # At 48 kHz the card names soxr HQ (Bird-MAE's data came through `datasets`): a user who
    # follows it gets embed's embedding to 1e-3 (measured 6.7e-5: our filter is soxr HQ's
    # response, not libsoxr itself; with the filter before issue 36, 7.5e-3).
    card = (out / "README.md").read_text()
    assert 'resample to 32000 Hz with soxr HQ' in card
    assert 'soxr.resample(x, sr, 32000, quality="HQ")' in card
    t = np.arange(7 * 48000) / 48000
    x48 = (0.3 * np.sin(2 * np.pi * 3000 * t) + 0.2 * np.sin(2 * np.pi * 15400 * t)
           + 0.05 * np.random.default_rng(2).standard_normal(t.size)).astype(np.float32)
    want48 = birdjepa.embeddings(enc, (x48, 48000))["emb_mean"]
    user = soxr.resample(x48, 48000, SR, quality="HQ")
    (emb_card,) = sess.run(None, {"fbank": card_input(user, m.audio, 5.0)})
    assert rel(emb_card, want48) < 1e-3, rel(emb_card, want48)


@pytest.mark.heavy
def test_bfloat16_model_exports_in_float32(run_dir, tmp_path):
    """A bfloat16 encoder's graph computes in float32: equal to the float32 forward, and within
    bfloat16 round-off of the bfloat16 one (config.json says so)."""
    m = artifact.open_model(run_dir)
    cfg = dataclasses.replace(m.encoder.cfg, compute_dtype="bfloat16")
    skel = birdjepa.model.ViT(cfg, n_frames=32, n_mels=64, key=jax.random.key(0))
    bf16 = arrays.fill(skel, arrays.leaf_paths(m.encoder))  # same weights, bf16 compute
    out = onnx_export.export(dataclasses.replace(m, encoder=bf16), tmp_path / "onnx")
    onnx = json.loads((out / "config.json").read_text())["onnx"]
    assert "float32" in onnx["exported_dtype_note"]
    x = our_input(m, wave(1.0), 1.0)
    emb = ort.InferenceSession(str(out / "model.onnx")).run(["embedding"], {"fbank": x})[0]
    assert rel(emb, np.asarray(m.encoder(jnp.asarray(x)).pooled_bd)) < 1e-4
    # Issue 38 item 18: the card claimed 1e-4 against embed; measured 8e-4 to 3e-3 for bf16.
    measured = rel(emb, np.asarray(bf16(jnp.asarray(x)).pooled_bd))  # what embed computes
    assert 1e-4 < measured < onnx["embed_rel_bound"] == 1e-2, measured
    assert "equals `birdjepa.embeddings` to 1e-2 relative (embed computes this model in bfloat16" \
        in (out / "README.md").read_text()


def test_export_of_what_is_not_a_run_names_run_dir(tmp_path, capsys):
    assert birdjepa.export.main(["missing-run", "--out_dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: RUN_DIR: expected a training run directory (config.toml or "
                   "checkpoints/), got 'missing-run'")


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert birdjepa.export.main(["missing-run", "--out_dir", str(tmp_path), "--format", "onnx"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "MODEL" in err
    with pytest.raises(SystemExit) as e:
        birdjepa.export.main(["missing-run", "--out_dir", str(tmp_path), "--format", "tflite"])
    assert e.value.code == 2


@pytest.mark.slow  # 21-172 s: 86 M random parameters converted and run twice
def test_bird_mae_base_spec_exports(tmp_path):
    sd = test_models_import.random_state_dict(768, 12, seed=2)
    birdjepa.models.safetensors.save(sd, tmp_path / "base.safetensors")
    spec = f"bird-mae-base:{tmp_path / 'base.safetensors'}"
    assert birdjepa.export.main([spec, "--out_dir", str(tmp_path / "onnx"), "--format", "onnx"]) == 0
    x_n = wave(5.0, seed=2)
    want = birdjepa.embeddings(spec, (x_n, SR))["emb_mean"]
    m = artifact.open_model(spec)
    sess = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    (emb,) = sess.run(None, {"fbank": our_input(m, x_n, 5.0)})
    assert emb.shape == (1, 768)
    assert rel(emb, want) < 1e-4


def _run_with_pad(root, pad: str):
    """A tiny supervised run whose clip (1.28 s: 125 frames) is shorter than its input (128
    frames) and whose data.pad is `pad`: every window of it is padded, a last one more."""
    run = root / f"run-{pad}"
    model = birdjepa.config.architecture.ModelConfig(width=32, depth=1, n_heads=2,
                                                     n_registers=1, pos="rope")
    data = birdjepa.config.DataConfig(n_frames=128, n_mels=64, clip_s=1.28, pad=pad)
    cfg = tiny.finalize(tiny.tiny_config("supervised", n_steps=2, run_dir=str(run), model=model,
                                         data=data))
    return tiny.untrained_run(cfg)


def _follow_the_card(card: str, model_path, x_n: np.ndarray, start: int, win: int):
    """The embedding of the window at sample `start` as the card says to compute it, word for
    word: its step 2 decides whether a window past the recording's end is zero-padded or cut at
    the end; then its Python block runs as printed (kaldi-native-fbank, numpy, onnxruntime)."""
    step2 = next(line for line in card.splitlines() if line.startswith("2. Cut windows"))
    window = x_n[start:start + win].astype(np.float32)
    if "zero-padded" in step2:
        window = np.pad(window, (0, win - len(window)))
    else:
        assert "is cut at the end of the recording" in step2, step2
    code = card.split("```python\n", 1)[1].split("```", 1)[0]
    code = code.replace('"model.onnx"', repr(str(model_path)))
    scope = {"window": window}
    exec(code, scope)  # the card's own lines
    return scope["out"][0]


@pytest.mark.parametrize("pad", ["zero", "min", "repeat"])
def test_the_cards_recipe_at_a_recordings_end_and_on_a_short_clip_equals_embed(tmp_path, pad):
    """Issue 47 item 7: the card said "a window that runs past the end is zero-padded
    (samples)", then repeat the frames; the code makes the fbank of the samples the recording
    has, then repeats its frames (pad = "repeat"): a user following the card got 0.52 relative
    L2 in the embedding of a last window with 0.47 s missing, 0.74 on a 1.43 s clip. Followed
    literally, the card now gives embed's embedding to 1e-3, for every pad."""
    run = _run_with_pad(tmp_path, pad)
    out = tmp_path / "onnx"
    assert birdjepa.export.main([str(run), "--out_dir", str(out), "--format", "onnx"]) == 0
    card = (out / "README.md").read_text()
    win = round(1.28 * SR)
    for seconds, starts in ((2 * 1.28 - 0.47, (0, win)), (1.03, (0,))):  # a last, a short one
        x_n = wave(seconds, seed=4)
        got = birdjepa.embeddings(run, (x_n, SR), window_s=1.28)["emb_cls"]
        assert len(got) == len(starts)
        for i, s in enumerate(starts):
            mine = _follow_the_card(card, out / "model.onnx", x_n, s, win)
            assert rel(mine, got[i]) <= 1e-3, (pad, seconds, s, rel(mine, got[i]))
