"""Bird-MAE import: our safetensors reader/writer, and parity of the converted encoder with an
independent numpy forward pass of the published (timm-style MAE) architecture, on random
weights stored under the published key names."""

import bird_mae_ref as ref
import jax.numpy as jnp
import numpy as np
import pytest

import birdjepa.config.architecture
import birdjepa.model
import birdjepa.models
import birdjepa.models.arrays as arrays
import birdjepa.models.bird_mae as bird_mae
import birdjepa.models.inference
import birdjepa.models.safetensors

T, M, P = 512, 128, 16  # Bird-MAE's input (frames, mels) and patch


# -- an independent reference: Bird-MAE's encoder in numpy, torch layouts ---------------------
# (tests/support/bird_mae_ref.py, shared with the end-to-end parity of test_bird_mae_parity.py)

reference = ref.forward


def random_state_dict(d: int, depth: int, *, seed: int = 0, sincos: bool = False) -> dict:
    """Random weights under the published key names and torch shapes (norms away from 1/0)."""
    rng = np.random.default_rng(seed)
    shapes = bird_mae.expected_shapes(birdjepa.config.architecture.resolve(
        birdjepa.config.architecture.ModelConfig(preset="bird-mae-base", width=d, depth=depth,
                                          n_heads=4)), (T // P) * (M // P))
    sd = {}
    for k, shape in shapes.items():
        scale = 0.5 if k.endswith("bias") or k in ("cls_token", "pos_embed") else 0.08
        base = 1.0 if "norm" in k and k.endswith("weight") else 0.0
        sd[k] = (base + scale * rng.standard_normal(shape)).astype(np.float32)
    if sincos:
        table = birdjepa.model.sincos_2d((T // P, M // P), d)
        sd["pos_embed"] = np.concatenate([np.zeros((1, d)), table])[None].astype(np.float32)
    return sd


@pytest.fixture(scope="module")
def fbank():
    return np.random.default_rng(1).standard_normal((2, T, M)).astype(np.float32)


@pytest.mark.parametrize("sincos", [False, True])
def test_converted_encoder_equals_the_reference_forward(tmp_path, fbank, sincos):
    sd = random_state_dict(64, 2, sincos=sincos)
    birdjepa.models.safetensors.save({f"model.{k}": v for k, v in sd.items()} | {"decoder_embed.weight": np.ones(3)},
            tmp_path / "w.safetensors")
    enc = bird_mae.convert(birdjepa.models.safetensors.load(tmp_path / "w.safetensors")[0], width=64, depth=2, n_heads=4)
    assert enc.cfg.pos == ("sincos" if sincos else "absolute")
    assert (enc.pos_embed is None) == sincos
    for pool in ("mean", "cls"):
        want = reference(sd, fbank, 4, pool)
        got = np.asarray(birdjepa.models.inference.with_pool(enc, pool)(jnp.asarray(fbank))
                         .pooled_bd)
        err = np.abs(got - want).max()
        assert err < 1e-4, (pool, err)
        assert np.abs(want).max() > 0.5  # not a trivial comparison


@pytest.mark.slow  # 17-56 s: 86 M random parameters through numpy and JAX
def test_bird_mae_base_at_full_size(tmp_path, fbank):
    sd = random_state_dict(768, 12, seed=2)
    birdjepa.models.safetensors.save(sd, tmp_path / "base.safetensors")
    enc = birdjepa.models.load("bird-mae-base", weights=tmp_path / "base.safetensors")
    assert (enc.width, enc.cfg.depth, enc.n_patches) == (768, 12, 256)
    want = reference(sd, fbank[:1], 12)
    got = np.asarray(enc(jnp.asarray(fbank[:1])).pooled_bd)
    assert np.abs(got - want).max() < 1e-4


def test_conversion_names_every_missing_unexpected_and_misshapen_key(tmp_path):
    sd = random_state_dict(64, 2)
    del sd["blocks.1.mlp.fc2.bias"], sd["fc_norm.weight"]
    sd["blocks.0.attn.q_bias"] = np.zeros(64, np.float32)
    sd["blocks.0.attn.proj.weight"] = np.zeros((64, 32), np.float32)
    with pytest.raises(arrays.ConversionError) as e:
        bird_mae.convert(sd, width=64, depth=2, n_heads=4, what="w.safetensors")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("w.safetensors as bird-mae-base: ")
    assert "missing keys ['fc_norm.weight', 'blocks.1.mlp.fc2.bias']" in msg
    assert "unexpected keys ['blocks.0.attn.q_bias']" in msg
    assert "blocks.0.attn.proj.weight: expected (64, 64), got (64, 32)" in msg
    # The real sizes are checked too: a small state dict is not a Bird-MAE-Base.
    birdjepa.models.safetensors.save(random_state_dict(64, 2), tmp_path / "small.safetensors")
    with pytest.raises(arrays.ConversionError, match=r"missing keys \['blocks.2.norm1.weight"):
        birdjepa.models.load("bird-mae-base", weights=tmp_path / "small.safetensors")
    (tmp_path / "w.bin").write_bytes(b"PK\x03\x04 a torch zip")
    with pytest.raises(arrays.ConversionError, match="convert it to safetensors first"):
        birdjepa.models.load("bird-mae-large", weights=tmp_path / "w.bin")


def test_safetensors_round_trip_and_bad_files(tmp_path):
    import ml_dtypes

    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, -2], np.int64),
              "c": np.array([1.5, -0.25], ml_dtypes.bfloat16), "e": np.zeros((0, 4), np.float16)}
    birdjepa.models.safetensors.save(arrays, tmp_path / "x.safetensors", {"k": "v"})
    raw = (tmp_path / "x.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0 and raw[8:9] == b"{"
    back, meta = birdjepa.models.safetensors.load(tmp_path / "x.safetensors")
    assert meta == {"k": "v"} and sorted(back) == ["a", "b", "c", "e"]
    np.testing.assert_array_equal(back["a"], arrays["a"])
    np.testing.assert_array_equal(back["b"], arrays["b"])
    assert back["c"].dtype == np.float32 and back["c"].tolist() == [1.5, -0.25]
    assert back["e"].shape == (0, 4)
    (tmp_path / "bad.safetensors").write_bytes(raw[: 8 + n + 10])
    with pytest.raises(birdjepa.models.safetensors.FormatError, match="tensor 'a': data_offsets"):
        birdjepa.models.safetensors.load(tmp_path / "bad.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(birdjepa.models.safetensors.FormatError, match="header length"):
        birdjepa.models.safetensors.load(tmp_path / "junk.safetensors")


def test_weights_are_checked_for_dtype_and_finiteness(tmp_path):
    """A NaN or an integer tensor is a one-line error naming the tensor (issue 30 item 8)."""
    sd = random_state_dict(64, 2)
    sd["blocks.1.attn.qkv.weight"][3, 5] = np.nan
    birdjepa.models.safetensors.save(sd, tmp_path / "nan.safetensors")
    with pytest.raises(birdjepa.models.safetensors.FormatError) as e:
        bird_mae.convert(birdjepa.models.safetensors.load(tmp_path / "nan.safetensors")[0], width=64, depth=2,
                         n_heads=4, what="nan.safetensors")
    assert str(e.value) == ("nan.safetensors: tensor 'blocks.1.attn.qkv.weight': expected "
                            "finite weights in float32, got 1 NaN, infinite or out-of-range "
                            "value(s) of 12288")
    # Issue 38 item 15: finite as float64, infinite in the float32 model (NaN embeddings, exit 0).
    sd = {k: v.astype(np.float64) for k, v in random_state_dict(64, 2).items()}
    sd["norm.weight"][7] = 1e300
    birdjepa.models.safetensors.save(sd, tmp_path / "f64.safetensors")
    with pytest.raises(birdjepa.models.safetensors.FormatError, match="tensor 'norm.weight': expected finite weights in "
                       "float32, got 1 NaN, infinite or out-of-range value"):
        bird_mae.convert(birdjepa.models.safetensors.load(tmp_path / "f64.safetensors")[0], width=64, depth=2,
                         n_heads=4, what="f64.safetensors")
    sd = random_state_dict(64, 2)
    sd["norm.bias"] = np.arange(64, dtype=np.int64)
    with pytest.raises(birdjepa.models.safetensors.FormatError, match="tensor 'norm.bias': expected floating-point "
                       "weights, got dtype int64"):
        bird_mae.convert(sd, width=64, depth=2, n_heads=4)


def test_a_lightning_checkpoint_is_refused_and_its_encoder_prefix_accepted(tmp_path):
    """Bird-SSL's .ckpt (a torch zip) gets the conversion command; the converted file's
    `encoder.`/`decoder.` keys load as the encoder (issue 27 item 7)."""
    (tmp_path / "last.ckpt").write_bytes(b"PK\x03\x04 a lightning checkpoint")
    with pytest.raises(arrays.ConversionError) as e:
        bird_mae.read_state_dict(tmp_path / "last.ckpt")
    msg = str(e.value)
    assert "\n" not in msg and "Lightning .ckpt" in msg and "d.get('state_dict'" in msg
    assert "'last.safetensors'" in msg
    sd = random_state_dict(64, 2, sincos=True)
    conv = {f"encoder.{k}": v for k, v in sd.items()} | {
        "decoder.decoder_embed.weight": np.ones((3, 3), np.float32),
        "decoder.mask_token": np.zeros((1, 1, 3), np.float32)}
    enc = bird_mae.convert(conv, width=64, depth=2, n_heads=4)
    x = np.random.default_rng(0).standard_normal((1, T, M)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(enc(jnp.asarray(x)).pooled_bd),
                               reference(sd, x, 4), atol=1e-4)


@pytest.mark.parametrize("header, fault", [
    (b'[1, 2]', "header: expected a JSON object of tensors, got a JSON list"),
    (b'{"w": {"dtype": "F32", "shape": [2]}}', "tensor 'w': data_offsets: expected [begin, "
     "end], got None"),
    (b'{"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}', "tensor 'w': shape: "
     "expected a list of ints >= 0, got '2'"),
    (b'{"w": 3}', "tensor 'w': expected an object with dtype, shape and data_offsets, got 3"),
])
def test_malformed_safetensors_headers_are_one_line(tmp_path, header, fault):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    with pytest.raises(birdjepa.models.safetensors.FormatError) as e:
        bird_mae.read_state_dict(path)
    assert str(e.value) == f"{path}: {fault}"
