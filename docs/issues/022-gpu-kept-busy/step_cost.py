"""The train step's cost as XLA's GPU compiler sees it, without a GPU: compile the update of a
config for the H100 target (benchmarks/plan.py's deviceless recipe) and print XLA's own cost
analysis of the optimised module (FLOPs, bytes accessed: the step is memory-bound outside the
matmuls, so fewer bytes means a faster step) beside the plain-JAX peer of the same shape, plus
the kernels that move the most bytes and the count of copies.

    .venv-gpu/bin/python docs/issues/022-gpu-kept-busy/step_cost.py vit-s [--batch 512]
"""

import argparse
import collections
import dataclasses
import functools
import os
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
import birdjepa.config
import birdjepa.launch.gpuplan.targets as targets
import birdjepa.optim
import birdjepa.params
import birdjepa.train.flops
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--gpu", default="h100")
    p.add_argument("--model", action="append", default=[], metavar="KEY=VALUE",
                   help="a model setting changed (TOML value), e.g. qk_norm=false")
    p.add_argument("--peer", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--unroll", action="store_true",
                   help="trace every lax.scan unrolled: XLA's cost analysis counts a while "
                   "loop's body once, so only an unrolled step is counted whole")
    a = p.parse_args()
    if a.unroll:
        jax.lax.scan = functools.partial(jax.lax.scan, unroll=True)
    cfg = plan.load_config(a.config)
    if a.batch:
        cfg = cfg.__class__(**{**cfg.__dict__, "batch_size": a.batch})
    for kv in a.model:
        key, value = kv.split("=", 1)
        value = tomllib.loads(f"v = {value}")["v"]
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **{key: value}))
    cfg = birdjepa.config.finalize(cfg)
    topo = topologies.get_topology_desc(platform="cuda", topology="1x1x1",
                                        target_config=targets.target_config(a.gpu))
    mesh = topologies.make_mesh(topo, (1,), ("data",))
    sharding = NamedSharding(mesh, P())
    state, static = birdjepa.params.abstract_state(cfg, sharding=sharding)
    tx = birdjepa.optim.make(cfg.optim, state["params"])
    fn = birdjepa.train.step.jit_update(cfg, static=static, tx=tx)
    ours = fn.lower(state, plan.abstract_batch(cfg, sharding)).compile()
    peer = benchmarks.peer_vit.PeerViT(cfg, platform="gpu")
    p_state = jax.eval_shape(peer.init, jax.random.key(0))
    p_state = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                           p_state)
    x = jax.ShapeDtypeStruct((peer.n_seq, peer.t, peer.mels), jax.numpy.float32,
                             sharding=sharding)
    theirs = peer.update.lower(*p_state, x).compile() if a.peer else None
    model_flops = birdjepa.train.flops.flops_per_update(cfg)
    print(f"{a.config} batch {cfg.batch_size} x {cfg.data.n_views} views, {a.gpu}, "
          f"remat {cfg.model.remat}; model FLOPs/update {model_flops / 1e12:.2f} T")
    for name, c in (("birdjepa", ours), ("peer", theirs))[:2 if a.peer else 1]:
        k = cost(c)
        text = c.as_text()
        if os.environ.get("DUMP"):
            with open(f"{os.environ['DUMP']}.{name}.hlo", "w") as f:
                f.write(text)
        m = c.memory_analysis()
        mem = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
               - m.alias_size_in_bytes)
        print(f"{name:9s} XLA flops {k.get('flops', 0) / 1e12:8.2f} T | bytes accessed "
              f"{k.get('bytes accessed', 0) / 1e9:8.1f} GB | memory {mem / 1e9:5.1f} GB | fused attention "
              f"{text.count(plan.FMHA)} | copies {len(re.findall(r' copy[.(]', text))}")
        moved, kinds = kernels(text)
        print(f"{'':9s} kernels read + write {moved / 1e9:.1f} GB per update (loops counted "
              "by their trip count)")
        for kind, (n, b) in kinds:
            print(f"    {kind[:48]:48s} x{n:<5d} {b / 1e9:7.1f} GB")


if __name__ == "__main__":
    main()
