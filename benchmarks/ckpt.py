"""Checkpoint cost: `python -m benchmarks ckpt [--configs demo vit-s] [--saves 3]`.

For each config, with the real train state (model, optimiser state, PRNG key, step) after one
update and `birdjepa.data.synthetic` data (no corpus needed):

- blocked (async): how long `Checkpointer.save` holds the training loop with Orbax's async save
  (device -> host copy, then the write runs in a background thread), median over `--saves`
  saves, each after one training step;
- blocked (sync): the same with `Checkpointer(async_save=False)` (the whole write);
- size: one checkpoint's bytes on disk;
- restore: opening the directory and restoring the latest checkpoint into the state's
  structure; restore -> step: restore plus the first training step after it (compiled).
"""

import dataclasses
import pathlib
import statistics
import tempfile
import time

import jax

import benchmarks.configs
import birdjepa.common.cli_args as cli_args
import birdjepa.config
import birdjepa.data.synthetic
import birdjepa.runtime.checkpoint
import birdjepa.train.state
import birdjepa.train.step


def dir_bytes(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bench(cfg: birdjepa.config.Config, n_saves: int, root: pathlib.Path) -> dict:
    cfg = birdjepa.config.finalize(cfg)
    mesh = birdjepa.train.state.make_mesh()
    state, static, tx = birdjepa.train.state.init_state(cfg, mesh)
    update_fn = birdjepa.train.step.jit_update(cfg, static=static, tx=tx)
    train, _ = birdjepa.data.synthetic.loaders(cfg)
    it = iter(train)

    def step(state):
        state, m = update_fn(state, birdjepa.train.state.shard_batch(next(it), cfg, mesh))
        jax.block_until_ready(m)
        return state

    t0 = time.perf_counter()
    state = step(state)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = step(state)
    step_s = time.perf_counter() - t0
    meta = {"config": dataclasses.asdict(cfg)}

    out = {"params": sum(x.size for x in jax.tree.leaves(state["params"])),
           "compile_s": compile_s, "step_s": step_s}
    for mode in ("async", "sync"):
        ckpt_dir = root / mode
        blocked = []
        with birdjepa.runtime.checkpoint.Checkpointer(ckpt_dir, every=1, keep=2,
                                              async_save=mode == "async") as ckpt:
            for _ in range(n_saves):
                state = step(state)
                done = int(state["step"])
                t0 = time.perf_counter()
                ckpt.save(done, state, loader=train.state_dict(), meta={**meta, "step": done})
                blocked.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ckpt.wait()
            out[f"{mode}_drain_s"] = time.perf_counter() - t0
            latest = ckpt.latest_step()
        out[f"{mode}_blocked_s"] = statistics.median(blocked)
        out["bytes"] = dir_bytes(ckpt_dir / str(latest))

    like = state
    t0 = time.perf_counter()
    with birdjepa.runtime.checkpoint.Checkpointer(root / "async", every=1, keep=2) as ckpt:
        restored = ckpt.restore(like)
    out["restore_s"] = time.perf_counter() - t0
    step(restored.state)
    out["restore_step_s"] = time.perf_counter() - t0
    return out


def main(argv: list[str]) -> int:
    p = cli_args.Parser("python -m benchmarks ckpt", __doc__)
    p.add_list("configs", help="a config to measure (repeat for more; default: demo and vit-s)")
    p.add_argument("--saves", type=cli_args.converter(int), default=3,
                   help="timed saves per mode and config")
    p.add_argument("--batch_size", type=cli_args.converter(int), default=None,
                   help="override batch_size (non-demo configs default to 4 on CPU)")
    p.add_argument("--dir", default=None, help="where to write checkpoints (default: a tmp dir)")
    a = p.parse_args(argv)
    a.configs = a.configs or ["demo", "vit-s"]
    print(f"{jax.device_count()} {jax.default_backend()} device(s); synthetic data")
    print(f"{'config':8s} {'params':>11s} {'step s':>7s} {'size MB':>8s} {'async blocked s':>16s} "
          f"{'(drain s)':>9s} {'sync blocked s':>15s} {'restore s':>10s} {'restore->step s':>16s}")
    for name in a.configs:
        cfg = benchmarks.configs.load(name, a.batch_size, jax.default_backend())
        with tempfile.TemporaryDirectory(dir=a.dir, prefix=f"bench-ckpt-{name}-") as d:
            r = bench(cfg, a.saves, pathlib.Path(d))
        print(f"{name:8s} {r['params']:11,d} {r['step_s']:7.3f} {r['bytes'] / 1e6:8.1f} "
              f"{r['async_blocked_s']:16.3f} {r['async_drain_s']:9.3f} "
              f"{r['sync_blocked_s']:15.3f} {r['restore_s']:10.3f} {r['restore_step_s']:16.3f}",
              flush=True)
    return 0
