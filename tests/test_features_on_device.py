"""Issue 46 item 2: log-mel features made on the device. The loader carries each sample's window
(`data.features = "device"`); `device_features.featurize` (what the train step runs) makes the
host's batch of it: the same views, crops, padding and local crops within float32 round-off, on
real-format audio (the demo corpus: ogg, mp3, flac, wav at 22.05-48 kHz, mono and stereo). A
packed 16-bit corpus crosses as int16; host features to a bfloat16 model cross as bfloat16; a
training run with device features resumes bit for bit; what device features cannot do is
refused by name before anything runs."""

import dataclasses

import jax
import ml_dtypes
import numpy as np
import pytest
import resume_helpers as h
import tiny

import birdjepa
import birdjepa.config
import birdjepa.data
import birdjepa.data.device_features as device_features
import birdjepa.data.pack
import birdjepa.runtime.rundir
import birdjepa.train.loop
from birdjepa.data import LoaderConfig


@pytest.fixture(scope="module")
def corpus(demo_corpus):
    """12 recordings of 2-9 s: some shorter than a 5 s clip, some shorter than a 6 s window."""
    return demo_corpus(n_recordings=12, min_s=2.0, max_s=9.0, seed=3)["out_dir"]


def _pair(path, cfg: LoaderConfig, *, mode="train", batch_size=12, **run):
    """The first batch of the host and of the device loader with `cfg`, the device one
    featurized as the train step does."""
    out = []
    for features in ("host", "device"):
        c = dataclasses.replace(cfg, features=features, n_workers=2)
        with birdjepa.data.Loader(path, config=c, mode=mode, batch_size=batch_size, seed=5,
                                  **run) as ld:
            out.append(next(ld))
    host, device = out
    return host, device, jax.device_get(device_features.featurize(device, cfg))


def _rel(got, want) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _max_abs_above_floor(got, want, cfg) -> float:
    """Max |got - want| over the cells within 13.8 nats of their frame's loudest (the fbank
    tests' rule: cells further down are float32 round-off of the power spectrum)."""
    raw = want * (2 * cfg.std) + cfg.mean
    keep = raw >= raw.max(-1, keepdims=True) - 13.8
    return float(np.abs(got - want)[keep].max())


