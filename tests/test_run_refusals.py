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


def _train_cli(monkeypatch, cfg) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of birdjepa.train.cli.main (its error handling) on `cfg`
    and tiny loaders."""
    import contextlib
    import functools
    import io

    import birdjepa.runtime.preemption
    import birdjepa.train.cli

    monkeypatch.setattr(config, "cli", lambda argv, prog: cfg)
    monkeypatch.setattr(birdjepa.runtime.preemption.Preemption, "install",
                        lambda self, sig, **kw: None)  # pytest's own handlers stay
    monkeypatch.setattr(birdjepa.train.loop, "main", functools.partial(
        birdjepa.train.loop.main, loaders=tiny.tiny_loaders))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = birdjepa.train.cli.main([])
    return rc, out.getvalue(), err.getvalue()


def test_every_checkpoint_corrupt_is_one_line_and_the_next_start_does_not_begin_at_step_0(
        tmp_path, monkeypatch):
    """Item 9: main ended in a traceback, and the next start silently trained from step 0."""
    import test_checkpoint_integrity as integrity

    run_dir = tmp_path / "run"
    cfg = tiny.tiny_config(n_steps=2, ckpt_every=1, ckpt_keep=2, run_dir=str(run_dir))
    birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    for step in ("1", "2"):
        integrity.bitflip(run_dir / "checkpoints" / step)
    longer = dataclasses.replace(cfg, n_steps=4, resume="extend")
    rc, _, err = _train_cli(monkeypatch, longer)
    err = err.strip().splitlines()
    assert rc == 1, err
    assert len(err) == 1 and err[0].startswith("error: no intact checkpoint in "), err
    assert "use --resume=never to train from step 0" in err[0]
    assert sorted(p.name.split(".")[0] for p in (run_dir / "checkpoints").iterdir()
                  if ".corrupt-" in p.name) == ["1", "2"]  # set aside, never deleted
    rows = (run_dir / "metrics.jsonl").read_text()
    rc, _, err = _train_cli(monkeypatch, longer)  # again: refused, not a fresh start
    err = err.strip().splitlines()
    assert rc == 1, err
    assert len(err) == 1 and "expected an intact step to resume from" in err[0], err
    assert "every step was corrupt and set aside (1.corrupt-" in err[0]
    assert (run_dir / "metrics.jsonl").read_text() == rows  # nothing was trained or truncated
    rc, out, err = _train_cli(monkeypatch, dataclasses.replace(longer, resume="never"))
    assert rc == 0, err
    assert "resume=never: moved existing checkpoints to" in out and "resumed" not in out
    assert rundir.read_complete(run_dir)["steps"] == 4
