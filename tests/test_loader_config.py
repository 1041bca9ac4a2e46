"""LoaderConfig: declared once in Python and once in Rust, kept in step; the debug transform is
test-only."""

import dataclasses
import json

import loader_shards
import numpy as np
import pytest

import birdjepa
import birdjepa._rs
import birdjepa.data
from birdjepa.data import LoaderConfig


def test_python_and_rust_declare_the_same_settings_and_defaults():
    rust = json.loads(birdjepa._rs.loader_config_defaults())
    fields = {f.name: f for f in dataclasses.fields(LoaderConfig)}
    assert set(fields) == set(rust)
    for name, f in fields.items():
        if f.default is dataclasses.MISSING:
            assert name == "batch_size"  # required in Python
            continue
        want = rust[name]
        if isinstance(f.default, float):
            assert np.float32(f.default) == np.float32(want), name
        else:
            assert f.default == want, name


def test_shaping_settings_are_the_config_keys():
    speed = {f.name for f in dataclasses.fields(LoaderConfig)} - set(LoaderConfig.shaping())
    assert speed == {"n_workers", "process_index", "process_count", "prefetch", "debug_delay_s",
                     "max_failure_fraction", "failure_window"}


def test_values_are_normalised_and_unknown_settings_rejected():
    a = LoaderConfig(batch_size=np.int64(8), clip_s=5, seed=np.int32(3))
    assert type(a.batch_size) is int and type(a.clip_s) is float and a.clip_s == 5.0
    assert a == LoaderConfig(batch_size=8, clip_s=5.0, seed=3)
    with pytest.raises(TypeError, match="batch_sise"):
        birdjepa.data.Loader("/nonexistent", batch_sise=8)


def test_rust_rejects_unknown_settings_and_config_keys_are_unchanged(tmp_path):
    path = loader_shards.write(str(tmp_path / "s.arrow"), loader_shards.table(range(8)))
    ds = birdjepa._rs.Dataset([path])
    with pytest.raises(birdjepa.BadArgumentError, match="config.*batch_sise"):
        birdjepa._rs.Loader(ds, json.dumps({"batch_sise": 8}), start_step=0)
    # The keys of Loader.config (hence state dicts and fingerprints) are those of before, at
    # the defaults of settings added since (view_window_s).
    with birdjepa.data._DebugLoader([path], batch_size=4, transform="debug", clip_s=0.1,
                                     n_frames=8) as loader:
        assert set(loader.config) == {
            "mode", "seed", "batch_size", "n_views", "n_frames", "n_mels", "clip_s",
            "sample_rate", "mean", "std", "block_size", "shuffle_window", "max_replacements",
            "transform", "audio_column", "label_column", "n_shards", "n_rows", "shards_hash",
        }
        assert next(iter(loader))["data"].shape == (4, 8, 128)  # debug: 8 frames for 0.1 s


def test_debug_transform_is_test_only(tmp_path):
    with pytest.raises(birdjepa.BadArgumentError, match="test-only"):
        birdjepa.data.Loader(str(tmp_path), batch_size=4, transform="debug")
    with pytest.raises(birdjepa.BadArgumentError, match="test-only"):
        birdjepa.data.Loader(str(tmp_path), config=LoaderConfig(batch_size=4, transform="debug"))
