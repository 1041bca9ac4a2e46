"""Multi-crop LeJEPA end to end: local crops from the loader's one decoded window reach the
objective on a shorter token grid, a split run resumes bit for bit, and bad settings are
ConfigErrors naming the key."""

import dataclasses

import pytest
import resume_helpers as h
import tiny

import birdjepa.config
import birdjepa.model
import birdjepa.train.flops
import birdjepa.train.loop


@pytest.fixture(scope="module")
def corpus(demo_corpus):
    return demo_corpus(**h.CORPUS)["out_dir"]


def _cfg(corpus, run_dir, **data):
    cfg = tiny.tiny_config("lejepa", n_steps=4, ckpt_every=1, run_dir=str(run_dir),
                           n_classes=12)
    data = dict(n_workers=1, n_frames=64, n_mels=64, view_window_s=8.0, n_local=2, local_s=1.0,
                local_frames=32) | data
    d = dataclasses.replace(cfg.data, train_shards=str(corpus), eval_shards=str(corpus), **data)
    return dataclasses.replace(cfg, data=d,
                               model=dataclasses.replace(cfg.model, patch=(16, 16)))


@pytest.mark.heavy
def test_multi_crop_trains_and_a_split_run_is_bitwise_equal(corpus, tmp_path):
    ref = birdjepa.train.loop.main(_cfg(corpus, tmp_path / "ref"))
    assert ref["steps"] == 4 and ref["nonfinite_total"] == 0
    calls = []

    def stop_after_two():
        calls.append(1)
        return len(calls) >= 2

    first = birdjepa.train.loop.main(_cfg(corpus, tmp_path / "split"),
                                     should_stop=stop_after_two)
    assert first["preempted"] and first["steps"] < 4
    birdjepa.train.loop.main(_cfg(corpus, tmp_path / "split"))
    assert h.assert_same_run(tmp_path / "ref", tmp_path / "split") == 0.0
    # The local crops change the run (they are in the loss) ...
    plain = birdjepa.train.loop.main(_cfg(corpus, tmp_path / "plain", n_local=0))
    assert h.metrics(tmp_path / "plain")[4]["loss"] != h.metrics(tmp_path / "ref")[4]["loss"]
    assert plain["steps"] == 4
    # ... and their FLOPs are counted: 2 crops of 2 x 4 tokens beside 2 views of 4 x 4.
    with_local = birdjepa.train.flops.flops_per_update(tiny.finalize(_cfg(corpus, tmp_path)))
    without = birdjepa.train.flops.flops_per_update(
        tiny.finalize(_cfg(corpus, tmp_path, n_local=0)))
    assert 1.2 < with_local / without < 1.6, with_local / without


@pytest.mark.parametrize("change,key,expected", [
    (dict(view_window_s=0.0), "data.view_window_s", "with n_local=2"),
    (dict(local_s=6.0), "data.local_s", r"seconds in \[0.025, clip_s=5\]"),
    (dict(local_frames=24), "data.local_frames", r"a multiple of model.patch\[0\]=16"),
    (dict(local_frames=80), "data.local_frames", r"at most n_frames=64 \(a local view is never longer than a view\)"),
    (dict(local_frames=128), "data.local_frames", r"at most 98 \(the frames of a local_s=1 s "
     r"crop; more would be zero-padding"),
])
def test_bad_multi_crop_settings_name_the_key(corpus, tmp_path, change, key, expected):
    with pytest.raises(birdjepa.config.ConfigError, match=f"{key}: expected .*{expected}"):
        birdjepa.config.validate(birdjepa.config.finalize(_cfg(corpus, tmp_path, **change)))


def test_only_lejepa_takes_local_crops(corpus, tmp_path):
    cfg = _cfg(corpus, tmp_path)
    cfg = dataclasses.replace(cfg, objective=dataclasses.replace(cfg.objective,
                                                                 name="supervised"))
    with pytest.raises(birdjepa.config.ConfigError,
                       match="data.n_local: expected 0 for objective 'supervised'"):
        birdjepa.config.validate(birdjepa.config.finalize(cfg))
