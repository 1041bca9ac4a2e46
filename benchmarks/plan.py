"""Will it fit, and use flash attention, on an H100 / H200 / A100 / L40S? Compile the real train
step with XLA's GPU compiler on a machine without a GPU:

    python -m benchmarks plan --gpus h100 l40s --configs vit-s vit-b --remat none dots block \
        --batch_size 256 512 --attention auto --json runs/gpu-plan.json

needs `jax[cuda12]` (same version as the CPU build; `make gpu-plan` sets up `.venv-gpu`). For each
GPU kind (a target config shipped in birdjepa/launch/gpuplan/targets), config (configs/NAME.toml or a
path; or every entry of `--sweep FILE` at its batch per device over `--devices`) and setting of
the grid (default: the config's own), it compiles `train.step.jit_update` on the abstract state,
placed on a one-device CUDA topology, and prints a row: XLA's memory analysis (argument, temp,
total; total against the device's memory), whether it fits with >= 15 % free, the cuDNN fused
attention calls in the optimised HLO and the model FLOPs per update (birdjepa.train.flops). No
step time: XLA's cost analysis returns none for this executable, and we do not make one up.
Rows are cached in the `--json` file by (config key, GPU, jax version, target config): a rerun
compiles only what changed. `--check` exits 1 if a config's own settings do not fit or compile no
fused attention on the H100.
"""

import argparse
import dataclasses
import hashlib
import importlib.util
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
# Without a device XLA cannot autotune; Triton GEMMs need tile sizes only autotuning gives.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0"
                           " --xla_gpu_enable_triton_gemm=false").strip()

import jax  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import benchmarks.configs  # noqa: E402
import birdjepa.common.cli_args as cli_args  # noqa: E402
import birdjepa.config  # noqa: E402
import birdjepa.config.architecture  # noqa: E402
import birdjepa.launch.gpuplan.rules as rules  # noqa: E402
import birdjepa.launch.gpuplan.targets as targets  # noqa: E402
import birdjepa.launch.sweep  # noqa: E402
import birdjepa.optim  # noqa: E402
import birdjepa.params  # noqa: E402
import birdjepa.train.flops  # noqa: E402
import birdjepa.train.state  # noqa: E402
import birdjepa.train.step  # noqa: E402

FMHA = 'custom_call_target="__cudnn$fmha'


def load_config(name: str) -> birdjepa.config.Config:
    """configs/NAME.toml or a path; n_classes defaults to 10 where the config leaves it unset."""
    path = pathlib.Path(name)
    if not path.suffix:
        path = benchmarks.configs.CONFIGS / f"{name}.toml"
    cfg = birdjepa.config.load(path)
    return dataclasses.replace(cfg, n_classes=cfg.n_classes or 10,
                               model=birdjepa.config.architecture.resolve(cfg.model))


