"""LoaderConfig: declared twice (Python: names, defaults, docstrings; Rust: the worker's types),
checked once, by Rust (issue 39 item 2): each bad value is one message naming the setting, the
expected and the actual value, whoever asks (LoaderConfig.check, birdjepa.config, the Rust
Loader); the debug transform is test-only."""

import ast
import dataclasses
import inspect
import json

import loader_shards
import numpy as np
import pyarrow as pa
import pytest

import birdjepa
import birdjepa._rs
import birdjepa.config
import birdjepa.data
import birdjepa.data.loader_config
from birdjepa.data import LoaderConfig


def test_python_and_rust_declare_the_same_settings_and_defaults():
    """Settings plus run arguments on the Python side are the Rust fields, with the same
    defaults (n_workers: "auto" is resolved before Rust sees it; batch_size is required)."""
    rust = json.loads(birdjepa._rs.loader_config_defaults())
    fields = {f.name: f.default for f in dataclasses.fields(LoaderConfig)}
    python = fields | birdjepa.data.loader_config.RUN_ARGS
    assert set(python) == set(rust)
    assert not set(fields) & set(birdjepa.data.loader_config.RUN_ARGS)
    for name, default in python.items():
        if name in ("n_workers", "batch_size"):
            continue
        if name == "resampler":  # None: resolved in Python (a state's, else the default)
            assert default is None and rust[name] == birdjepa.data.loader_config.DEFAULT_RESAMPLER
        elif isinstance(default, float):
            assert np.float32(default) == np.float32(rust[name]), name
        else:
            assert default == rust[name], name  # local_frames: None (derived) on both sides
    assert birdjepa.data.loader_config.RESAMPLERS == tuple(birdjepa._rs.RESAMPLERS)
    assert birdjepa.data.loader_config.DEFAULT_RESAMPLER == birdjepa._rs.DEFAULT_RESAMPLER == "soxr-hq"
    assert birdjepa.data.loader_config.LEGACY_RESAMPLER == birdjepa._rs.LEGACY_RESAMPLER == "rubato-bh2-1024"
    assert birdjepa.data.loader_config.MAX_WINDOW_S == birdjepa._rs.MAX_WINDOW_S == 3600.0