SETTINGS = {
    "2 views of a 6 s window, 2 local crops, pad zero": LoaderConfig(
        n_views=2, view_window_s=6.0, n_local=2, local_s=1.0),
    "pad min": LoaderConfig(n_views=2, view_window_s=6.0, pad="min"),
    "pad repeat, one view, no window": LoaderConfig(pad="repeat"),
    "16 kHz, 64 mels, 3 s clips in a 4 s window": LoaderConfig(
        n_views=3, view_window_s=4.0, clip_s=3.0, n_frames=320, sample_rate=16000, n_mels=64),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_device_batches_equal_host_batches(corpus, name):
    cfg = SETTINGS[name]
    host, device, made = _pair(corpus, cfg)
    assert "data" not in device and device["wave"].dtype == np.float32
    assert device["wave"].shape == (12, round((cfg.view_window_s or cfg.clip_s) * cfg.sample_rate))
    for k in ("index", "target", "valid", "start_s"):
        np.testing.assert_array_equal(device[k], host[k])
    for k in ("data", "local") if cfg.n_local else ("data",):
        got, want = np.asarray(made[k]), host[k]
        assert got.shape == want.shape and got.dtype == np.float32, (k, got.shape, want.shape)
        assert _rel(got, want) <= 1e-4, (k, _rel(got, want))
        # 5e-4 normalised = 4.4e-3 nats: what the floor-dominated minimum pad = "min" copies
        # into a clip's padding can differ by (elsewhere the difference is below 1e-4).
        assert _max_abs_above_floor(got, want, cfg) <= 5e-4, k
    # Padding is exactly the host's (short recordings and windows past their end).
    pad = host["data"] == 0.0 if cfg.pad == "zero" else None
    if pad is not None:
        assert pad.any() and np.array_equal(np.asarray(made["data"]) == 0.0, pad)


def test_event_crops_equal_the_host(corpus, tmp_path):
    """crop = "events": windows placed to cover one of each row's events (drawn by the seed)."""
    import loader_shards
    import pyarrow as pa

    path = birdjepa.data.resolve_shards(corpus)[0]
    t = pa.ipc.open_stream(path).read_all()
    ev = [[[0.4 + (i % 4), 1.1 + (i % 4)], [0.2, 0.9]] for i in range(t.num_rows)]
    t = t.append_column("detected_events", pa.array(ev, pa.list_(pa.list_(pa.float64()))))
    shard = loader_shards.write(tmp_path / "events.arrow", t)
    cfg = LoaderConfig(n_views=2, view_window_s=6.0, crop="events")
    host, device, made = _pair(shard, cfg)
    np.testing.assert_array_equal(device["start_s"], host["start_s"])
    assert _rel(np.asarray(made["data"]), host["data"]) <= 1e-4


def test_eval_batches_equal_the_host(corpus):
    """Eval mode (centre crops, one view, padding rows at the end of the pass)."""
    cfg = LoaderConfig().for_eval()
    host, device, made = _pair(corpus, cfg, mode="eval", batch_size=5)
    assert _rel(np.asarray(made["data"]), host["data"]) <= 1e-4
    assert _max_abs_above_floor(np.asarray(made["data"]), host["data"], cfg) <= 1e-4
    assert device["crop_frames"].shape == (1, 5)


def test_a_packed_corpus_crosses_as_int16_and_host_features_as_bfloat16(corpus, tmp_path):
    """A corpus packed as 16-bit WAV at the loader's rate: `wave` is int16, exactly the float
    wave times 32768 (nothing rounded), and its features are the float path's. Host features
    asked as bfloat16 are the float32 batch rounded to nearest even."""
    packed = tmp_path / "packed"
    birdjepa.data.pack.pack(birdjepa.data.resolve_shards(corpus), str(packed), codec="wav",
                            sample_rate=32000, progress=False)
    cfg = LoaderConfig(n_views=2, view_window_s=6.0)
    waves = {}
    for path in (packed, corpus):
        with birdjepa.data.Loader(str(path), config=dataclasses.replace(cfg, features="device"),
                                  batch_size=6, seed=1) as ld:
            waves[str(path)] = (next(ld), ld.wave_dtype, ld.stats()["wave_rounded"])
    b16, dtype16, rounded = waves[str(packed)]
    assert (dtype16, b16["wave"].dtype, rounded) == ("int16", np.int16, 0)
    assert waves[str(corpus)][1] == "float32"
    host, device, made = _pair(str(packed), cfg, batch_size=6)
    assert device["wave"].dtype == np.int16
    assert _rel(np.asarray(made["data"]), host["data"]) <= 1e-4
    with birdjepa.data.Loader(corpus, config=cfg, batch_size=6, seed=1,
                              batch_dtype="bfloat16") as ld:
        half = next(ld)
    with birdjepa.data.Loader(corpus, config=cfg, batch_size=6, seed=1) as ld:
        full = next(ld)
    assert half["data"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(half["data"], full["data"].astype(ml_dtypes.bfloat16))


def test_what_device_features_cannot_do_is_refused_by_name():
    with pytest.raises(birdjepa.BadArgumentError, match=r"bad argument features: expected "
                       r"\"host\" with n_views=2 and no view_window_s .*got \"device\""):
        LoaderConfig(features="device", n_views=2).check()
    with pytest.raises(birdjepa.BadArgumentError, match="bad argument features: expected one of "
                       "host, device, got \"gpu\""):
        LoaderConfig(features="gpu").check()
    with pytest.raises(birdjepa.config.ConfigError, match="data.features"):
        birdjepa.config.finalize(tiny.tiny_config(
            "lejepa", data=birdjepa.config.DataConfig(n_views=2, features="device")))


@pytest.mark.heavy
def test_a_run_with_device_features_resumes_bit_for_bit(corpus, tmp_path):
    """Two views of one window with device features: a run stopped at step 3 and run again
    ends bitwise equal (every logged metric, every leaf of the state, the loader state) to the
    run that never stopped; its first steps equal the host-features run's within round-off."""
    path = tmp_path / "tiny.toml"
    text = tiny.tiny_toml(corpus, n_steps=6).replace(
        "n_views = 1", 'n_views = 2\nview_window_s = 6.0\nfeatures = "device"')
    path.write_text(text)

    def cfg(run_dir, **kw):
        c = birdjepa.config.load(path)
        c = dataclasses.replace(c, run_dir=str(run_dir), **kw)
        return birdjepa.runtime.rundir.assign(birdjepa.config.finalize(c))

    birdjepa.train.loop.main(cfg(tmp_path / "ref"))
    calls = iter(range(100))
    birdjepa.train.loop.main(cfg(tmp_path / "split"), should_stop=lambda: next(calls) >= 2)
    assert h.final_state(tmp_path / "split").step == 3
    birdjepa.train.loop.main(cfg(tmp_path / "split"))
    assert h.assert_same_run(tmp_path / "ref", tmp_path / "split") == 0.0
    host = cfg(tmp_path / "host")
    host = dataclasses.replace(host, data=dataclasses.replace(host.data, features="host"))
    birdjepa.train.loop.main(host)
    _, a = h.losses(tmp_path / "ref")
    _, b = h.losses(tmp_path / "host")
    np.testing.assert_allclose(a[:2], b[:2], rtol=1e-4)
