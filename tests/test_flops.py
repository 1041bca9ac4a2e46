"""Analytic FLOP count (birdjepa.train.flops) against XLA's own count of the compiled update."""

import dataclasses

import jax
import pytest
import tiny

import birdjepa.config
import birdjepa.model
import birdjepa.optim
import birdjepa.train.flops as flops
import birdjepa.train.state
import birdjepa.train.step


def _cfg(objective: str, **model):
    """One block (XLA's cost analysis counts a scanned body once), matmul-dominated sizes:
    width 128, 66 tokens, 16 x V sequences, so elementwise work (norms, softmax, Adam) that the
    analytic count leaves out stays a few percent of the total."""
    cfg = tiny.tiny_config(objective, batch_size=16)
    mae = dataclasses.replace(cfg.objective.mae, dec_width=128, dec_heads=2)
    cfg = dataclasses.replace(cfg, objective=dataclasses.replace(cfg.objective, mae=mae))
    m = birdjepa.config.architecture.ModelConfig(width=128, depth=1, n_heads=2, n_registers=1, patch=(4, 8),
                                   **model)
    return birdjepa.config.finalize(dataclasses.replace(cfg, model=m))


def _xla_flops(cfg) -> float:
    state, static = birdjepa.params.abstract_state(cfg)
    tx = birdjepa.optim.make(cfg.optim, state["params"])
    b = cfg.batch_size
    lead = (1, cfg.data.n_views) if cfg.data.n_views > 1 else (1,)
    batch = {"data": jax.ShapeDtypeStruct((*lead, b, cfg.data.n_frames, cfg.data.n_mels),
                                          jax.numpy.float32),
             "target": jax.ShapeDtypeStruct((1, b), jax.numpy.int32)}
    fn = birdjepa.train.step.jit_update(cfg, static=static, tx=tx)
    cost = fn.lower(state, batch).compile().cost_analysis()
    return float((cost[0] if isinstance(cost, list) else cost)["flops"])


@pytest.mark.heavy
@pytest.mark.parametrize("objective,model", [
    ("supervised", {}),
    ("lejepa", {"swiglu": True}),
    ("mae", {}),
    ("supervised", {"remat": "block"}),
])
def test_flops_match_xla_cost_analysis(objective, model):
    """Within 10 %: the analytic count leaves out elementwise work (XLA counts 1 FLOP per element
    op), 2-5 % here (a remat forward that XLA partly merges with the forward when
    the one-block scan is unrolled: +5 %); a missing backward (-67 %), view (-50 %), head or decoder (MAE:
    the decoder is ~1/3) or a double-counted remat forward (+33 %) is far outside."""
    cfg = _cfg(objective, **model)
    want = _xla_flops(cfg)
    got = flops.flops_per_update(cfg, hardware=True)
    assert got == pytest.approx(want, rel=0.10), (got, want)


def test_remat_counts_only_in_hardware_flops():
    cfg = _cfg("supervised", remat="block")
    model_f, hw_f = flops.flops_per_update(cfg), flops.flops_per_update(cfg, hardware=True)
    fwd, _ = flops.encoder_flops(cfg.model, 8 * 8, hardware=False)
    assert hw_f - model_f == pytest.approx(cfg.batch_size * (fwd - 2 * 64 * 32 * 128), rel=1e-9)


def test_peak_flops_table():
    class Dev:
        def __init__(self, platform, kind):
            self.platform, self.device_kind = platform, kind

    assert flops.peak_flops(Dev("gpu", "NVIDIA H100 80GB HBM3")) == 989e12
    assert flops.peak_flops(Dev("gpu", "NVIDIA A100-SXM4-80GB"), dtype="float32") == 156e12
    assert flops.peak_flops(Dev("gpu", "NVIDIA GH200 480GB")) == 989e12
    assert flops.peak_flops(Dev("cpu", "cpu")) is None
    assert flops.peak_flops(Dev("gpu", "Unknown GPU")) is None
    assert flops.peak_flops(Dev("cpu", "cpu"), override=1e12) == 1e12
