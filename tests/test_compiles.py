"""One trace and one compile of the update per process, and compiled steps that outlive it
(docs/issues/022-gpu-kept-busy).

The state that comes out of the update must have exactly the types of the state that goes in:
a weakly typed LayerScale (jnp.full with a Python float) came out strongly typed, so the update
was traced and compiled again at step 2 (17-18 s for ViT-S on an H200)."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import pytest
import tiny

import birdjepa.config
import birdjepa.train.state
import birdjepa.train.step

SUPPORT = pathlib.Path(__file__).parent / "support"


def _model(cfg, **kw):
    return dataclasses.replace(cfg, model=birdjepa.config.architecture.resolve(
        dataclasses.replace(cfg.model, **kw)))


def _types(tree):
    return [(jax.tree_util.keystr(p), x.shape, x.dtype, jax.typeof(x).weak_type)
            for p, x in jax.tree_util.tree_leaves_with_path(tree)]


@pytest.mark.parametrize("objective", ["supervised", "lejepa", "mae", "probe_only"])
def test_the_update_returns_the_types_it_takes(objective):
    """Every objective, with every optional parameter of the blocks (LayerScale, QK-norm,
    registers, RoPE, SwiGLU): no weakly typed leaf, and the update's output state has the
    input's shapes, dtypes and weak types (else the second call traces again)."""
    cfg = tiny.finalize(_model(tiny.tiny_config(objective), layerscale=1e-4, qk_norm=True,
                               pos="rope", swiglu=True, compute_dtype="bfloat16"))
    mesh = birdjepa.train.state.make_mesh()
    state, static, tx = birdjepa.train.state.init_state(cfg, mesh)
    weak = [t[0] for t in _types(state) if t[3]]
    assert not weak, f"weakly typed state leaves: {weak}"
    batch = birdjepa.train.state.shard_batch(
        next(iter(tiny.tiny_loaders(cfg)[0])), cfg, mesh)
    fn = birdjepa.train.step.jit_update(cfg, static=static, tx=tx)
    out, _ = jax.eval_shape(fn, state, batch)
    assert _types(out) == _types(state)


TWO_PROCESSES = """
import json, sys
sys.path.insert(0, {support!r})
import tiny
import birdjepa.data.synthetic, birdjepa.runtime.compiles as compiles, birdjepa.train.loop
cfg = tiny.tiny_config("lejepa", n_steps=8, run_dir={run!r}, eval_every=2, ckpt_every=2,
                       compile_cache={cache!r})
cfg = cfg.__class__(**{{**cfg.__dict__, "model": cfg.model.__class__(**{{
    **cfg.model.__dict__, "layerscale": 1e-4, "qk_norm": True, "pos": "rope",
    "compute_dtype": "bfloat16"}})}})
stop_at, polls = int(sys.argv[1]), []
def should_stop():
    polls.append(1)
    return len(polls) >= stop_at
out = birdjepa.train.loop.main(cfg, loaders=birdjepa.data.synthetic.loaders,
                               should_stop=should_stop)
print("COUNTS " + json.dumps({{
    "steps": out["steps"], "update_traces": compiles.traces("update"),
    "eval_traces": compiles.traces("eval_step"),
    "update_compiles": [c.cache_hit for c in compiles.compiles("update")]}}))
"""


