"""Issue 47 item 6: Ctrl-C under `python -m birdjepa.pretrain ... 2>&1 | tee log`: Ctrl-C kills
`tee` too, the trainer's next print raised BrokenPipeError and it exited without the checkpoint
Ctrl-C promises. Writes to a closed stdout or stderr never stop a save: the run stops at the
step boundary, saves, and exits 75 as it does with a terminal."""

import signal
import subprocess

import pytest
import resume_helpers as h
import tiny

import birdjepa.pretrain


@pytest.mark.heavy
def test_ctrl_c_with_stdout_closed_still_saves(tmp_path, demo_corpus):
    corpus = demo_corpus(**h.CORPUS)["out_dir"]
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(tiny.tiny_toml(corpus, n_steps=400, ckpt_every=1000))
    run_dir = tmp_path / "run"
    p = subprocess.Popen(h.cli(cfg, run_dir), env=h.env(), cwd=h.ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        for line in p.stdout:  # as tee reads it
            if line.startswith("step 3/"):
                break
        p.stdout.close()  # tee is gone: the trainer's next write finds the pipe closed
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=240) == birdjepa.pretrain.EXIT_PREEMPTED
    finally:
        p.kill()
    steps = [int(d.name) for d in (run_dir / "checkpoints").iterdir() if d.name.isdigit()]
    assert steps and 3 <= max(steps) < 400, steps
