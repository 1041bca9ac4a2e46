"""Training throughput: `python -m birdjepa.bench train [--configs demo vit-s] [--steps N]`.

For each config: steps/s, clips/s and the fraction of step time spent waiting for data, over
`--steps` timed updates after one warm-up (compile) update, on all local devices. Data comes
from the Rust loader (`birdjepa.data.Loader`, the config's worker count) over `--data` (default:
the demo corpus, `make data/demo/.done-split`), or with `--synthetic` from in-memory random
batches: the step time with no data cost, for comparison.
"""

import argparse
import dataclasses
import time

import jax

import birdjepa.bench.configs
import birdjepa.config
import birdjepa.pretrain
import birdjepa.synthetic


def make_loader(cfg: birdjepa.config.Config, data: str | None):
    """The train loader over `data` (a shard directory), or synthetic batches if None."""
    if data is None:
        return birdjepa.synthetic.SyntheticLoader(
            mode="train", batch_size=cfg.batch_size, seed=cfg.seed, n_classes=cfg.n_classes,
            n_views=cfg.data.n_views, n_frames=cfg.data.n_frames, n_mels=cfg.data.n_mels,
        )
    cfg = dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, train_shards=data, eval_shards=data))
    train, evals = birdjepa.pretrain.make_loaders(cfg)
    evals.close()
    return train


def bench(cfg: birdjepa.config.Config, n_steps: int, data: str | None) -> dict:
    cfg = birdjepa.pretrain.finalize(cfg)
    mesh = birdjepa.pretrain.make_mesh()
    state, static, tx = birdjepa.pretrain.init_state(cfg, mesh)
    update_fn = birdjepa.pretrain.jit_update(cfg, static=static, tx=tx)
    loader = make_loader(cfg, data)
    it = iter(loader)
    t0 = time.perf_counter()
    state, m = update_fn(state, birdjepa.pretrain.shard_batch(next(it), cfg, mesh))
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t0
    wait = 0.0
    t_start = time.perf_counter()
    for _ in range(n_steps):
        t0 = time.perf_counter()
        batch = next(it)
        wait += time.perf_counter() - t0
        state, m = update_fn(state, birdjepa.pretrain.shard_batch(batch, cfg, mesh))
        jax.block_until_ready(m)
    total = time.perf_counter() - t_start
    if hasattr(loader, "close"):
        loader.close()
    return {
        "steps_per_s": n_steps / total,
        "clips_per_s": n_steps * cfg.batch_size / total,
        "data_wait_frac": wait / total,
        "compile_s": compile_s,
    }


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m birdjepa.bench train", description=__doc__)
    p.add_argument("--configs", nargs="+", default=["demo", "vit-s"])
    p.add_argument("--steps", type=int, default=20, help="timed updates per config")
    p.add_argument("--data", default=str(birdjepa.bench.configs.CONFIGS.parent / "data" / "demo" / "train"),
                   help="shard directory for the Rust loader")
    p.add_argument("--synthetic", action="store_true", help="in-memory batches instead")
    p.add_argument("--batch-size", type=int, default=None,
                   help="override batch_size (non-demo configs default to 4 on CPU)")
    a = p.parse_args(argv)
    data = None if a.synthetic else a.data
    print(f"{jax.device_count()} {jax.default_backend()} device(s); data: "
          f"{'synthetic' if data is None else 'Rust loader on ' + data}")
    for name in a.configs:
        cfg = birdjepa.bench.configs.load(name, a.batch_size, jax.default_backend())
        r = bench(cfg, a.steps, data)
        print(
            f"{name:8s} batch {cfg.batch_size:4d} | {r['steps_per_s']:7.2f} steps/s | "
            f"{r['clips_per_s']:8.1f} clips/s | data wait {100 * r['data_wait_frac']:4.1f}% | "
            f"compile {r['compile_s']:.1f} s",
            flush=True,
        )
    return 0