LOCAL = dict(n_local=1, view_window_s=6.0)
BAD = [  # (settings, the one message)
    (dict(n_views=0), "n_views: expected >= 1, got 0"),
    (dict(n_frames=0), "n_frames: expected >= 1, got 0"),
    (dict(n_mels=0), "n_mels: expected >= 1, got 0"),
    (dict(block_size=0), "block_size: expected >= 1, got 0"),
    (dict(shuffle_window=0), "shuffle_window: expected >= 1, got 0"),
    (dict(prefetch=0), "prefetch: expected >= 1, got 0"),
    (dict(failure_window=0), "failure_window: expected >= 1, got 0"),
    (dict(sample_rate=0), "sample_rate: expected >= 1, got 0"),
    (dict(n_workers=0), "n_workers: expected >= 1, got 0"),
    (dict(max_failure_fraction=1.5), "max_failure_fraction: expected a number in [0, 1], got 1.5"),
    (dict(std=0.0), "std: expected a finite value > 0, got 0"),
    (dict(std=-1.5), "std: expected a finite value > 0, got -1.5"),
    (dict(clip_s=0.0), "clip_s: expected seconds >= 0.025 (one 25 ms frame), got 0"),
    # Issue 47 item 13: a clip shorter than one frame is all padding marked valid.
    (dict(clip_s=0.01), "clip_s: expected seconds >= 0.025 (one 25 ms frame), got 0.01"),
    (dict(LOCAL, local_s=0.02), "local_s: expected seconds in [0.025, clip_s=5] (at least one "
     "25 ms frame) with n_local > 0, got 0.02"),
    (dict(view_window_s=4.5),
     "view_window_s: expected 0 (one decode per view) or seconds in [clip_s=5, 3600], got 4.5"),
    (dict(view_window_s=4000.0), "view_window_s: expected 0 (one decode per view) or seconds "
     "in [clip_s=5, 3600], got 4000"),
    (dict(n_local=2), "view_window_s: expected seconds in [clip_s=5, 3600] with n_local=2 "
     "(local crops are cut from the one decoded window), got 0"),
    (dict(LOCAL, local_s=5.5), "local_s: expected seconds in [0.025, clip_s=5] (at least one "
     "25 ms frame) with n_local > 0, got 5.5"),
    (dict(LOCAL, local_s=0.0), "local_s: expected seconds in [0.025, clip_s=5] (at least one "
     "25 ms frame) with n_local > 0, got 0"),
    (dict(LOCAL, local_frames=0), "local_frames: expected >= 1, got 0"),
    (dict(LOCAL, local_s=0.5, local_frames=60), "local_frames: expected at most 48 (the frames "
     "of a local_s=0.5 s crop; more would be zero-padding; leave it unset to derive it), got 60"),
    (dict(max_audio_mb=0.0), "max_audio_mb: expected a finite number of MB > 0, got 0"),
    (dict(max_audio_mb=-5.0), "max_audio_mb: expected a finite number of MB > 0, got -5"),
    (dict(crop="event"), 'crop: expected one of random, events, got "event"'),
    (dict(segment="center"), 'segment: expected one of centre, columns, got "center"'),
    (dict(pad="edge"), 'pad: expected one of zero, min, repeat, got "edge"'),
    (dict(features="gpu"), 'features: expected one of host, device, got "gpu"'),
    (dict(features="device", n_views=2), 'features: expected "host" with n_views=2 and no '
     'view_window_s (device features take one decoded window per sample; set view_window_s to '
     'cut the views from it), got "device"'),
    # Types: checked as Rust reads the JSON, named the same way.
    (dict(n_views="3"), 'n_views: expected an int >= 0, got "3"'),
    (dict(n_views=-1), "n_views: expected an int >= 0, got -1"),
    (dict(n_views=2.5), "n_views: expected an int >= 0, got 2.5"),
    (dict(n_local=-1), "n_local: expected an int >= 0, got -1"),
    (dict(clip_s="5"), 'clip_s: expected a number, got "5"'),
    (dict(label_column=3), "label_column: expected a string, got 3"),
    (dict(path_map={"/a": 1}), 'path_map["/a"]: expected a string, got 1'),
    (dict(path_map=["/a"]), 'path_map: expected a table of strings, got ["/a"]'),
]
IDS = [",".join(f"{k}={v}" for k, v in bad.items()) for bad, _ in BAD]


def _rust_loader_error(tmp_path, settings: LoaderConfig) -> str:
    path = loader_shards.write(str(tmp_path / "s.arrow"), loader_shards.table(range(8)))
    raw = birdjepa.data.loader_config.rust_json(settings, {**birdjepa.data.loader_config.RUN_ARGS, "batch_size": 4})
    with pytest.raises(birdjepa.BadArgumentError) as e:
        birdjepa._rs.Loader(birdjepa._rs.Dataset([path]), raw, start_step=0)
    return str(e.value)


@pytest.mark.parametrize("bad,message", BAD, ids=IDS)
def test_each_bad_setting_is_one_message_from_its_one_check(tmp_path, bad, message):
    """The rule is Rust's (check_loader_settings); LoaderConfig.check, birdjepa.config (under
    `data.`) and the Rust Loader at the boundary all give its one message."""
    with pytest.raises(birdjepa.BadArgumentError) as rust:
        birdjepa._rs.check_loader_settings(json.dumps(bad))
    assert str(rust.value) == f"bad argument {message}"
    settings = {"n_workers": 1} | bad
    with pytest.raises(birdjepa.BadArgumentError) as py:
        LoaderConfig(**settings).check()
    assert str(py.value) == f"bad argument {message}"
    assert _rust_loader_error(tmp_path, LoaderConfig(**settings)) == str(py.value)
    cfg = birdjepa.config.Config(n_classes=3, data=birdjepa.config.DataConfig(**settings))
    if "local_s" not in bad:  # a training config derives local_frames from it first
        with pytest.raises(birdjepa.config.ConfigError) as train:
            birdjepa.config.finalize(cfg)
        assert str(train.value) == f"data.{message}"


