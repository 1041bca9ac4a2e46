"""The step's bytes as XLA's GPU compiler sees it, without a GPU: `python -m benchmarks bytes
[--configs vit-s --configs vit-b] [--batch_size N] [--model KEY=VALUE]... [--features host,device]`
(in `.venv-gpu`, `make bytes`).

For each config it compiles the train update for the H100 target (benchmarks/plan.py's deviceless
recipe) beside the plain-JAX peer of the same shape (benchmarks/peer_vit.py, its own best
arrangement: a scan with remat "dots") and prints what each kernel of the optimised HLO reads and
writes per update (operands and results; only the touched slice of in-place slicing fusions;
loop bodies times their trip count: XLA's own cost analysis counts a loop's body once), XLA's
memory analysis, the cuDNN fused attention calls and the copies, and birdjepa's bytes against
the peer's. Outside the matmuls the step is memory-bound, so bytes track time: on an H200 the
ratio of bytes predicted the ratio of measured step times within 5 % (docs/issues/022-gpu-kept-
busy section 5, docs/issues/028-step-beats-peer). With `--features host,device` birdjepa's step
is also compiled with `data.features = "device"` (int16 windows, as from a packed corpus): the
log-mel features' cost on the device, in bytes and in XLA's FLOPs.
"""

import collections
import dataclasses
import re
import tomllib

# isort: off
import benchmarks.plan as plan  # sets the deviceless environment before jax is imported
# isort: on
import jax
from jax._src.lib import xla_client
from jax.experimental import topologies
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import benchmarks.peer_vit
import birdjepa.common.cli_args as cli_args
import birdjepa.config
import birdjepa.launch.gpuplan.targets as targets
import birdjepa.optim
import birdjepa.params
import birdjepa.train.flops
import birdjepa.train.state
import birdjepa.train.step

SHAPE = re.compile(r"(pred|s8|u8|s16|u16|bf16|f16|s32|u32|f32|s64|u64|f64)\[([0-9,]*)\]")
BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "bf16": 2, "f16": 2, "s32": 4,
         "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}


def cost(compiled) -> dict:
    """XLA's HloCostAnalysis of the optimised module (flops, bytes accessed)."""
    out = compiled.cost_analysis()
    if out:
        return out[0] if isinstance(out, list) else out
    module = compiled.runtime_executable().hlo_modules()[0]
    return xla_client._xla.hlo_module_cost_analysis(jax.devices("cpu")[0].client, module)


def _size(t: str) -> int:
    """Bytes of an HLO type (a tuple: its elements), workspaces (s8/u8) left out."""
    total = 0
    for ty, dims in SHAPE.findall(t):
        if ty in ("s8", "u8"):
            continue
        n = 1
        for d in dims.split(","):
            n *= int(d) if d else 1
        total += BYTES[ty] * n
    return total


INSTR = re.compile(r"^(?:ROOT )?(%[\w.\-]+) = (\(.*?\)|\w+\[[0-9,]*\](?:\{[^}]*\})?) "
                   r"([\w\-]+)\((.*?)\)(.*)$")


def _computations(text: str) -> dict[str, list[tuple]]:
    """name -> [(instruction, type, opcode, operand names, attributes, raw operands)]."""
    comps, name = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith("{"):
            head = line.split()
            name = head[1] if head[0] == "ENTRY" else head[0]
            comps[name] = []
        elif name and (m := INSTR.match(line.strip())):
            comps[name].append((m.group(1), m.group(2), m.group(3),
                                re.findall(r"%[\w.\-]+", m.group(4)), m.group(5), m.group(4)))
    return comps


