"""The GPU plan's rules on recorded compile results (no CUDA needed): the fit rule, the choice of
remat and batch, the rows' schema and the plan file, the key that finds a sweep entry's rows, and
`attention = "auto"` following the platform the step is traced for. The compiles themselves run
under `make gpu-plan` (XLA's GPU compiler, jax[cuda12]); tests/fixtures/gpu-plan-rows.json holds
rows it wrote on 2026-11-28 (jax 0.10.2; the configs' blocks unrolled with a bfloat16 residual,
docs/issues/028-step-beats-peer): numbers read back here, never recomputed."""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractDevice, AbstractMesh, NamedSharding
from jax.sharding import PartitionSpec as P

import birdjepa.config
import birdjepa.config.architecture
import birdjepa.launch.gpuplan.rules as rules
import birdjepa.launch.gpuplan.targets as targets
import birdjepa.model as model

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROWS = json.loads((ROOT / "tests" / "fixtures" / "gpu-plan-rows.json").read_text())
GB = 1e9


def rows_of(config: str, gpu: str) -> list[dict]:
    return [r for r in ROWS if r["config"] == config and r["gpu"] == gpu]


def row(remat="dots", batch=256, total=10.0, device=80.0, fmha=3, attention="auto", **kw):
    mem = {"argument": 1e9, "output": 0.0, "alias": 0.0, "temp": total * GB - 1e9}
    return rules.make_row(config="c", gpu="h100", remat=remat, batch_size=batch,
                          attention=attention, memory=mem, device_bytes=int(device * GB),
                          flash_attention=fmha, flops_per_update=1e12, chosen=False, key="k",
                          **kw)


def test_fit_rule_leaves_15_percent_free():
    assert rules.fits(85e9, 100e9) and not rules.fits(85.01e9, 100e9)
    assert row(total=68.0).get("fits") and not row(total=68.1).get("fits")
    assert row(total=40.0)["used_frac"] == pytest.approx(0.5)


def test_recorded_rows_follow_the_fit_rule():
    """Every recorded row's verdict is the rule applied to its own memory figures. Without remat
    at batch 256 x 2 views ViT-B now fits an H100 (blocks unrolled: 57.8 GB, where a scan needed
    144.5 GB on 2026-11-25), not an A100 80GB (its compiler's fusions differ: 70.2 GB)."""
    assert len(ROWS) >= 12
    for r in ROWS:
        if r["total_gb"] is None:  # skipped: a smaller batch of the same remat did not fit
            smaller = [o for o in rows_of(r["config"], r["gpu"]) if o["remat"] == r["remat"]
                       and o["batch_size"] < r["batch_size"] and o["total_gb"]]
            assert r["error"].startswith("not compiled") and not r["fits"]
            assert smaller and not any(o["fits"] for o in smaller)
            continue
        total = r["argument_gb"] + r["output_gb"] + r["temp_gb"] - r["alias_gb"]
        assert r["total_gb"] == pytest.approx(total)
        assert r["fits"] == (r["total_gb"] <= 0.85 * r["device_gb"])
    (none,) = [r for r in rows_of("vit-b", "h100") if r["remat"] == "none"
               and r["batch_size"] == 256]
    assert none["fits"] and 50 < none["total_gb"] < 60
    (none,) = [r for r in rows_of("vit-b", "a100-80g") if r["remat"] == "none"
               and r["batch_size"] == 256]
    assert not none["fits"] and none["total_gb"] > 0.85 * none["device_gb"]
    assert rules.describe(none).startswith("does NOT fit on a100-80g")


def test_choice_least_remat_then_largest_batch():
    rows = [row("none", 256, 90), row("dots", 256, 20), row("dots", 512, 40),
            row("block", 1024, 30)]
    pick = rules.choose(rows, min_batch=256)
    assert (pick["remat"], pick["batch_size"]) == ("dots", 512)
    # a batch below the plan's smallest is not bought with less remat; nor is a batch above
    # JAX's default pool (75 % of the device) taken
    rows = [row("none", 128, 30), row("dots", 256, 20), row("dots", 512, 62)]
    assert rules.choose(rows, min_batch=256)["batch_size"] == 256
    assert rules.choose([row("dots", 512, 58)], min_batch=256)["batch_size"] == 512
    # fused attention over none at equal remat and batch; a failed compile never
    fused = rules.choose([row(fmha=0, attention="xla"), row(fmha=3)], min_batch=256)
    assert fused["flash_attention"] == 3
    assert rules.choose([row(error="XlaRuntimeError: boom")], min_batch=256) is None
    assert rules.choose([row("none", 256, 90)], min_batch=256) is None


@pytest.mark.parametrize("name", ["vit-s", "vit-b"])
def test_shipped_configs_are_the_plans_choice_on_h100(name):
    """configs/NAME.toml's remat, batch and attention are what the plan picks from the recorded
    H100 rows, and those settings compiled with fused attention."""
    cfg = birdjepa.config.load(ROOT / "configs" / f"{name}.toml")
    m = birdjepa.config.architecture.resolve(cfg.model)
    mine = rows_of(name, "h100")
    pick = rules.choose(mine, min_batch=256)  # the smallest batch `make gpu-plan` plans
    assert (pick["remat"], pick["batch_size"], pick["attention"]) == (
        m.remat, cfg.batch_size, m.attention)
    assert pick["fits"] and pick["flash_attention"] > 0


