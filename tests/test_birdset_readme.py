"""The BirdSet guide's "Train on BirdSet" (docs/guides/birdset.md, linked from the README): its
commands run as written on the BirdSet-layout demo (a few speed overrides appended: 2 steps of a
debug-size model, one probe epoch)."""

import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import resume_helpers

import birdjepa.demo_data.birdset as birdset

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "birdset.md"
FAST = {
    "birdjepa.pretrain": ["--n_steps=2", "--batch_size=8", "--model.preset=debug",
                          "--model.compute_dtype=float32", "--data.n_workers=1", "--eval_every=0",
                          "--ckpt_every=2", "--objective.lejepa.n_slices=16",
                          "--objective.lejepa.proj_hidden=32", "--objective.lejepa.proj_dim=16",
                          "--data.view_window_s=5.0", "--wandb.mode=disabled"],
    "birdjepa.evaluate": ["--probe.epochs=1", "--probe.min_steps=2", "--batch_size=16",
                          "--n_workers=1"],
}


def readme_commands() -> list[str]:
    """The `python -m` lines of the guide's "Train on BirdSet" shell block."""
    text = GUIDE.read_text()
    section = text.split("## Train on BirdSet", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.startswith("python -m ")]


@pytest.mark.slow
def test_the_readme_commands_run_on_the_birdset_demo(tmp_path):
    s = birdset.write(tmp_path / "cache", n_recordings=12, n_soundscapes=1, n_segments=4,
                      max_s=12.0)
    cmds = readme_commands()
    assert [c.split()[2] for c in cmds] == ["birdjepa.pretrain", "birdjepa.evaluate"]
    env = resume_helpers.env()
    for cmd in cmds:
        line = cmd.replace("$XC", s["dataset_dir"]).replace("$SITE", s["dataset_dir"])
        argv = shlex.split(line)
        argv = [sys.executable, *argv[1:], *FAST[argv[2]]]
        argv = [a.replace("runs/", f"{tmp_path}/runs/") for a in argv]
        if argv[3] == "--cfg":
            argv[4] = str(ROOT / argv[4])
        out = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=900)
        assert out.returncode == 0, (argv, out.stdout[-3000:], out.stderr[-3000:])
    summary = json.loads((tmp_path / "runs" / "eval-birdset" / "summary.json").read_text())
    (test_set,) = summary["test_sets"].values()
    assert test_set["n_test"] == 4 and test_set["n_train"] == 12
    assert len(test_set["classes"]) == 12