def _fusion_io(fused: list[tuple], operands: list[int], result: int) -> int:
    """Bytes a fusion kernel moves: each operand it reads (only the slices of one it only
    dynamic-slices; nothing of a buffer it updates in place) and what it writes (only the
    update of an in-place dynamic-update-slice)."""
    by_name = {i[0]: i for i in fused}
    param = {i[0]: int(i[5]) for i in fused if i[2] == "parameter"}
    users: dict[str, list[tuple]] = {}
    for i in fused:
        for a in i[3]:
            users.setdefault(a, []).append(i)
    root = fused[-1]
    outs = [by_name[a] for a in root[3] if a in by_name] if root[2] == "tuple" else [root]
    in_place, written = set(), 0
    for o in outs:
        if o[2] == "dynamic-update-slice" and o[3][0] in param:
            in_place.add(o[3][0])
            written += _size(by_name[o[3][1]][1]) if o[3][1] in by_name else 0
        else:
            written += _size(o[1])
    read = 0
    for pn, k in param.items():
        us = users.get(pn, [])
        if pn in in_place:
            continue
        if us and all(u[2] == "dynamic-slice" for u in us):
            read += sum(_size(u[1]) for u in us)
        elif k < len(operands):
            read += operands[k]
    return read + written


def kernels(text: str, top: int = 8):
    """Bytes each kernel of the optimised HLO reads and writes (its operands and results, only
    the touched slices of in-place slicing fusions), loop bodies times their known trip count:
    (total bytes, the biggest kinds). XLA's own cost analysis counts a loop body once."""
    comps = _computations(text)
    trip = {}
    for instrs in comps.values():
        for _, _, op, _, attrs, _ in instrs:
            m = re.search(r'body=(%[\w.\-]+).*known_trip_count":\{"n":"(\d+)', attrs)
            if op == "while" and m:
                trip[m.group(1)] = int(m.group(2))
    mult = {n: 1 for n in comps}
    for body, n in trip.items():  # nested loops: a body inside a body
        mult[body] = n
    for _ in range(4):
        for cname, instrs in comps.items():
            for _, _, op, _, attrs, _ in instrs:
                m = re.search(r"body=(%[\w.\-]+)", attrs)
                if op == "while" and m and m.group(1) in trip:
                    mult[m.group(1)] = trip[m.group(1)] * mult[cname]
    agg = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for cname, instrs in comps.items():
        if cname.startswith(("%fused", "%wrapped", "%region")) and cname not in trip:
            continue
        shapes = {i[0]: i[1] for i in instrs}
        for _, typ, op, args, attrs, _ in instrs:
            if op in ("parameter", "get-tuple-element", "tuple", "bitcast", "constant", "while",
                      "call", "conditional", "after-all", "partition-id", "replica-id"):
                continue
            ins = [_size(shapes.get(a, "")) for a in args]
            out = _size(typ)
            m = re.search(r"calls=(%[\w.\-]+)", attrs)
            if op == "fusion" and m and m.group(1) in comps:
                moved = _fusion_io(comps[m.group(1)], ins, out)
                kind = "fusion:" + re.search(r"kind=(\w+)", attrs).group(1)
            else:
                moved = sum(ins) + out
                kind = op
            if op == "custom-call":
                kind += ":" + re.search(r'custom_call_target="([^"]+)"', attrs).group(1)
            agg[kind][0] += mult.get(cname, 1)
            agg[kind][1] += mult.get(cname, 1) * moved
            total += mult.get(cname, 1) * moved
    return total, sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]


def measure(compiled) -> dict:
    """Bytes moved (kernels), XLA's memory analysis total and FLOPs, fused attention calls and
    copies of a compiled step."""
    text, m = compiled.as_text(), compiled.memory_analysis()
    moved, top = kernels(text)
    return {"bytes": moved, "top": top, "flops": cost(compiled).get("flops", 0.0),
            "memory": (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                       - m.alias_size_in_bytes),
            "fmha": text.count(plan.FMHA), "copies": len(re.findall(r" copy[.(]", text))}


