"""The GPU kinds the plan compiles for: one XLA GpuTargetConfigProto per kind, as text in
`targets/<kind>.txtpb`, each field's source in the file's comments."""

import pathlib
import re

DIR = pathlib.Path(__file__).resolve().parent / "targets"
GPUS = ("h100", "h200", "a100-80g", "l40s")
"""Kinds with a shipped target config, in the plan's order."""


def _check(gpu: str) -> pathlib.Path:
    path = DIR / f"{gpu}.txtpb"
    if gpu not in GPUS or not path.is_file():
        raise ValueError(f"GPU kind: expected one of {', '.join(GPUS)}, got {gpu!r}")
    return path


def target_config(gpu: str) -> str:
    """The text proto for `gpu` (for jax.experimental.topologies.get_topology_desc)."""
    return _check(gpu).read_text()


def _field(gpu: str, name: str) -> str:
    m = re.search(rf"^\s*{name}:\s*(\S+)", target_config(gpu), re.MULTILINE)
    if m is None:
        raise ValueError(f"{_check(gpu)}: expected a field {name}, found none")
    return m.group(1)


def device_memory(gpu: str) -> int:
    """Bytes of device memory the target config declares (device_memory_size)."""
    return int(_field(gpu, "device_memory_size"))


def compute_capability(gpu: str) -> str:
    """"major.minor" of the target config's CUDA compute capability."""
    text = target_config(gpu)
    m = re.search(r"cuda_compute_capability\s*{\s*major:\s*(\d+)\s*(?:minor:\s*(\d+))?", text)
    return f"{m.group(1)}.{m.group(2) or 0}"