def test_types_and_unknown_names_are_named(tmp_path):
    """A value of the wrong type reaching Rust (a Loader built from JSON, a run argument) names
    its setting and the JSON it got; an unknown name is named too."""
    path = loader_shards.write(str(tmp_path / "s.arrow"), loader_shards.table(range(8)))
    ds = birdjepa._rs.Dataset([path])
    for raw, message in [
        ({"batch_sise": 8}, "batch_sise: expected a setting of birdjepa.data.LoaderConfig or a "
         "Loader run argument (one of mode, batch_size, "),
        ({"batch_size": -8}, "batch_size: expected an int >= 0, got -8"),
        ({"mode": "test"}, 'mode: expected "train" or "eval", got "test"'),
        ({"seed": 1.5}, "seed: expected an int >= 0, got 1.5"),
    ]:
        with pytest.raises(birdjepa.BadArgumentError) as e:
            birdjepa._rs.Loader(ds, json.dumps(raw), start_step=0)
        assert str(e.value).startswith(f"bad argument {message}"), str(e.value)
    with pytest.raises(birdjepa.BadArgumentError, match="^bad argument mode: expected "
                       '"train" or "eval", got "test"$'):
        birdjepa.data._DebugLoader([path], batch_size=4, mode="test", transform="debug")
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument batch_size: expected an "
                       r"int >= 0, got 8\.5$"):
        birdjepa.data._DebugLoader([path], batch_size=8.5, transform="debug")


def test_what_cannot_travel_as_json_is_named_once_in_python():
    """NaN and inf have no JSON: the one check Python keeps (the JSON boundary, rust_json)."""
    for name in ("std", "clip_s", "mean", "view_window_s"):
        with pytest.raises(birdjepa.BadArgumentError, match=rf"^bad argument {name}: expected a "
                           r"finite number, .*got (nan|inf)$"):
            LoaderConfig(**{name: float("nan") if name != "clip_s" else float("inf")}).check()
    with pytest.raises(birdjepa.BadArgumentError, match=r"^bad argument n_workers: expected "
                       r">= 1 or 'auto', got 'many'$"):
        LoaderConfig(n_workers="many").check()


def test_rust_derives_the_local_frames_and_counts_kaldi_frames():
    assert [birdjepa._rs.kaldi_frames(s) for s in (5.0, 2.0, 0.5, 0.0)] == [498, 198, 48, 1]
    local = LoaderConfig(view_window_s=6.0, n_local=1, n_frames=64, local_s=0.5)
    assert local.derived()["local_frames"] == 48  # unset: the crop's frames ...
    assert dataclasses.replace(local, local_s=2.0).derived()["local_frames"] == 64  # <= n_frames
    assert dataclasses.replace(local, local_frames=16).derived()["local_frames"] == 16
    assert local.shaping_values()["local_frames"] == 48


def test_the_python_declaration_holds_no_rule_that_rust_checks():
    """data/loader_config.py declares the settings; the only rules it keeps are Python's own: "auto"
    workers (resolve_workers) and what JSON can carry (rust_json). Everything else that can be
    wrong with a setting is raised by Rust."""
    source = inspect.getsource(birdjepa.data.loader_config)
    raising = sorted({fn.name for fn in ast.walk(ast.parse(source))
                      if isinstance(fn, ast.FunctionDef)
                      and any(isinstance(n, ast.Raise) for n in ast.walk(fn))})
    assert raising == ["resolve_workers", "rust_json"]
    for gone in ("def fmt", "bad_argument(", "def kaldi_frames", "_check_window",
                 "local_frames_or_derived", "isinstance(self.path_map"):
        assert gone not in source, gone
    check = inspect.getsource(LoaderConfig.check) + inspect.getsource(LoaderConfig.derived)
    assert "check_loader_settings" in check
    assert len(inspect.getsource(LoaderConfig).splitlines()) < 170


