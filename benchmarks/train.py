"""Training throughput: `python -m benchmarks train [--configs demo --configs vit-s] [--steps N]`.

For each config, first XLA's memory analysis of the compiled update (arguments, outputs, temporaries
and their sum less the donated aliases: the device memory the step asks for). Then the phases,
reported apart: the first update (trace + compile + run); the second (where a re-trace would
show: the traces and compiles of `update` are counted); the steady state of the step alone
(`--steps` updates after those two on one batch on the device, dispatched ahead and waited for
once: the device's own pace); and, unless `--synthetic_on_device`, `--steps` updates fed by the
loader one at a time: steps/s, views/s (clips x views), MFU (model FLOPs of birdjepa.train.flops
over the device's bf16/TF32 peak; n/a on CPU), per step the data wait, the host-to-device copy
and the step time, and the peak device memory where the backend reports it. Data comes from the
Rust loader (`birdjepa.data.Loader`) over `--data` (default: the demo corpus, `make
data/demo/.done-split`; its label column gives the class count), or with `--synthetic` from
in-memory random batches.

In the same process the peer, a plain-JAX ViT of the same shape (benchmarks/peer_vit.py), runs
two updates then `--steps` the same way as the step alone; its line gives its step time and
birdjepa's speed relative to it (peer time / birdjepa time: >= 1 is the goal). With `--remat
R` (repeatable) the step alone is also timed under each remat R, beside the config's own: the
step time and memory of each and the fastest (remat is chosen per GPU by measured time).
With `--memory_only` nothing runs: only the memory analysis, at the config's own batch size.
"""

import dataclasses
import time

import jax

import benchmarks.configs
import benchmarks.peer_vit
import birdjepa.common.cli_args as cli_args
import birdjepa.config
import birdjepa.data.synthetic
import birdjepa.model
import birdjepa.optim
import birdjepa.runtime.compiles
import birdjepa.train.flops
import birdjepa.train.loaders
import birdjepa.train.state
import birdjepa.train.step

GB = 1e9


def make_loader(cfg: birdjepa.config.Config, data: str | None):
    """The train loader over `data` (a shard directory; "" = the config's shards), or synthetic
    batches if None."""
    if data is None:
        return birdjepa.data.synthetic.loaders(cfg)[0]
    if data:
        cfg = dataclasses.replace(
            cfg, data=dataclasses.replace(cfg.data, train_shards=data, eval_shards=data))
    train, evals = birdjepa.train.loaders.make_loaders(cfg)
    evals.close()
    return train


def memory_analysis(cfg: birdjepa.config.Config) -> dict:
    """XLA's memory analysis of the update compiled for one device (nothing is allocated):
    bytes of arguments, outputs, temporaries, donated aliases, and total = arg + out + temp -
    alias."""
    cfg = birdjepa.config.finalize(cfg)
    state, static = birdjepa.params.abstract_state(cfg)
    tx = birdjepa.optim.make(cfg.optim, state["params"])
    sharding = jax.tree.leaves(state)[0].sharding
    fn = birdjepa.train.step.jit_update(cfg, static=static, tx=tx)
    m = fn.lower(state, birdjepa.train.state.abstract_batch(cfg, sharding)).compile().memory_analysis()
    out = {"argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes,
           "temp": m.temp_size_in_bytes, "alias": m.alias_size_in_bytes}
    out["total"] = out["argument"] + out["output"] + out["temp"] - out["alias"]
    return out


def _peak_memory() -> float | None:
    stats = jax.devices()[0].memory_stats()
    return None if not stats else stats.get("peak_bytes_in_use")


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0