def compile_ours(cfg, sharding, *, wave_dtype: str = "int16"):
    state, static = birdjepa.params.abstract_state(cfg, sharding=sharding)
    tx = birdjepa.optim.make(cfg.optim, state["params"])
    fn = birdjepa.train.step.jit_update(cfg, static=static, tx=tx)
    batch = birdjepa.train.state.abstract_batch(cfg, sharding, wave_dtype=wave_dtype)
    return fn.lower(state, batch).compile()


def compile_peer(cfg, sharding):
    peer = benchmarks.peer_vit.PeerViT(cfg, platform="gpu")
    p_state = jax.eval_shape(peer.init, jax.random.key(0))
    p_state = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                           p_state)
    x = jax.ShapeDtypeStruct((peer.n_seq, peer.t, peer.mels), jax.numpy.float32,
                             sharding=sharding)
    return peer.update.lower(*p_state, x).compile()


def _line(name: str, r: dict, views: int) -> str:
    return (f"{name:16s} {r['bytes'] / 1e9:8.1f} GB read+written ({r['bytes'] / views / 1e6:6.1f} "
            f"MB/view) | memory {r['memory'] / 1e9:5.1f} GB | XLA FLOPs {r['flops'] / 1e12:6.2f} T "
            f"| fused attention {r['fmha']} | copies {r['copies']}")


def main(argv: list[str]) -> int:
    p = cli_args.Parser("python -m benchmarks bytes", __doc__)
    p.add_list("configs", help="a config (configs/NAME.toml or a path; default: vit-s, vit-b)")
    p.add_argument("--batch_size", type=cli_args.converter(int), default=None,
                   help="override the config's batch size")
    p.add_argument("--gpu", default="h100", help="the GPU target (birdjepa.launch.gpuplan)")
    p.add_list("model", help="a model setting changed, KEY=VALUE in TOML (e.g. qk_norm=false)")
    p.add_argument("--features", default="host",
                   help="birdjepa's step with these data.features, comma-separated (host,device)")
    p.add_argument("--top", type=cli_args.converter(int), default=0,
                   help="also list the kinds of kernel that move the most bytes")
    a = p.parse_args(argv)
    topo = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                        target_config=targets.target_config(a.gpu))
    sharding = NamedSharding(topologies.make_mesh(topo, (1,), ("data",)), P())
    for name in a.configs or ["vit-s", "vit-b"]:
        cfg = plan.load_config(name)
        if a.batch_size:
            cfg = dataclasses.replace(cfg, batch_size=a.batch_size)
        for kv in a.model or []:
            key, value = kv.split("=", 1)
            value = tomllib.loads(f"v = {value}")["v"]
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **{key: value}))
        cfg = birdjepa.config.finalize(cfg)
        m, views = cfg.model, cfg.batch_size * cfg.data.n_views
        print(f"{name} batch {cfg.batch_size} x {cfg.data.n_views} views on {a.gpu}: remat "
              f"{m.remat}, scan_layers {str(m.scan_layers).lower()}, residual {m.residual_dtype}"
              f"; model FLOPs/update {birdjepa.train.flops.flops_per_update(cfg) / 1e12:.2f} T",
              flush=True)
        peer = measure(compile_peer(cfg, sharding))
        print(_line("peer", peer, views), flush=True)
        base = None
        for features in a.features.split(","):
            c = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, features=features))
            r = measure(compile_ours(c, sharding))
            base = base or r
            extra = "" if r is base else (
                f" | vs host features: bytes {100 * (r['bytes'] / base['bytes'] - 1):+.1f} %, "
                f"XLA FLOPs {100 * (r['flops'] / base['flops'] - 1):+.1f} %")
            print(_line(f"birdjepa {features}", r, views) + extra, flush=True)
            print(f"{'':16s} birdjepa / peer bytes {r['bytes'] / peer['bytes']:.3f} (predicted "
                  f"speed {peer['bytes'] / r['bytes']:.2f}x the peer's)", flush=True)
            for kind, (n, b) in r["top"][:a.top]:
                print(f"    {kind[:48]:48s} x{n:<5d} {b / 1e9:7.1f} GB")
    return 0