def test_training_reports_the_loader_checks_under_data():
    cfg = birdjepa.config.Config(n_classes=3, data=birdjepa.config.DataConfig(view_window_s=4.5))
    with pytest.raises(birdjepa.config.ConfigError) as e:
        birdjepa.config.finalize(cfg)
    assert str(e.value) == ("data.view_window_s: expected 0 (one decode per view) or seconds in "
                            "[clip_s=5, 3600], got 4.5")
    source = inspect.getsource(birdjepa.config._validate_data)
    assert "zero-padding" not in source and "kaldi_frames" not in source  # Rust's rule, once


def test_the_data_section_is_the_loader_config_plus_training_keys():
    loader = {f.name for f in dataclasses.fields(LoaderConfig)}
    data = {f.name for f in dataclasses.fields(birdjepa.config.DataConfig)}
    assert issubclass(birdjepa.config.DataConfig, LoaderConfig)
    own = set(vars(birdjepa.config.DataConfig).get("__annotations__", {}))
    assert not own & loader, f"redeclared in DataConfig: {sorted(own & loader)}"
    assert data - loader == {"train_shards", "eval_shards", "eval_batch_size", "eval_label_column"}


def test_shaping_settings_are_the_config_keys():
    speed = {f.name for f in dataclasses.fields(LoaderConfig)} - set(LoaderConfig().shaping_values())
    # Where the audio files are (audio_root, path_map) does not shape the stream: a cache moved
    # to scratch resumes; nor does where the features are made (features: host or device). The settings added since (at their defaults) are left out; resampler
    # is left out at the legacy filter (what every state saved before it used), and a new
    # stream's default filter is not that one.
    assert LoaderConfig().shaping_values()["resampler"] == "soxr-hq"
    legacy = LoaderConfig(resampler="rubato-bh2-1024").shaping_values()
    assert "resampler" not in legacy
    assert speed | {"resampler"} == {f.name for f in dataclasses.fields(LoaderConfig)} - set(legacy)
    assert speed == {"n_workers", "prefetch", "max_failure_fraction", "failure_window",
                     "audio_root", "path_map", "max_audio_mb", "view_window_s", "n_local", "local_s",
                     "local_frames", "crop", "events_column", "segment", "segment_start_column",
                     "segment_end_column", "pad", "features"}
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
    with pytest.raises(birdjepa.BadArgumentError, match="^bad argument batch_sise: expected a "
                       "setting of birdjepa.data.LoaderConfig"):
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


@pytest.mark.parametrize(("settings", "name"), [(dict(n_frames=10**9), "n_frames"),
                                                 (dict(n_views=10**6), "n_views"),
                                                 (dict(prefetch=10**9, n_classes=0), "prefetch")])
def test_batches_that_cannot_fit_in_memory_are_refused_naming_the_setting(tmp_path, settings,
                                                                          name):
    """Issue 47 item 16: such settings passed the validator and the first batch aborted the
    process (a Rust allocation failure, SIGABRT): a subprocess, so an abort is seen as one."""
    import subprocess
    import sys

    path = loader_shards.write(str(tmp_path / "s.arrow"), loader_shards.table(range(8)))
    code = (f"import birdjepa.data\nbirdjepa.data.Loader([{path!r}], batch_size=4, "
            f"n_workers=1, **{settings!r})")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "Traceback" in r.stderr, (r.returncode, r.stderr[-2000:])
    last = r.stderr.strip().splitlines()[-1]
    assert f"BadArgumentError: bad argument {name}: expected at most " in last, last