def bench(cfg: birdjepa.config.Config, n_steps: int, *, synthetic: bool,
          on_device: bool = False) -> dict:
    """Phases of the updates of `cfg` (finalized here): the first (compile), the second, then
    `n_steps` of the step alone (one batch on the device, dispatched ahead) and, unless
    `on_device`, `n_steps` fed by the loader one at a time (data wait, copy, step)."""
    birdjepa.runtime.compiles.watch()
    traces0 = birdjepa.runtime.compiles.traces("update")
    compiles0 = len(birdjepa.runtime.compiles.compiles("update"))
    cfg = birdjepa.config.finalize(cfg)
    mesh = birdjepa.train.state.make_mesh()
    state, static, tx = birdjepa.train.state.init_state(cfg, mesh)
    update_fn = birdjepa.train.step.jit_update(cfg, static=static, tx=tx)
    loader = make_loader(cfg, None if synthetic or on_device else "")
    it = iter(loader)
    batch = birdjepa.train.state.shard_batch(next(it), cfg, mesh)
    (state, m), first_s = _timed(update_fn, state, batch)
    (state, m), second_s = _timed(update_fn, state, batch)
    t0 = time.perf_counter()
    for _ in range(n_steps):  # the step alone: dispatched ahead, waited for once at the end
        state, m = update_fn(state, batch)
    jax.block_until_ready(m)
    alone_s = (time.perf_counter() - t0) / n_steps
    wait = h2d = step = 0.0
    t_start = time.perf_counter()
    for _ in range(0 if on_device else n_steps):  # fed by the loader, one step at a time
        t0 = time.perf_counter()
        host = next(it)
        t1 = time.perf_counter()
        batch = jax.block_until_ready(birdjepa.train.state.shard_batch(host, cfg, mesh))
        wait, h2d = wait + t1 - t0, h2d + time.perf_counter() - t1
        (state, m), s = _timed(update_fn, state, batch)
        step += s
    total = time.perf_counter() - t_start if not on_device else alone_s * n_steps
    if hasattr(loader, "close"):
        loader.close()
    peak = birdjepa.train.flops.peak_flops(jax.devices()[0], dtype=cfg.model.compute_dtype)
    achieved = birdjepa.train.flops.flops_per_update(cfg) * n_steps / total
    return {
        "first_s": first_s,
        "second_ms": 1e3 * second_s,
        "traces": birdjepa.runtime.compiles.traces("update") - traces0,
        "compiles": len(birdjepa.runtime.compiles.compiles("update")) - compiles0,
        "steps_per_s": n_steps / total,
        "views_per_s": n_steps * cfg.batch_size * cfg.data.n_views / total,
        "mfu": None if peak is None else achieved / (peak * jax.device_count()),
        "tflops": achieved / 1e12,
        "data_wait_frac": wait / total,
        "h2d_ms": 1e3 * h2d / n_steps,
        "step_ms": 1e3 * (total if on_device else step) / n_steps,
        "alone_ms": 1e3 * alone_s,
        "peak_mem": _peak_memory(),
    }


def bench_peer(cfg: birdjepa.config.Config, n_steps: int) -> dict:
    """The plain-JAX ViT of `cfg`'s shape (benchmarks/peer_vit.py): first update (compile),
    then `n_steps` steady updates after a second one, dispatched ahead."""
    cfg = birdjepa.config.finalize(cfg)
    peer = benchmarks.peer_vit.PeerViT(cfg)
    params, opt = peer.init(jax.random.key(0))
    x = peer.batch(jax.random.key(1))
    (params, opt, loss), first_s = _timed(peer.update, params, opt, x)
    (params, opt, loss), _ = _timed(peer.update, params, opt, x)
    t0 = time.perf_counter()
    for _ in range(n_steps):
        params, opt, loss = peer.update(params, opt, x)
    jax.block_until_ready(loss)
    step_s = (time.perf_counter() - t0) / n_steps
    peak = birdjepa.train.flops.peak_flops(jax.devices()[0], dtype=cfg.model.compute_dtype)
    flops = birdjepa.train.flops.flops_per_update(cfg) / step_s
    return {"first_s": first_s, "step_ms": 1e3 * step_s, "views_per_s": peer.n_seq / step_s,
            "mfu": None if peak is None else flops / (peak * jax.device_count())}


def _fmt_bytes(x) -> str:
    return "n/a" if x is None else f"{x / GB:.2f} GB"


def print_memory(name: str, cfg: birdjepa.config.Config) -> None:
    m = memory_analysis(cfg)
    print(f"{name:8s} batch {cfg.batch_size:4d} x {cfg.data.n_views} views, "
          f"{birdjepa.config.architecture.resolve(cfg.model).compute_dtype} | XLA memory: args {_fmt_bytes(m['argument'])}, "
          f"out {_fmt_bytes(m['output'])}, temp {_fmt_bytes(m['temp'])}, alias "
          f"{_fmt_bytes(m['alias'])} -> total {_fmt_bytes(m['total'])} "
          f"({m['total']} B; {100 * (1 - m['total'] / 80e9):.0f}% headroom on 80 GB)", flush=True)


