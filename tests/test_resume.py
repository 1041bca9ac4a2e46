"""Issue 5: a preempted, killed or requeued run continues bit-for-bit as if it had never stopped.

Every run here is the real CLI (`python -m birdjepa.pretrain`) in a subprocess with the real
loader on a tiny demo corpus, compared with one uninterrupted reference run: every logged step's
metrics and the final checkpoint's every leaf (params, optimiser state, PRNG key data, step,
loader state) must be bitwise equal. Subprocesses share a persistent compilation cache.
"""

import dataclasses
import json
import shutil
import signal
import time

import equinox as eqx
import jax
import numpy as np
import pytest
import resume_helpers as h
import tiny

import birdjepa
import birdjepa.config
import birdjepa.config.identity
import birdjepa.model
import birdjepa.train.loop
import birdjepa.train.state
import birdjepa.train.step

N = 16  # steps of every run; a checkpoint every step


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, demo_corpus):
    root = tmp_path_factory.mktemp("resume")
    h.JAX_CACHE = str(root / "jax-cache")
    cfg = root / "tiny.toml"
    cfg.write_text(tiny.tiny_toml(demo_corpus(**h.CORPUS)["out_dir"], n_steps=N, ckpt_every=1))
    yield root, cfg
    h.JAX_CACHE = None


@pytest.fixture(scope="module")
def reference(corpus):
    """The uninterrupted run on one device."""
    root, cfg = corpus
    r = h.run(cfg, root / "ref")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert json.loads((root / "ref/COMPLETE").read_text())["steps"] == N
    return root / "ref"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGINT], ids=["usr2", "ctrl-c"])
def test_split_run_is_bitwise_equal(corpus, reference, sig):
    """SIGUSR2 (preemption) and Ctrl-C alike: stop at the step boundary, save, exit 75; the
    rerun continues bit for bit (nothing after the last periodic checkpoint is lost)."""
    root, cfg = corpus
    t0 = time.perf_counter()
    stopped = h.split_run(cfg, root / f"split-{sig.name}", at=N // 2, sig=sig)
    delta = h.assert_same_run(reference, root / f"split-{sig.name}")
    assert delta == 0.0
    print(f"split at step {stopped}/{N}: max |delta loss| = {delta} "
          f"({time.perf_counter() - t0:.0f} s)")


@pytest.mark.slow
def test_sigkill_at_random_moments(corpus, reference):
    """SIGKILL at seeded random moments, half of them while a checkpoint's temporary directory
    is on disk; restart after each kill until the run completes."""
    root, cfg = corpus
    t0 = time.perf_counter()
    k = h.kill_run(cfg, root / "killed", n_kills=4, seed=20251122, n_steps=N)
    delta = h.assert_same_run(reference, root / "killed")
    print(f"SIGKILL: survived {k['kills']} kills ({k['mid_save']} with an uncommitted save on "
          f"disk), resumed from steps {k['resumed_from']}; max |delta loss| = {delta} "
          f"({time.perf_counter() - t0:.0f} s)")
    assert k["kills"] >= 3 and k["mid_save"] >= 1 and len(k["resumed_from"]) >= 3
    assert delta == 0.0


@pytest.mark.slow
def test_cli_refuses_forces_restarts_and_skips_complete(corpus, reference):
    root, cfg = corpus
    run_dir = root / "cli"
    shutil.copytree(reference, run_dir)
    before = (run_dir / "metrics.jsonl").read_text()

    t0 = time.perf_counter()
    r = h.run(cfg, run_dir)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"is already complete ({N} steps)" in r.stdout and "resumed" not in r.stdout
    assert (run_dir / "metrics.jsonl").read_text() == before
    print(f"already complete: exit 0 in {time.perf_counter() - t0:.1f} s")

    r = h.run(cfg, run_dir, "--n_steps=18", "--optim.lr=0.001")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "optim.lr: checkpoint has 0.002, config has 0.001" in r.stderr, r.stderr
    assert "--resume=force" in r.stderr and "data." not in r.stderr  # only the differing key
    assert (run_dir / "metrics.jsonl").read_text() == before

    # Issue 38 item 7: a forced start that cannot restore (another model width) failed with an
    # Orbax traceback after removing COMPLETE and rewriting config.toml
    def files():  # all but the lock, which names the last process that held it
        return {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()
                and p.name != "lock"}

    kept = files()
    r = h.run(cfg, run_dir, "--n_steps=18", "--model.width=64", "--resume=force")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1].startswith("error: model: "), r.stderr[-2000:]
    assert files() == kept and "COMPLETE" in kept

    # force also across a change of the data stream (seed): the new stream is entered at step N
    r = h.run(cfg, run_dir, "--n_steps=18", "--optim.lr=0.001", "--seed=7", "--resume=force")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert f"resumed from step {N} " in r.stdout
    assert f"entering the new stream at step {N}" in r.stdout
    assert json.loads((run_dir / "COMPLETE").read_text())["steps"] == 18
    assert sorted(h.metrics(run_dir)) == list(range(1, 19))

    old = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    r = h.run(cfg, run_dir, "--n_steps=3", "--resume=never")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "resume=never: moved existing checkpoints to" in r.stdout and "resumed" not in r.stdout
    (aside,) = run_dir.glob("checkpoints.old-*")
    assert sorted(p.name for p in aside.iterdir()) == sorted([*old, "metrics.jsonl"])
    assert sorted(h.metrics(aside)) == list(range(1, 19))  # nothing lost
    assert sorted(h.metrics(run_dir)) == [1, 2, 3]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["2", "3"]
    assert json.loads((run_dir / "COMPLETE").read_text())["steps"] == 3