def sweep_configs(path: str, devices: int) -> list[tuple[str, birdjepa.config.Config]]:
    """(run id, entry) of every sweep entry, at its batch per device over `devices` GPUs."""
    out = []
    for cfg in birdjepa.launch.sweep.resolve(path):
        if cfg.batch_size % devices:
            raise SystemExit(f"error: {cfg.run_id}: batch_size {cfg.batch_size} is not a "
                             f"multiple of --devices {devices}")
        out.append((cfg.run_id, dataclasses.replace(cfg, batch_size=cfg.batch_size // devices)))
    return out


def compile_step(cfg: birdjepa.config.Config, gpu: str) -> tuple[dict, int]:
    """(XLA's memory analysis in bytes, number of fused attention calls) of the update of a
    finalized `cfg` compiled for one `gpu`."""
    topo = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                        target_config=targets.target_config(gpu))
    mesh = topologies.make_mesh(topo, (1,), ("data",))
    sharding = NamedSharding(mesh, P())
    state, static = birdjepa.params.abstract_state(cfg, sharding=sharding)
    tx = birdjepa.optim.make(cfg.optim, state["params"])
    fn = birdjepa.train.step.jit_update(cfg, static=static, tx=tx)
    compiled = fn.lower(state, birdjepa.train.state.abstract_batch(cfg, sharding)).compile()
    m = compiled.memory_analysis()
    memory = {"argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes,
              "temp": m.temp_size_in_bytes, "alias": m.alias_size_in_bytes}
    return memory, compiled.as_text().count(FMHA)


def variant(cfg, remat: str, batch: int, attention: str) -> birdjepa.config.Config:
    model = dataclasses.replace(cfg.model, remat=remat, attention=attention)
    return birdjepa.config.finalize(dataclasses.replace(cfg, model=model, batch_size=batch))


def target_sha(gpu: str) -> str:
    return hashlib.sha256(targets.target_config(gpu).encode()).hexdigest()[:16]


def plan_one(name: str, cfg, gpu: str, settings: tuple, own: tuple, cache: list,
             done: list) -> dict:
    """The row of one compile, from `cache` if the same step, GPU, jax and target were planned;
    not compiled if a smaller batch of `done` (this config and GPU) with the same remat and
    attention already does not fit."""
    c = variant(cfg, *settings)
    key, sha = rules.plan_key(c), target_sha(gpu)
    for r in cache:
        if (r["key"], r["gpu"], r.get("jax"), r.get("target_sha")) == (key, gpu,
                                                                       jax.__version__, sha):
            return {**r, "config": name, "chosen": settings == own}
    t0 = time.perf_counter()
    smaller = [r for r in done if (r["remat"], r["attention"]) == (settings[0], settings[2])
               and r["batch_size"] < settings[1] and r["total_gb"] and not r["fits"]]
    if smaller:  # memory grows with the batch: spare the compiler a certain "no"
        memory, n_fmha, error = None, None, (
            f"not compiled: batch {smaller[0]['batch_size']} already needs "
            f"{smaller[0]['total_gb']:.1f} GB")
    else:
        try:
            memory, n_fmha, error = *compile_step(c, gpu), ""
        except Exception as e:  # the compiler's refusal is a result: record it
            memory, n_fmha = None, None
            error = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return rules.make_row(
        config=name, gpu=gpu, remat=settings[0], batch_size=settings[1], attention=settings[2],
        memory=memory, device_bytes=targets.device_memory(gpu), flash_attention=n_fmha,
        flops_per_update=birdjepa.train.flops.flops_per_update(c), chosen=settings == own,
        key=key, error=error, jax=jax.__version__, target_sha=sha,
        compute_capability=targets.compute_capability(gpu),
        compile_s=round(time.perf_counter() - t0, 1))


def _fmt(x, spec=".1f") -> str:
    """`x` in `spec`, or "-" as wide (right-aligned) where it is None."""
    width = spec.split(".")[0].rstrip("df")
    return format("-", f">{width or 1}") if x is None else format(x, spec)


def print_row(r: dict) -> None:
    print(f"{'*' if r['chosen'] else ' '} {r['config'][:12]:12s} {r['gpu']:8s} {r['remat']:5s} "
          f"{r['batch_size']:5d} {r['attention']:5s} {_fmt(r['argument_gb'], '6.2f')} "
          f"{_fmt(r['temp_gb'], '7.1f')} {_fmt(r['total_gb'], '8.1f')} {r['device_gb']:6.1f} "
          f"{_fmt(None if r['used_frac'] is None else 100 * r['used_frac'], '5.0f')}% "
          f"{'yes' if r['fits'] else 'NO ':4s} {_fmt(r['flash_attention'], '4d')} "
          f"{r['flops_per_update'] / 1e12:9.1f}  {r['error'][:60]}", flush=True)


def print_picks(rows: list[dict]) -> None:
    """Per config and GPU kind: the plan's pick (least remat, then the largest batch of the
    grid, that fits with >= 15 % free inside JAX's default pool)."""
    print("\nthe plan's pick (least remat, then the largest batch of the grid, that fits "
          f"with >= {100 * rules.HEADROOM:.0f} % free inside JAX's default "
          f"{100 * rules.JAX_POOL:.0f} % pool):")
    for (config, gpu) in dict.fromkeys((r["config"], r["gpu"]) for r in rows):
        pick = next((r for r in rows if (r["config"], r["gpu"]) == (config, gpu)
                     and r["pick"]), None)
        what = (f"nothing in the grid fits with >= {100 * rules.HEADROOM:.0f} % free inside "
                f"JAX's {100 * rules.JAX_POOL:.0f} % pool" if pick is None else
                f"attention {pick['attention']}: {rules.describe(pick)}"
                + ("" if pick["chosen"] else "  (differs from the config's own)"))
        print(f"  {config[:12]:12s} {gpu:8s} {what}")


HEADER = ("  config       gpu      remat batch attn  arg GB temp GB total GB dev GB  used fits "
          "fmha TFLOP/upd\n  (* = the config's own settings)")
def settings_grid(cfg, a) -> tuple[tuple, list[tuple]]:
    """(the config's own (remat, batch, attention), the grid's settings)."""
    own = (cfg.model.remat, cfg.batch_size, cfg.model.attention)
    grid = [(r, b, at) for r in (a.remat or [own[0]]) for b in (a.batch_size or [own[1]])
            for at in (a.attention or [own[2]])]
    return own, grid


def self_check(rows: list[dict], names: list[str]) -> list[str]:
    """Problems with each config's own settings on the H100: missing, not fitting, no fused
    attention (the check that `attention = "auto"` picks cuDNN under a CUDA topology)."""
    problems = []
    for name in names:
        own = [r for r in rows if r["config"] == name and r["gpu"] == "h100" and r["chosen"]]
        if not own:
            problems.append(f"{name}: its own settings were not planned on h100")
        for r in own:
            if not r["fits"] or r["error"]:
                problems.append(f"{name}: {rules.describe(r)}")
            elif not r["flash_attention"]:
                problems.append(f"{name}: no fused attention on h100 (attention "
                                f"{r['attention']!r})")
    return problems


def parse(argv: list[str]) -> argparse.Namespace:
    """Every option of `python -m benchmarks plan`, in one place (birdjepa.common.cli_args)."""
    p = cli_args.Parser("python -m benchmarks plan", __doc__)
    p.add_list("gpus", "a GPU kind to plan for; repeat for more (default: every shipped kind)",
               choices=targets.GPUS)
    p.add_list("configs", "configs/NAME.toml or a path; repeat for more (default: vit-s and "
               "vit-b unless --sweep)")
    p.add_argument("--sweep", default=None, help="plan every entry of this sweep file")
    p.add_argument("--devices", type=cli_args.converter(int), default=1,
                   help="with --sweep: GPUs per run (nodes x gpus_per_node); the batch per GPU "
                   "is batch_size / devices")
    p.add_list("remat", "a remat policy to compile; repeat for more (default: the config's)",
               choices=rules.REMAT_ORDER)
    p.add_list("batch_size", "a batch per GPU to compile; repeat for more (default: the "
               "config's)", type=cli_args.converter(int))
    p.add_list("attention", "an attention kind to compile; repeat for more (default: the "
               "config's)", choices=("auto", "cudnn", "xla"))
    p.add_argument("--json", default=None, help="write (and cache) the rows in this file")
    p.add_flag("force", "recompile rows already in the --json cache")
    p.add_flag("check", "exit 1 if a config's own settings do not fit or use no fused "
               "attention on the H100")
    a = p.parse_args(argv)
    a.gpus = a.gpus or list(targets.GPUS)
    return a


def main(argv: list[str]) -> int:
    a = parse(argv)
    if not any(importlib.util.find_spec(f"jax_cuda{v}_plugin") for v in (12, 13)):
        print("error: python -m benchmarks plan needs jax[cuda12] (XLA's GPU compiler), found "
              "no jax CUDA plugin; `make gpu-plan` builds .venv-gpu with it", file=sys.stderr)
        return 2
    if a.sweep:
        configs = sweep_configs(a.sweep, a.devices)
    else:
        configs = [(n, load_config(n)) for n in (a.configs or ["vit-s", "vit-b"])]
    cache = [] if a.force or not a.json else rules.load(a.json)
    print(f"jax {jax.__version__}, XLA's GPU compiler on {jax.default_backend()} "
          f"(no GPU used)\n{HEADER}", flush=True)
    rows = []
    for name, cfg in configs:
        own, grid = settings_grid(cfg, a)
        for gpu in a.gpus:
            mine = []
            for s in grid:
                mine.append(plan_one(name, cfg, gpu, s, own, cache, mine))
                print_row(mine[-1])
                if a.json:  # as it goes: a killed plan keeps what it compiled
                    rules.merge(a.json, [mine[-1]])
            pick = rules.choose(mine, min_batch=min(b for _, b, _ in grid))
            for r in mine:
                r["pick"] = r is pick
            rows += mine
    print_picks(rows)
    if a.json:
        rules.merge(a.json, rows)
        print(f"wrote {len(rows)} rows to {a.json}")
    problems = self_check(rows, [n for n, _ in configs]) if a.check else []
    for p in problems:
        print(f"CHECK FAILED: {p}", file=sys.stderr)
    return 1 if problems else 0