def main(argv: list[str]) -> int:
    p = cli_args.Parser("python -m benchmarks train", __doc__)
    p.add_list("configs", help="a config to measure (repeat for more; default: demo and vit-s)")
    p.add_argument("--steps", type=cli_args.converter(int), default=20,
                   help="steady-state updates per config (after the first two)")
    p.add_argument("--data", default=str(benchmarks.configs.CONFIGS.parent / "data" / "demo" / "train"),
                   help="shard directory for the Rust loader")
    p.add_flag("synthetic", "in-memory batches instead of the loader")
    p.add_flag("synthetic_on_device",
               "one batch kept on the device: the step alone, no loader, no copy")
    p.add_flag("memory_only", "only XLA's memory analysis, at each config's own batch size")
    p.add_list("remat", help="also time the step alone under this remat (repeat for more: none, "
               "dots, block), beside the config's own: step time and memory of each, to choose "
               "remat per GPU by measured time (docs/guides/gpus.md)")
    p.add_argument("--batch_size", type=cli_args.converter(int), default=None,
                   help="override batch_size (non-demo configs default to 4 on CPU)")
    a = p.parse_args(argv)
    a.configs = a.configs or ["demo", "vit-s"]
    synthetic = a.synthetic or a.synthetic_on_device
    print(f"{jax.device_count()} {jax.default_backend()} device(s); data: "
          f"{'synthetic' if synthetic else 'Rust loader on ' + a.data}"
          f"{' (on device)' if a.synthetic_on_device else ''}; steady state: {a.steps} updates "
          "after the first two")
    for name in a.configs:
        backend = "gpu" if a.memory_only else jax.default_backend()
        cfg = benchmarks.configs.load(name, a.batch_size, backend,
                                      data=None if synthetic else a.data)
        print_memory(name, cfg)
        if a.memory_only:
            continue
        r = bench(cfg, a.steps, synthetic=synthetic, on_device=a.synthetic_on_device)
        print(f"{name:8s} first update (trace + compile + run) {r['first_s']:.1f} s | second "
              f"{r['second_ms']:.1f} ms | traced {r['traces']}x, compiled {r['compiles']}x",
              flush=True)
        print(f"{name:8s} step alone | {r['alone_ms']:.1f} ms/step | "
              f"{1e3 * cfg.batch_size * cfg.data.n_views / r['alone_ms']:8.1f} views/s", flush=True)
        print(
            f"{name:8s} {'steady' if a.synthetic_on_device else 'fed':10s} | {r['steps_per_s']:7.2f} steps/s | {r['views_per_s']:8.1f} "
            f"views/s | {r['tflops']:.3g} TFLOP/s, MFU {_pct(r['mfu'])} | data wait "
            f"{100 * r['data_wait_frac']:4.1f}% | h2d {r['h2d_ms']:.1f} ms | step "
            f"{r['step_ms']:.1f} ms | peak mem {_fmt_bytes(r['peak_mem'])}", flush=True)
        peer = bench_peer(cfg, a.steps)
        m = birdjepa.config.finalize(cfg).model
        arrangement = ("scan" if m.scan_layers else "unrolled") + f", remat {m.remat}"
        print(f"{'peer':8s} step alone | plain-JAX ViT, same shape, {peer['step_ms']:.1f} ms/step | "
              f"{peer['views_per_s']:8.1f} views/s | MFU {_pct(peer['mfu'])} | first update "
              f"{peer['first_s']:.1f} s | birdjepa's step ({arrangement}) at "
              f"{peer['step_ms'] / r['alone_ms']:.2f}x the peer's speed", flush=True)
        remats = [x for x in a.remat or [] if x != m.remat]
        if remats:
            choose_remat(name, birdjepa.config.finalize(cfg), r, remats, a.steps, synthetic)
    return 0


def choose_remat(name: str, cfg: birdjepa.config.Config, own: dict, remats: list[str],
                 n_steps: int, synthetic: bool) -> None:
    """The step alone (one batch on the device) under each of `remats` beside the config's own
    (`own`, bench's result): step time and memory of each, and the fastest: remat is chosen per
    GPU by measured step time, memory only deciding what fits. `cfg` is finalized."""
    rows = {cfg.model.remat: (own["alone_ms"], own["peak_mem"], memory_analysis(cfg)["total"])}
    for remat in remats:
        c = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, remat=remat))
        mem = memory_analysis(c)["total"]
        r = bench(c, n_steps, synthetic=synthetic, on_device=True)
        rows[remat] = (r["alone_ms"], r["peak_mem"], mem)
    for remat, (ms, peak, mem) in rows.items():
        print(f"{name:8s} remat {remat:5s} | step alone {ms:7.1f} ms | XLA memory "
              f"{_fmt_bytes(mem)} | peak in use {_fmt_bytes(peak)}", flush=True)
    best = min(rows, key=lambda k: rows[k][0])
    print(f"{name:8s} fastest: remat {best} ({rows[best][0]:.1f} ms; the config's "
          f"{cfg.model.remat}: {rows[cfg.model.remat][0]:.1f} ms)", flush=True)


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"
