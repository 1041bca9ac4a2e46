"""Checkpointer: bitwise round trip, retention, interval, and kills mid-save."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import birdjepa.runtime.checkpoint


def make_state(seed: int):
    key = jax.random.key(seed)
    k1, k2 = jax.random.split(key)
    params = {"w": jax.random.normal(k1, (8, 4)), "b": jnp.arange(4.0)}
    opt = optax.adamw(1e-3)
    opt_state = opt.init(params)
    grads = jax.tree.map(jnp.ones_like, params)
    _, opt_state = opt.update(grads, opt_state, params)
    return {"params": params, "opt": opt_state, "key": k2, "step": jnp.asarray(seed, jnp.int32)}


def assert_bitwise(a, b):
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            assert jnp.issubdtype(y.dtype, jax.dtypes.prng_key)
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert np.array_equal(np.asarray(x), np.asarray(y)), (x, y)


def test_round_trip_is_bitwise_with_typed_key(tmp_path):
    state = make_state(3)
    loader = {"epoch": 1, "position": 123, "fingerprint": "abc"}
    meta = {"config": {"seed": 3}, "wandb_id": "xyz"}
    with birdjepa.runtime.checkpoint.Checkpointer(tmp_path, every=1, keep=2) as c:
        assert c.save(5, state, loader=loader, meta=meta)
        c.wait()
        assert c.latest_step() == 5
    with birdjepa.runtime.checkpoint.Checkpointer(tmp_path, every=1, keep=2) as c:
        out = c.restore(make_state(0))
    assert out.step == 5
    assert out.loader == loader
    assert out.meta == meta
    assert_bitwise(out.state, state)
    # The restored key draws the same numbers as the saved one.
    assert np.array_equal(
        jax.random.normal(out.state["key"], (3,)), jax.random.normal(state["key"], (3,))
    )


def test_interval_retention_and_force(tmp_path):
    state = make_state(1)
    with birdjepa.runtime.checkpoint.Checkpointer(tmp_path, every=3, keep=2) as c:
        saved = [s for s in range(1, 8) if c.save(s, state, loader={}, meta={})]
        assert saved == [3, 6]
        assert c.save(7, state, loader={}, meta={}, force=True)
        c.wait()
        assert c.all_steps() == [6, 7]
        assert c.read_meta() == {}


def test_restore_without_checkpoint_names_the_directory(tmp_path):
    with birdjepa.runtime.checkpoint.Checkpointer(tmp_path / "empty", every=1, keep=1) as c:
        assert c.latest_step() is None
        with pytest.raises(FileNotFoundError, match="empty"):
            c.restore(make_state(0))


def test_bad_options_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="ckpt_every must be >= 1, got 0"):
        birdjepa.runtime.checkpoint.Checkpointer(tmp_path, every=0, keep=1)


SAVER = textwrap.dedent(
    """
    import sys, jax, jax.numpy as jnp
    import birdjepa.runtime.checkpoint
    path = sys.argv[1]
    c = birdjepa.runtime.checkpoint.Checkpointer(path, every=1, keep=3)
    small = {"x": jnp.arange(10.0)}
    if c.latest_step() is None:
        c.save(1, small, loader={"pos": 1}, meta={"step": 1})
        c.wait()
    big = {"x": jnp.ones((64, 1024, 1024), jnp.float32)}  # 256 MB: the save takes a while
    print("saving", flush=True)
    c.save(2, big, loader={"pos": 2}, meta={"step": 2})
    c.wait()
    print("done", flush=True)
    """
)


def kill_saver(tmp_path, when):
    """Run SAVER and SIGKILL it at `when`: "tmp" (as the step-2 temp dir appears) or seconds."""
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    ckpt_dir = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(ckpt_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert proc.stdout.readline().strip() == "saving"
    if when == "tmp":
        deadline = time.monotonic() + 30
        while not any("tmp" in p.name for p in ckpt_dir.iterdir()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.001)
    else:
        time.sleep(when)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return ckpt_dir


@pytest.mark.slow
@pytest.mark.parametrize("when", ["tmp", 0.0, 0.02, 0.1, 0.3])
def test_sigkill_mid_save_keeps_a_complete_checkpoint(tmp_path, when):
    ckpt_dir = kill_saver(tmp_path, when)
    with birdjepa.runtime.checkpoint.Checkpointer(ckpt_dir, every=1, keep=3) as c:
        latest = c.latest_step()
        if when == "tmp":
            assert latest == 1, "a save killed before its commit must not count"
        assert latest in (1, 2)
        like = {"x": jnp.zeros(10)} if latest == 1 else {"x": jnp.zeros((64, 1024, 1024))}
        out = c.restore(like)
        assert out.loader == {"pos": latest}
        expected = np.arange(10.0) if latest == 1 else np.ones((64, 1024, 1024), np.float32)
        assert np.array_equal(out.state["x"], expected)
    leftovers = [p.name for p in pathlib.Path(ckpt_dir).iterdir() if "tmp" in p.name]
    assert leftovers == []


def test_a_step_saved_with_an_empty_field_since_removed_restores(tmp_path):
    """A state field that was always None (LeJEPA's class head, between two commits) leaves an
    empty entry in the saved tree; the state without the field restores bit for bit, and a
    tree whose arrays are named otherwise is still refused."""
    state = make_state(4)
    old = {**state, "params": {**state["params"], "heads": {"proj": jnp.ones(3), "cls": None}}}
    with birdjepa.runtime.checkpoint.Checkpointer(tmp_path, every=1, keep=2) as c:
        assert c.save(2, old, loader={"position": 7}, meta={})
        c.wait()
    today = {**state, "params": {**state["params"], "heads": {"proj": jnp.zeros(3)}}}
    with birdjepa.runtime.checkpoint.Checkpointer(tmp_path, every=1, keep=2) as c:
        out = c.restore(today)
    assert out.step == 2 and out.loader == {"position": 7}
    assert_bitwise(out.state, {**state, "params": {**state["params"],
                                                   "heads": {"proj": jnp.ones(3)}}})
    renamed = {**state, "params": {**state["params"], "heads": {"other": jnp.zeros(3)}}}
    with birdjepa.runtime.checkpoint.Checkpointer(tmp_path, every=1, keep=2) as c:
        with pytest.raises(ValueError, match="tree structures do not match"):
            c.restore(renamed)