def test_schema_and_plan_file(tmp_path):
    assert rules.validate(ROWS, "fixture") is ROWS
    path = tmp_path / "plan.json"
    assert rules.load(path) == []
    rules.save(path, ROWS[:3])
    assert rules.load(path) == ROWS[:3]
    bad = [dict(ROWS[0]), {k: v for k, v in ROWS[1].items() if k != "fits"}]
    with pytest.raises(ValueError, match=r"row 1: expected a key 'fits'"):
        rules.validate(bad, "x")
    with pytest.raises(ValueError, match=r"row 0, 'batch_size': expected int, got str '256'"):
        rules.validate([{**ROWS[0], "batch_size": "256"}], "x")
    with pytest.raises(ValueError, match=r"row 0, 'fits': expected bool, got int 1"):
        rules.validate([{**ROWS[0], "fits": 1}], "x")
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        rules.load(path)
    failed = row(error="RuntimeError: x")
    failed = rules.make_row(**{k: failed[k] for k in ("config", "gpu", "remat", "attention",
                                                      "key", "chosen", "error")},
                            batch_size=8, memory=None, device_bytes=10, flash_attention=None,
                            flops_per_update=1.0)
    assert rules.validate([failed]) and not failed["fits"] and failed["total_gb"] is None


def test_a_row_whose_verdict_contradicts_its_figures_is_refused(tmp_path):
    """Issue 38 item 22: `launch --dry_run` trusted a hand-edited row's `fits: true` at 92 of
    80 GB."""
    lie = {**row(total=92.0), "device_gb": 80.0, "used_frac": 1.15, "fits": True}
    with pytest.raises(ValueError, match=r"row 0, 'fits': expected false for 92.0 of 80.0 GB"):
        rules.validate([lie], "x")
    with pytest.raises(ValueError, match=r"row 0, 'used_frac': expected total_gb / device_gb"):
        rules.validate([{**row(total=40.0), "used_frac": 0.1}], "x")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps([lie]))
    with pytest.raises(ValueError, match="'fits': expected false"):
        rules.load(path)  # what launch --dry_run reads: its line says so and the run fails


def test_plan_key_follows_the_step_only():
    cfg = birdjepa.config.load(ROOT / "configs" / "vit-s.toml")
    cfg = birdjepa.config.finalize(dataclasses.replace(cfg, n_classes=10))
    same = dataclasses.replace(cfg, run_id="x", n_steps=7, optim=dataclasses.replace(
        cfg.optim, lr=1.0), data=dataclasses.replace(cfg.data, train_shards="/elsewhere"))
    assert rules.plan_key(same) == rules.plan_key(cfg)
    for other in (dataclasses.replace(cfg, batch_size=128),
                  dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, remat="block")),
                  dataclasses.replace(cfg, n_classes=11)):
        assert rules.plan_key(other) != rules.plan_key(cfg)


def test_shipped_targets_declare_their_memory_and_capability():
    assert targets.device_memory("h100") == 84978434048
    assert [targets.compute_capability(g) for g in targets.GPUS] == ["9.0", "9.0", "8.0", "8.9"]
    for gpu in targets.GPUS:
        assert "# " in targets.target_config(gpu)  # every file cites its sources
    with pytest.raises(ValueError, match="expected one of h100, h200, a100-80g, l40s, got 'v100'"):
        targets.target_config("v100")


def test_auto_attention_follows_the_platform_the_step_is_traced_for(monkeypatch):
    """Traced for a GPU mesh (an abstract one: no CUDA here), "auto" asks for the cuDNN kernel
    although the default backend is the CPU; traced for CPU arrays it asks for XLA's."""
    assert not model.use_cudnn("auto", jnp.bfloat16, 64, "cpu")
    assert model.use_cudnn("auto", jnp.bfloat16, 64, "gpu")
    assert not model.use_cudnn("auto", jnp.float32, 64, "gpu")
    assert not model.use_cudnn("auto", jnp.bfloat16, 100, "gpu")
    assert model.use_cudnn("cudnn", jnp.float32, 64, "cpu")
    asked = []

    def spy(q, k, v, *, implementation, **kw):
        asked.append(implementation)
        return q

    monkeypatch.setattr(jax.nn, "dot_product_attention", spy)
    gpu = AbstractMesh((1,), ("data",), abstract_device=AbstractDevice(
        device_kind="NVIDIA H100 80GB HBM3", num_cores=132, platform="gpu"))
    q = jax.ShapeDtypeStruct((2, 16, 4, 64), jnp.bfloat16, sharding=NamedSharding(gpu, P()))
    jax.jit(lambda q: model.attention(q, q, q, impl="auto")).trace(q)
    jax.jit(lambda q: model.attention(q, q, q, impl="auto"))(jnp.zeros((2, 16, 4, 64),
                                                                       jnp.bfloat16))
    assert asked == ["cudnn", "xla" if jax.default_backend() == "cpu" else "cudnn"]
