"""Issue 30 items 1 and 9: a start never silently ignores the config or the checkpoints it was
asked to continue. A finished run refuses a config that shapes it differently (naming the keys),
run ids are 64 bits, and a run whose every checkpoint is corrupt stops in one line and does not
quietly start over from step 0."""

import dataclasses
import os
import pathlib
import re
import sys

import pytest
import tiny

import birdjepa.config as config
import birdjepa.config.command_line
import birdjepa.runtime.rundir as rundir
import birdjepa.train.loop
import birdjepa.train.run


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


def _train_cli(monkeypatch, cfg, loaders=tiny.tiny_loaders) -> tuple[int, str, str]:
    """(exit status, what it printed to stdout, to stderr) of birdjepa.pretrain.main (its error
    handling and exit status) on `cfg` and tiny loaders. Its print calls are recorded (pytest's
    own capture of stderr broke under this in-process CLI call)."""
    import functools

    import birdjepa.pretrain
    import birdjepa.runtime.preemption

    monkeypatch.setattr(birdjepa.config.command_line, "cli", lambda argv, prog: cfg)
    monkeypatch.setattr(birdjepa.runtime.preemption.Preemption, "install",
                        lambda self, sig, **kw: None)  # pytest's own handlers stay
    monkeypatch.setattr(birdjepa.train.loop, "main", functools.partial(
        birdjepa.train.loop.main, loaders=loaders))
    said = {"out": [], "err": []}

    def recorded(*args, file=None, **kw):  # what the CLI prints, by stream
        said["err" if file is sys.stderr else "out"].append(" ".join(map(str, args)) + "\n")

    monkeypatch.setattr(birdjepa.pretrain, "print", recorded, raising=False)
    monkeypatch.setattr(birdjepa.train.run, "print", recorded, raising=False)
    for name in ("stdout", "stderr"):  # main wraps them (survive_closed_output): put them back
        monkeypatch.setattr(sys, name, getattr(sys, name))
    rc = birdjepa.pretrain.main([])
    return rc, "".join(said["out"]), "".join(said["err"])


@pytest.mark.heavy
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


def test_all_undecodable_data_is_one_line(tmp_path, monkeypatch):
    """Issue 30 item 13: training on all-undecodable data ended in an EmptyBatchError
    traceback."""
    import test_empty_batch

    cfg = tiny.tiny_config(run_dir=str(tmp_path / "run"))
    _, evals = tiny.tiny_loaders(tiny.finalize(cfg))
    rc, _, err = _train_cli(monkeypatch, cfg,
                            (test_empty_batch.NothingValid(tiny.finalize(cfg)), evals))
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1, err
    assert lines[0].startswith("error: the first train batch has no valid row: all 8 samples")


@pytest.mark.heavy
@pytest.mark.parametrize("where", ["checkpoint", "curves"])
def test_a_full_disk_while_saving_is_one_line_and_keeps_earlier_steps(tmp_path, monkeypatch,
                                                                      where):
    """Issue 30 item 13: a full disk during the save was a traceback (plus "Event loop is
    closed" lines). Measured with a 600 KiB tmpfs (docs/issues/019-nothing-silently-wrong-3):
    Orbax raises ValueError("RESOURCE_EXHAUSTED ... No space left on device") from its
    background commit, or the curves PNG an OSError ENOSPC; both are simulated here."""
    import errno

    import orbax.checkpoint as ocp

    import birdjepa.train.log

    run_dir = tmp_path / "run"
    cfg = tiny.tiny_config(n_steps=4, ckpt_every=2, run_dir=str(run_dir))
    if where == "checkpoint":
        real, calls = ocp.CheckpointManager.wait_until_finished, []

        def wait(self):
            real(self)
            if any((run_dir / "checkpoints").glob("4*")):
                calls.append(1)
                raise ValueError('RESOURCE_EXHAUSTED: Failed writing: "x": No space left on '
                                 "device [os_error_code='28']")

        monkeypatch.setattr(ocp.CheckpointManager, "wait_until_finished", wait)
    else:
        def plot(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "curves.png"))

        monkeypatch.setattr(birdjepa.train.log, "plot", plot)
    rc, _, err = _train_cli(monkeypatch, cfg)
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1 and "No space left on device" in lines[0], err
    if where == "checkpoint":
        assert lines[0].startswith(f"error: checkpoint step 4 could not be written to "
                                   f"{run_dir / 'checkpoints'}")
    else:
        assert lines[0].startswith(f"error: {run_dir / 'curves.png'}: No space left on device")
    assert (run_dir / "checkpoints" / "2").is_dir()  # the earlier step is kept
    assert not rundir.is_complete(run_dir)


def test_mixup_on_a_single_label_column_is_refused_at_open_and_nothing_is_written(tmp_path):
    """Issue 47 item 17: objective.supervised.mix > 0 on class ids was checked inside the traced
    loss: the first compile ended in a ValueError traceback through JAX's frames. It is one
    ConfigError at open, before the run directory holds anything of the run."""
    run_dir = tmp_path / "run"
    cfg = tiny.tiny_config(n_steps=2, run_dir=str(run_dir))
    sup = dataclasses.replace(cfg.objective.supervised, mix=0.5)
    cfg = dataclasses.replace(cfg, objective=dataclasses.replace(cfg.objective, supervised=sup))
    with pytest.raises(config.ConfigError, match=r"^objective.supervised.mix: expected 0 with a "
                       r"single-label column \(class ids\), or a list<int> label column"):
        birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    held = sorted(p.name for p in run_dir.iterdir()) if run_dir.exists() else []
    assert not {"config.toml", "metrics.jsonl", "checkpoints", "COMPLETE"} & set(held), held


@pytest.mark.heavy
def test_a_real_full_disk_during_training_is_one_line(tiny_corpus, tmp_path):
    """Issue 47 item 20a: a training on a really full disk (a 700 KiB tmpfs, in its own mount
    namespace) printed its one error line among up to 164 "Event loop is closed" tracebacks
    from tensorstore callbacks of the background commit that failed while training went on.
    Now stderr is the one line."""
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        raise RuntimeError("unshare (util-linux) is needed: apt-get install util-linux")
    disk = tmp_path / "disk"
    disk.mkdir()
    cfg = tmp_path / "t.toml"
    cfg.write_text(f'run_dir = "{disk}/run"\n'
                   + tiny.tiny_toml(tiny_corpus / "train", n_steps=6, ckpt_every=2))
    script = (f"mount -t tmpfs -o size=700k tmpfs {disk} && exec {sys.executable} -m "
              f"birdjepa.pretrain --cfg {cfg}")
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr[-3000:]
    assert re.match(r"error: checkpoint step \d+ could not be written to .*No space left on "
                    r"device", lines[0]), lines[0]