@pytest.mark.slow
def test_submitit_timeout_requeues_and_resumes(corpus, reference, monkeypatch):
    """LocalExecutor sends USR2 before its timeout; the job checkpoints at the next step
    boundary, submitit requeues it, and the requeued job resumes to the end."""
    import submitit

    root, cfg_path = corpus
    run_dir = root / "submitit"
    for k, v in h.env().items():
        monkeypatch.setenv(k, v)
    cfg = dataclasses.replace(birdjepa.config.load(cfg_path), run_dir=str(run_dir),
                              run_id="submitit-resume")
    ex = submitit.LocalExecutor(folder=root / "submitit-logs")
    # USR2 35 s after the job starts (submitit kills it at 75 s); the job holds at step N/2
    # until it arrives, so the signal lands mid-run however slow the start is.
    ex.update_parameters(timeout_min=75 / 60, signal_delay_s=40)
    job = ex.submit(h.HoldUntilPreempted(cfg, hold_at=N // 2))
    summary = job.result()
    out = job.stdout() or ""
    assert summary["steps"] == N and not summary["preempted"], out[-3000:]
    assert summary["run_dir"] == str(run_dir)
    assert out.count("holding at step") == 1  # the requeued job is a plain TrainingJob
    attempts = out.count("run submitit-resume -> ")
    stopped = [int(line.split()[1].rstrip(":")) for line in out.splitlines()
               if "stop requested; checkpoint saved" in line]
    # USR2 normally arrives during the hold, so the stop lands right after it.
    assert attempts >= 2 and len(stopped) == attempts - 1, out[-3000:]
    for s in stopped:
        assert 1 <= s < N and f"resumed from step {s} " in out, out[-3000:]
    assert h.assert_same_run(reference, run_dir) == 0.0
    print(f"submitit: preempted at step(s) {stopped}, requeued, resumed to {N}")


@pytest.mark.slow
def test_two_devices_split_run_is_bitwise_equal(corpus):
    root, cfg = corpus
    r = h.run(cfg, root / "ref2", n_devices=2)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "| 2 device(s)" in r.stdout
    h.split_run(cfg, root / "split2", at=N // 2, n_devices=2)
    assert h.assert_same_run(root / "ref2", root / "split2") == 0.0


@pytest.mark.slow
def test_load_encoder_matches_the_trained_encoder(tmp_path):
    """load_encoder(run_dir) gives the encoder as trained: its output equals, bit for bit, that
    of the same training steps replayed in this process."""
    cfg = tiny.tiny_config(n_steps=3, run_dir=str(tmp_path / "run"))
    birdjepa.train.loop.main(cfg, loaders=tiny.tiny_loaders)
    cfg = tiny.finalize(cfg)

    mesh = birdjepa.train.state.make_mesh(1)
    state, static, tx = birdjepa.train.state.init_state(cfg, mesh)
    update = jax.jit(lambda s, b: birdjepa.train.step.update(s, b, static=static, tx=tx, cfg=cfg))
    train, evals = tiny.tiny_loaders(cfg)
    it = iter(train)
    for _ in range(cfg.n_steps):
        state, _ = update(state, birdjepa.train.state.shard_batch(next(it), cfg, mesh))
    trained = eqx.combine(state["params"]["encoder"], static["encoder"])

    encoder, loaded_cfg = birdjepa.load_encoder(tmp_path / "run")
    assert loaded_cfg == birdjepa.config.identity.with_resampler(cfg, None)  # as the run resolved it
    assert isinstance(encoder, birdjepa.model.ViT)
    x = next(iter(evals))["data"]
    want = jax.device_get(trained(x).pooled_bd)
    got = jax.device_get(encoder(x).pooled_bd)
    assert got.shape == (len(x), cfg.model.width)
    assert np.array_equal(got, want)
    init = eqx.combine(birdjepa.train.state.init_state(cfg, mesh)[0]["params"]["encoder"],
                       static["encoder"])
    assert not np.array_equal(jax.device_get(init(x).pooled_bd), want)  # it did train