def _run(script: str, stop_at: int) -> tuple[dict, str]:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled",
           # JAX writes only compiles slower than 1 s by default; the tiny update is faster.
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    r = subprocess.run([sys.executable, "-c", script, str(stop_at)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("COUNTS "))
    return json.loads(line.removeprefix("COUNTS ")), r.stdout


@pytest.mark.heavy
def test_two_devices_trace_once_and_a_resumed_process_loads_the_compiled_update(tmp_path):
    """On a 2-device CPU mesh: a run stopped after 4 updates (evaluated at 2 and 4) traced the
    update and the eval step once each and wrote the update to the compilation cache; a second
    process over the same run directory restores step 4, loads the update from the cache, and
    neither re-traces it after the restore nor the eval step over 4 more updates."""
    run, cache = tmp_path / "run", tmp_path / "cache"
    script = TWO_PROCESSES.format(support=str(SUPPORT), run=str(run), cache=str(cache))
    first, out1 = _run(script, stop_at=4)
    assert first == {"steps": 4, "update_traces": 1, "eval_traces": 1,
                     "update_compiles": [False]}, out1
    assert f"cache miss in {cache}" in out1
    assert "traced again" not in out1
    second, out2 = _run(script, stop_at=100)
    assert second == {"steps": 8, "update_traces": 1, "eval_traces": 1,
                      "update_compiles": [True]}, out2
    assert "resumed from step 4" in out2
    assert f"loaded from the compilation cache {cache}" in out2
    assert "traced again" not in out2


def test_a_retrace_is_reported(capsys):
    """The loop's guard names a function traced again after the first update."""
    import jax.numpy as jnp

    import birdjepa.runtime.compiles as compiles

    compiles.watch()

    def update(x):
        return x * 2

    fn = jax.jit(update)
    fn(jnp.ones(3))
    guard = compiles.Retrace("update")
    fn(jnp.ones(3))
    guard.check(2)
    assert "traced again" not in capsys.readouterr().out
    fn(jnp.ones(3, jnp.int32))  # another input type: a new trace
    guard.check(3)
    guard.check(4)
    out = capsys.readouterr().out
    assert out.count("warning: step 3: update was traced again (1 more time(s))") == 1


def test_the_cache_directory_follows_setting_environment_default(monkeypatch, tmp_path):
    import birdjepa.runtime.compiles as compiles

    for var in (compiles.ENV, "JAX_COMPILATION_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compiles.resolve("") == str(tmp_path / "xdg" / "birdjepa" / "jax-compile")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax"))
    assert compiles.resolve("") == str(tmp_path / "jax")
    monkeypatch.setenv(compiles.ENV, str(tmp_path / "env"))
    assert compiles.resolve("") == str(tmp_path / "env")
    assert compiles.resolve(str(tmp_path / "cfg")) == str(tmp_path / "cfg")
    assert compiles.resolve("off") is None
    monkeypatch.setenv(compiles.ENV, "off")
    assert compiles.resolve("") is None


@pytest.mark.heavy
def test_benchmark_train_reports_phases_and_the_peer(capsys):
    """`benchmarks train` reports the first update, the second, the step alone and the plain-JAX
    peer of the same shape, with one trace and one compile of the update."""
    import benchmarks.train

    assert benchmarks.train.main(["--configs", "demo", "--synthetic_on_device", "--steps", "2",
                                  "--batch_size", "8"]) == 0
    out = capsys.readouterr().out
    assert "demo     first update (trace + compile + run)" in out
    assert "| traced 1x, compiled 1x" in out
    peer = next(line for line in out.splitlines() if line.startswith("peer "))
    assert "plain-JAX ViT, same shape" in peer and "the peer's speed" in peer


def test_the_peer_has_birdjepas_shape():
    """The peer ViT sees the same tokens and holds the same weight matrices as birdjepa's encoder
    (q, k, v fused in one; a learned position table where birdjepa has RoPE)."""
    import benchmarks.configs
    import benchmarks.peer_vit
    import birdjepa.params

    cfg = birdjepa.config.finalize(benchmarks.configs.load("vit-s", 2, "cpu"))
    peer = benchmarks.peer_vit.PeerViT(cfg)
    params, _ = jax.eval_shape(peer.init, jax.random.key(0))
    abstract, _ = birdjepa.params.abstract_state(cfg)
    enc = abstract["params"]["encoder"]
    mats = [enc.patch_embed.w, *(getattr(enc.blocks, n).w for n in ("wq", "wk", "wv", "wo",
                                                                    "fc1", "fc2"))]
    peer_mats = [params["patch_w"], *(params["blocks"][k] for k in ("qkv_w", "o_w", "fc1_w",
                                                                    "fc2_w"))]
    assert sum(x.size for x in peer_mats) == sum(x.size for x in mats)
    assert params["special"].shape == (1 + cfg.model.n_registers, cfg.model.width)
    assert peer.n_special + peer.n_patches == 264  # CLS + 7 registers + 256 patches
    assert peer.n_seq == cfg.batch_size * cfg.data.n_views
