"""LoaderConfig: declared once in Python and once in Rust, kept in step; the debug transform is
test-only."""

import dataclasses
import json

import loader_shards
import numpy as np
import pyarrow as pa
import pytest

import birdjepa
import birdjepa._rs
import birdjepa.data
import birdjepa.data.config as data_config
from birdjepa.data import LoaderConfig


def test_python_and_rust_declare_the_same_settings_and_defaults():
    """Settings plus run arguments on the Python side are the Rust fields, with the same
    defaults (n_workers: "auto" is resolved before Rust sees it; batch_size is required)."""
    rust = json.loads(birdjepa._rs.loader_config_defaults())
    fields = {f.name: f.default for f in dataclasses.fields(LoaderConfig)}
    python = fields | data_config.RUN_ARGS
    assert set(python) == set(rust)
    assert not set(fields) & set(data_config.RUN_ARGS)
    for name, default in python.items():
        if name in ("n_workers", "batch_size"):
            continue
        if name == "local_frames":  # None: derived from local_s; Rust's unset is 0
            assert default is None and rust[name] == 0
        elif name == "resampler":  # None: resolved in Python (a state's, else the default)
            assert default is None and rust[name] == data_config.DEFAULT_RESAMPLER
        elif isinstance(default, float):
            assert np.float32(default) == np.float32(rust[name]), name
        else:
            assert default == rust[name], name
    assert data_config.RESAMPLERS == tuple(birdjepa._rs.RESAMPLERS)
    assert data_config.DEFAULT_RESAMPLER == birdjepa._rs.DEFAULT_RESAMPLER == "soxr-hq"
    assert data_config.LEGACY_RESAMPLER == birdjepa._rs.LEGACY_RESAMPLER == "rubato-bh2-1024"


BAD = [
    dict(n_views=0), dict(n_frames=0), dict(n_mels=0), dict(block_size=0),
    dict(shuffle_window=0), dict(prefetch=0), dict(failure_window=0), dict(sample_rate=0),
    dict(max_failure_fraction=1.5), dict(std=0.0), dict(std=-1.5), dict(clip_s=0.0),
    dict(view_window_s=4.5), dict(view_window_s=4000.0), dict(n_local=2),
    dict(n_local=2, view_window_s=6.0, local_s=5.5),
    dict(n_local=2, view_window_s=6.0, local_s=0.0),
    dict(n_local=2, view_window_s=6.0, local_frames=0),
    dict(n_local=1, view_window_s=6.0, local_s=0.5, local_frames=192),  # 48 real frames
    dict(max_audio_mb=0.0), dict(max_audio_mb=-5.0),
    dict(crop="event"), dict(segment="center"), dict(resampler="soxr"),
]


@pytest.mark.parametrize("bad", BAD, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()))
def test_python_and_rust_reject_the_same_settings_in_the_same_words(tmp_path, bad):
    """Each check is made once in Python (LoaderConfig.check) and again by Rust at the
    boundary: both refuse the value, in the same message."""
    with pytest.raises(birdjepa.BadArgumentError) as py:
        LoaderConfig(**bad).check()
    path = loader_shards.write(str(tmp_path / "s.arrow"), loader_shards.table(range(8)))
    ds = birdjepa._rs.Dataset([path])
    settings = dataclasses.replace(LoaderConfig(n_workers=1), **bad)
    raw = data_config.rust_json(settings, {**data_config.RUN_ARGS, "batch_size": 4})
    with pytest.raises(birdjepa.BadArgumentError) as rs:
        birdjepa._rs.Loader(ds, raw, start_step=0)
    assert str(py.value) == str(rs.value)


def test_training_reports_the_loader_checks_under_data():
    import birdjepa.config

    cfg = birdjepa.config.Config(n_classes=3, data=birdjepa.config.DataConfig(view_window_s=4.5))
    with pytest.raises(birdjepa.config.ConfigError) as e:
        birdjepa.config.finalize(cfg)
    assert str(e.value) == ("data.view_window_s: expected 0 (one decode per view) or seconds in "
                            "[clip_s=5, 3600], got 4.5")


def test_the_data_section_is_the_loader_config_plus_training_keys():
    import birdjepa.config

    loader = {f.name for f in dataclasses.fields(LoaderConfig)}
    data = {f.name for f in dataclasses.fields(birdjepa.config.DataConfig)}
    assert issubclass(birdjepa.config.DataConfig, LoaderConfig)
    own = set(vars(birdjepa.config.DataConfig).get("__annotations__", {}))
    assert not own & loader, f"redeclared in DataConfig: {sorted(own & loader)}"
    assert data - loader == {"train_shards", "eval_shards", "eval_batch_size", "eval_label_column"}


