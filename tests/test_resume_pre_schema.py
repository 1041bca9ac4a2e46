"""A checkpoint and loader state written before the loader settings became one schema (issue
19; tests/fixtures/pre-schema-run, made at commit ba8efd2) resume under today's code and
continue as the old code did: the same losses at steps 3 and 4.

The reference numbers were recorded by the old code on the developer's CPU. Bitwise resume holds
on the same machine type and software (tests/test_resume.py checks it against an uninterrupted
run computed on the test machine); it cannot be checked here, because the uninterrupted
reference would need the old code. XLA's CPU kernels differ between CPU kinds (vector width,
FMA contraction, reduction order), so the steps 3-4 numbers match the stored ones only to
rounding. Measured on an AMD EPYC with AVX-512 (issue 30 item 17;
docs/issues/019-nothing-silently-wrong-3/cross_cpu.py): loss, probe loss and parameter norm
within 5e-6 relative (step-3 loss 0.16050797700881958 against the stored 0.16050775349140167),
grad norm within 3.6e-4 (the LeJEPA SIGReg gradient sums many small terms). RTOL gives each
about 20 times that margin. The learning rate is a function of the step alone (a linear warmup:
one multiply and one divide, exact in IEEE arithmetic on any CPU), so it is compared exactly.
A wrong resume (another batch, a lost optimiser state, a restarted schedule) moves these numbers
far more: consecutive steps differ by 1e-3 relative in loss, 40 % in grad norm, 25 % in lr."""

import dataclasses
import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import resume_helpers

import birdjepa
import birdjepa.config
import birdjepa.config.identity
import birdjepa.data

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "pre-schema-run"
RTOL = {"loss": 1e-4, "probe_loss": 1e-4, "param_norm": 1e-4, "grad_norm": 5e-3, "lr": 0.0}
"""Relative tolerance per metric against numbers recorded on another CPU kind (see the module
docstring for the measurement behind each)."""


@pytest.mark.slow
def test_a_run_saved_before_the_schema_change_resumes_as_before(tmp_path, demo_corpus):
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
        for key in (k for k in RTOL if k in want):
            have = got[want["step"]][key]
            assert have == pytest.approx(want[key], rel=RTOL[key], abs=0), (want["step"], key)
    assert {3, 4} <= set(got)


def test_the_config_hash_of_an_old_config_is_unchanged():
    """Run ids derived from the config (runs/run-<hash>) still find the old run directory:
    the loader settings that became training keys count only away from their defaults."""
    cfg = birdjepa.config.finalize(birdjepa.config.load(FIXTURE / "cfg.toml"))
    want = (FIXTURE / "run_id").read_text().strip().removeprefix("run-")
    assert birdjepa.config.identity.config_hash(dataclasses.asdict(cfg))[:10] == want
    moved = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, block_size=32))
    assert birdjepa.config.identity.config_hash(dataclasses.asdict(moved))[:10] != want


def test_its_loader_state_resumes_with_the_filter_of_before(demo_corpus):
    """The fixture's loader state (saved before the `resampler` setting existed; the corpus holds
    22.05, 44.1 and 48 kHz recordings) resumes with the filter of before: a loader that leaves
    resampler unset takes it from the state, with the state's fingerprint, and yields what an
    explicit "rubato-bh2-1024" loader yields; the new filter's stream is another stream (its
    fingerprint differs and its features too), so an explicit "soxr-hq" is refused, naming it."""
    corpus = demo_corpus(**resume_helpers.CORPUS)["out_dir"]
    state = json.loads((FIXTURE / "2" / "loader" / "metadata").read_text())
    assert "resampler" not in state["config"]
    kw = dict(batch_size=8, n_classes=12, n_workers=1, n_views=2, view_window_s=6.0, n_local=2,
              local_s=2.0, local_frames=192)
    with birdjepa.data.Loader(corpus, state=state, **kw) as loader:
        assert loader.cfg.resampler == "rubato-bh2-1024"
        assert loader.fingerprint == state["fingerprint"]
        got = next(loader)
    with birdjepa.data.Loader(corpus, state=state, resampler="rubato-bh2-1024", **kw) as loader:
        want = next(loader)
    for key in ("data", "local", "index", "start_s", "local_start_s"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    with pytest.raises(birdjepa.StateMismatchError,
                       match="resampler: state has None, loader has 'soxr-hq'"):
        birdjepa.data.Loader(corpus, state=state, resampler="soxr-hq", **kw)
    with birdjepa.data.Loader(corpus, **kw) as new, \
            birdjepa.data.Loader(corpus, resampler="rubato-bh2-1024", **kw) as old:
        assert new.cfg.resampler == "soxr-hq" and new.fingerprint != old.fingerprint
        a, b = next(new), next(old)
    np.testing.assert_array_equal(a["start_s"], b["start_s"])  # the same crops, other features
    assert np.abs(a["data"] - b["data"]).max() > 0.5  # measured 1.6 (normalised units)
