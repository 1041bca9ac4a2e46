"""A checkpoint and loader state written before the loader settings became one schema (issue
19; tests/fixtures/pre-schema-run, made at commit ba8efd2) resume under today's code and
continue exactly as the old code did: the same losses at steps 3 and 4, to the bit."""

import dataclasses
import json
import pathlib
import shutil
import subprocess
import sys

import pytest
import resume_helpers

import birdjepa.config

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "pre-schema-run"
EXACT = ("loss", "grad_norm", "probe_loss", "param_norm", "lr")


@pytest.mark.slow
def test_a_run_saved_before_the_schema_change_resumes_bit_exactly(tmp_path, demo_corpus):
    corpus = demo_corpus(**resume_helpers.CORPUS)["out_dir"]  # the fixture's, see its README
    (tmp_path / "corpus").symlink_to(corpus, target_is_directory=True)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(FIXTURE / "2", run / "checkpoints" / "2")
    for name in ("config.toml", "run_id", "metrics.jsonl"):
        shutil.copy(FIXTURE / name, run / name)
    shutil.copy(FIXTURE / "cfg.toml", tmp_path / "cfg.toml")
    out = subprocess.run([sys.executable, "-m", "birdjepa.pretrain", "--cfg", "cfg.toml",
                          "--run_dir=run"], cwd=tmp_path, env=resume_helpers.env(),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "resumed from step 2" in out.stdout
    got = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        got.setdefault(row["step"], {}).update(row)
    for line in (FIXTURE / "reference-steps-3-4.jsonl").read_text().splitlines():
        want = json.loads(line)
        for key in (k for k in EXACT if k in want):
            assert got[want["step"]][key] == want[key], (want["step"], key)
    assert {3, 4} <= set(got)


def test_the_config_hash_of_an_old_config_is_unchanged():
    """Run ids derived from the config (runs/run-<hash>) still find the old run directory:
    the loader settings that became training keys count only away from their defaults."""
    cfg = birdjepa.config.finalize(birdjepa.config.load(FIXTURE / "cfg.toml"))
    want = (FIXTURE / "run_id").read_text().strip().removeprefix("run-")
    assert birdjepa.config.config_hash(dataclasses.asdict(cfg))[:10] == want
    moved = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, block_size=32))
    assert birdjepa.config.config_hash(dataclasses.asdict(moved))[:10] != want