def test_shaping_settings_are_the_config_keys():
    speed = {f.name for f in dataclasses.fields(LoaderConfig)} - set(LoaderConfig().shaping_values())
    # Where the audio files are (audio_root, path_map) does not shape the stream: a cache moved
    # to scratch resumes. The settings added since (at their defaults) are left out; resampler
    # is left out at the legacy filter (what every state saved before it used), and a new
    # stream's default filter is not that one.
    assert LoaderConfig().shaping_values()["resampler"] == "soxr-hq"
    legacy = LoaderConfig(resampler="rubato-bh2-1024").shaping_values()
    assert "resampler" not in legacy
    assert speed | {"resampler"} == {f.name for f in dataclasses.fields(LoaderConfig)} - set(legacy)
    assert speed == {"n_workers", "prefetch", "max_failure_fraction", "failure_window",
                     "audio_root", "path_map", "max_audio_mb", "view_window_s", "n_local", "local_s",
                     "local_frames", "crop", "events_column", "segment", "segment_start_column",
                     "segment_end_column", "pad"}
    local = LoaderConfig(view_window_s=6.0, n_local=2).shaping_values()
    assert {"view_window_s", "n_local", "local_s", "local_frames"} <= set(local)


def test_values_are_normalised_and_unknown_settings_rejected():
    a = LoaderConfig(n_views=np.int64(2), clip_s=5)
    assert type(a.n_views) is int and type(a.clip_s) is float and a.clip_s == 5.0
    assert a == LoaderConfig(n_views=2, clip_s=5.0)
    with pytest.raises(TypeError, match="batch_sise"):
        birdjepa.data.Loader("/nonexistent", batch_size=8, batch_sise=8)


def test_rust_rejects_unknown_settings_and_config_keys_are_unchanged(tmp_path):
    path = loader_shards.write(str(tmp_path / "s.arrow"), loader_shards.table(range(8)))
    ds = birdjepa._rs.Dataset([path])
    with pytest.raises(birdjepa.BadArgumentError, match="config.*batch_sise"):
        birdjepa._rs.Loader(ds, json.dumps({"batch_sise": 8}), start_step=0)
    # The keys of Loader.config (hence state dicts and fingerprints) are those of before, at
    # the defaults of settings added since (view_window_s) and with the filter of before.
    old = {"mode", "seed", "batch_size", "n_views", "n_frames", "n_mels", "clip_s",
           "sample_rate", "mean", "std", "block_size", "shuffle_window", "max_replacements",
           "transform", "audio_column", "label_column", "n_shards", "n_rows", "shards_hash"}
    with birdjepa.data._DebugLoader([path], batch_size=4, transform="debug", clip_s=0.1,
                                     n_frames=8, resampler="rubato-bh2-1024") as loader:
        assert set(loader.config) == old
        assert next(iter(loader))["data"].shape == (4, 8, 128)  # debug: 8 frames for 0.1 s
    # A new stream names its (new) filter: a state saved before cannot be mistaken for it.
    with birdjepa.data._DebugLoader([path], batch_size=4, transform="debug", clip_s=0.1,
                                     n_frames=8) as loader:
        assert set(loader.config) == old | {"resampler"}
        assert loader.config["resampler"] == "soxr-hq"


def test_debug_transform_is_test_only(tmp_path):
    with pytest.raises(birdjepa.BadArgumentError, match="test-only"):
        birdjepa.data.Loader(str(tmp_path), batch_size=4, transform="debug")
    with pytest.raises(birdjepa.BadArgumentError, match="test-only"):
        birdjepa.data.Loader(str(tmp_path), batch_size=4, config=LoaderConfig(),
                             transform="debug")


def test_the_loader_api_applies_the_configs_bounds(tmp_path):
    """Issue 30 item 14: `Loader(..., n_classes=2**40)` aborted the process (rc 134, a failed
    35 TB allocation), and a local crop zero-padded at the API level (48 of 192 frames real)
    where a training config refuses it."""
    path = loader_shards.write(str(tmp_path / "s.arrow"), loader_shards.table(range(8)))
    kw = dict(batch_size=4, transform="debug", n_workers=1, clip_s=0.1, n_frames=8)
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument n_classes: expected at "
                       r"most \d+ \(the multi-hot targets of 5 batches of 4 rows in flight "
                       r"take 81920\.000 GiB at this value; half this machine's memory is "
                       r"[\d.]+ GiB\), got 1099511627776$"):
        birdjepa.data._DebugLoader([path], n_classes=2**40, **kw)
    multi = loader_shards.write(str(tmp_path / "m.arrow"), loader_shards.table(
        range(8), labels=lambda i: [i % 3], label_type=pa.list_(pa.int64())))
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument n_classes: expected at "
                       r"most \d+ \(.*; half this machine's memory is .* GiB\), got "
                       r"1099511627776$"):
        birdjepa.data._DebugLoader([multi], n_classes=2**40, **kw)
    with birdjepa.data._DebugLoader([multi], n_classes=3, **kw) as loader:  # a sane one runs
        assert next(loader)["target"].shape == (4, 3)
    local = dict(view_window_s=6.0, clip_s=5.0, n_frames=64, n_local=1, local_s=0.5)
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument local_frames: expected "
                       r"at most 48 \(the frames of a local_s=0\.5 s crop; more would be "
                       r"zero-padding; leave it unset to derive it\), got 192$"):
        birdjepa.data._DebugLoader([path], batch_size=4, transform="debug", n_workers=1,
                                   local_frames=192, **local)
    with birdjepa.data._DebugLoader([path], batch_size=4, transform="debug", n_workers=1,
                                    **local) as loader:  # unset: derived, never padded
        assert next(loader)["local"].shape == (1, 4, 48, 128)
