"""Issue 30 items 1 and 9: a start never silently ignores the config or the checkpoints it was
asked to continue. A finished run refuses a config that shapes it differently (naming the keys),
run ids are 64 bits, and a run whose every checkpoint is corrupt stops in one line and does not
quietly start over from step 0."""

import dataclasses
import os
import pathlib
import re

import pytest
import tiny

import birdjepa.config as config
import birdjepa.runtime.rundir as rundir
import birdjepa.train.loop


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> pathlib.Path:
    """A COMPLETE 2-step tiny run."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    cfg = tiny.tiny_config(n_steps=2, run_dir=str(run_dir))
    birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    assert rundir.is_complete(run_dir)
    return run_dir


def _changed(cfg, key: str):
    if key == "model.width":
        return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, width=64))
    if key == "seed":
        return dataclasses.replace(cfg, seed=5)
    if key == "data.crop":
        return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, crop="events"))
    return dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=0.5))


@pytest.mark.parametrize("key", ["model.width", "seed", "data.crop", "optim.lr"])
def test_a_finished_run_refuses_a_config_that_shapes_it_differently(finished, key):
    """Item 1: main printed "already complete; nothing to do" and exited 0 for each of these."""
    cfg = _changed(tiny.tiny_config(n_steps=2, run_dir=str(finished)), key)
    before = (finished / "config.toml").read_text()
    with pytest.raises(config.ConfigError, match=r"holds a finished run with a different "
                       r"config.*" + re.escape(key) + ": checkpoint has"):
        birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    assert (finished / "config.toml").read_text() == before and rundir.is_complete(finished)


def test_a_finished_run_with_its_own_config_is_still_nothing_to_do(finished, capsys):
    cfg = tiny.tiny_config(n_steps=2, run_dir=str(finished), log_every=5)  # not shaping
    out = birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    assert out["already_complete"] and "nothing to do" in capsys.readouterr().out


def test_run_ids_have_64_bits_and_old_40_bit_run_directories_are_still_found(tmp_path,
                                                                             monkeypatch):
    """Item 1: seeds 240427 and 417092 of one config shared the 40-bit id run-0c2bbdb93b."""
    monkeypatch.chdir(tmp_path)
    a = tiny.tiny_config(run_id="", seed=240427)
    b = dataclasses.replace(a, seed=417092)
    ida, idb = rundir.default_run_id(a), rundir.default_run_id(b)
    assert len(ida) == len(idb) == len("run-") + 16 and ida != idb
    int(ida.removeprefix("run-"), 16)  # 16 hex digits: 64 bits
    assert rundir.assign(a).run_dir == f"runs/{ida}"  # nothing there yet: the new name
    old = tmp_path / "runs" / ida[:14]
    old.mkdir(parents=True)
    rundir.keep_run_id(old, ida[:14])
    found = rundir.assign(a)
    assert (found.run_dir, found.run_id) == (f"runs/{ida[:14]}", ida[:14])
    assert os.path.samefile(found.run_dir, old)
