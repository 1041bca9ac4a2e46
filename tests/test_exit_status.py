"""Issue 30 item 15: the exit status of `python -m birdjepa.pretrain` does not depend on when a
signal lands. On main a second Ctrl-C 3 s after the first (the checkpoint saved, the process
finalizing) exited -2, and a SIGTERM after the last step -15: Python resets the signal
handlers to their defaults while it finalizes. Now the CLI leaves through `exit_with`
(os._exit after flushing), with its handlers in place to the end."""

import signal
import time

import pytest
import resume_helpers
import tiny


@pytest.fixture(scope="module")
def cfg_path(tmp_path_factory, demo_corpus):
    root = tmp_path_factory.mktemp("exit-status")
    corpus = demo_corpus(**resume_helpers.CORPUS)["out_dir"]
    path = root / "cfg.toml"
    path.write_text(tiny.tiny_toml(corpus, n_steps=40, ckpt_every=40))
    return path


@pytest.mark.slow  # three CLI runs
@pytest.mark.parametrize("delay", [1.0, 3.0])
def test_a_second_ctrl_c_exits_130_or_the_run_already_left_with_75(cfg_path, tmp_path, delay):
    p = resume_helpers.Proc(cfg_path, tmp_path / "run")
    assert p.wait_step(2), p.text()
    p.signal(signal.SIGINT)
    time.sleep(delay)
    if p.p.poll() is None:
        p.signal(signal.SIGINT)
    rc = p.wait()
    assert rc in (130, 75), (rc, p.text())  # aborted, or already gone after its save
    if rc == 75:
        assert (tmp_path / "run" / "checkpoints").is_dir()


@pytest.mark.slow
def test_sigterm_after_the_last_step_exits_0(cfg_path, tmp_path):
    p = resume_helpers.Proc(cfg_path, tmp_path / "run", "--n_steps=3")
    assert p.wait_for(lambda s: s.startswith("done |")) is not None, p.text()
    if p.p.poll() is None:
        p.signal(signal.SIGTERM)
    assert p.wait() == 0, p.text()
