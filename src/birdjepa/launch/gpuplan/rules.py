"""The plan's rules, on recorded compile results (no JAX): what a row holds, when a config fits,
which settings the plan picks, the key that finds a config's rows again, and the plan file.

A row is one compile of the train step for one GPU kind: the config's name, `gpu`, the settings
compiled (`remat`, `batch_size` per device, `attention`), XLA's memory analysis of the executable
(argument, output, temp, alias; total = argument + output + temp - alias: the device memory the
step asks for), `fits` (total within the device memory less `HEADROOM`), `flash_attention` (the
number of cuDNN fused attention calls, `__cudnn$fmha...`, in the optimised HLO), FLOPs per update
by our own count, `chosen` (the config's own settings) and `key` (see `plan_key`)."""

import dataclasses
import hashlib
import json
import pathlib

import birdjepa.common.outputs as outputs
import birdjepa.config

HEADROOM = 0.15
"""Fraction of the device memory left free: a config fits if XLA's total is at most 85 % of it
(the allocator's fragmentation, cuDNN and cuBLAS workspaces and the runtime live there)."""
JAX_POOL = 0.75
"""Fraction of the device memory JAX preallocates for XLA by default (its
XLA_PYTHON_CLIENT_MEM_FRACTION): a step above it fails at run time unless that variable is
raised, so the choice keeps inside it."""
REMAT_ORDER = ("none", "dots", "block")
"""Least recomputation first: the order in which the choice prefers `model.remat`."""
GB = 1e9
SCHEMA = {
    "config": str, "gpu": str, "remat": str, "batch_size": int, "attention": str,
    "total_gb": float, "fits": bool, "flash_attention": int, "chosen": bool, "key": str,
    "argument_gb": float, "output_gb": float, "temp_gb": float, "alias_gb": float,
    "device_gb": float, "used_frac": float, "flops_per_update": float, "error": str,
}
"""Every row's keys and their types (a failed compile has the memory fields null, `fits` false
and the compiler's message in `error`; otherwise `error` is "")."""
_NULLABLE = {"total_gb", "argument_gb", "output_gb", "temp_gb", "alias_gb", "used_frac",
             "flash_attention"}

DATA_KEYS = ("n_views", "n_frames", "n_mels", "n_local", "local_frames", "local_s",
             "view_window_s", "sample_rate")
"""Data settings that shape the batch the step sees; the rest are the loader's concern."""
OPTIM_SCALARS = ("lr", "warmup", "final_lr_frac", "decay_frac", "weight_decay", "b1", "b2",
                 "muon_lr", "probe_lr")
"""Optimiser numbers that are constants in the step: they change no buffer."""


def fits(total_bytes: float, device_bytes: float, headroom: float = HEADROOM) -> bool:
    """Whether a step asking for `total_bytes` fits a device of `device_bytes` with `headroom`."""
    return total_bytes <= (1.0 - headroom) * device_bytes


def plan_key(cfg: birdjepa.config.Config) -> str:
    """16 hex digits identifying what the compiled step depends on: model, objective, the batch
    per device, n_classes, the batch's shape and the optimiser but for its constants. A sweep
    entry and a planned TOML with the same step share a key; paths, run ids, steps and logging
    do not enter it."""
    d = dataclasses.asdict(cfg)
    step = {"model": d["model"], "objective": d["objective"], "batch_size": d["batch_size"],
            "n_classes": d["n_classes"], "data": {k: d["data"][k] for k in DATA_KEYS},
            "optim": {k: v for k, v in d["optim"].items() if k not in OPTIM_SCALARS}}
    text = json.dumps(step, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_row(*, config: str, gpu: str, remat: str, batch_size: int, attention: str,
             memory: dict | None, device_bytes: int, flash_attention: int | None,
             flops_per_update: float, chosen: bool, key: str, error: str = "",
             **extra) -> dict:
    """One row from a compile's results; `memory` holds XLA's argument, output, temp and alias
    bytes (None when the compile failed, with its message in `error`)."""
    row = {"config": config, "gpu": gpu, "remat": remat, "batch_size": batch_size,
           "attention": attention, "key": key, "chosen": chosen, "error": error,
           "device_gb": device_bytes / GB, "flops_per_update": float(flops_per_update),
           "flash_attention": flash_attention}
    if memory is None:
        row.update({k: None for k in _NULLABLE - {"flash_attention"}}, fits=False)
    else:
        total = memory["argument"] + memory["output"] + memory["temp"] - memory["alias"]
        row.update({f"{k}_gb": memory[k] / GB for k in ("argument", "output", "temp", "alias")})
        row.update(total_gb=total / GB, used_frac=total / device_bytes,
                   fits=fits(total, device_bytes))
    return {**row, **extra}


def validate(rows: list, source: str = "plan") -> list[dict]:
    """`rows` if every row has SCHEMA's keys with their types; else ValueError naming the row,
    the key, the expected and the actual type."""
    if not isinstance(rows, list):
        raise ValueError(f"{source}: expected a list of rows, got {type(rows).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{source}, row {i}: expected an object, got {type(row).__name__}")
        for k, t in SCHEMA.items():
            if k not in row:
                raise ValueError(f"{source}, row {i}: expected a key {k!r}, found none")
            v = row[k]
            ok = (v is None and k in _NULLABLE) or (
                isinstance(v, t) and not (t is not bool and isinstance(v, bool))) or (
                t is float and isinstance(v, int) and not isinstance(v, bool))
            if not ok:
                raise ValueError(f"{source}, row {i}, {k!r}: expected {t.__name__}, "
                                 f"got {type(v).__name__} {v!r}")
        _check_verdict(row, f"{source}, row {i}")
    return rows


def _check_verdict(row: dict, where: str) -> None:
    """A row's `used_frac` and `fits` as its memory figures make them (a hand-edited plan
    said fits at 92 of 80 GB)."""
    total, device = row["total_gb"], row["device_gb"]
    if total is None:
        if row["fits"]:
            raise ValueError(f"{where}, 'fits': expected false for a row without memory "
                             "figures (a failed compile), got true")
        return
    if device <= 0:
        raise ValueError(f"{where}, 'device_gb': expected a positive size, got {device}")
    if row["used_frac"] is None or abs(row["used_frac"] - total / device) > 1e-6:
        raise ValueError(f"{where}, 'used_frac': expected total_gb / device_gb = "
                         f"{total / device:.4f}, got {row['used_frac']}")
    if row["fits"] != fits(total, device):
        raise ValueError(f"{where}, 'fits': expected {str(fits(total, device)).lower()} for "
                         f"{total:.1f} of {device:.1f} GB (fits at most {1 - HEADROOM:.0%}), "
                         f"got {str(row['fits']).lower()}")


def choose(rows: list[dict], *, min_batch: int) -> dict | None:
    """The plan's pick among one config's rows on one GPU kind: of the rows that compiled, fit
    and stay inside JAX's default pool (JAX_POOL), at a batch of at least `min_batch` (the
    plan's smallest batch: a batch below those asked for is never bought with less
    recomputation), the least recomputation (REMAT_ORDER), then the largest batch, then fused
    attention over none, then "auto" over a forced kernel. None if nothing qualifies."""
    ok = [r for r in rows if r["fits"] and not r["error"] and r["batch_size"] >= min_batch
          and r["used_frac"] <= JAX_POOL]
    if not ok:
        return None
    return min(ok, key=lambda r: (REMAT_ORDER.index(r["remat"]), -r["batch_size"],
                                  not r["flash_attention"], r["attention"] != "auto"))


def load(path: str | pathlib.Path) -> list[dict]:
    """The rows of a plan file (`--json` of `python -m benchmarks plan`); [] if absent."""
    path = pathlib.Path(path)
    if not path.is_file():
        return []
    try:
        rows = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e
    return validate(rows, str(path))


def save(path: str | pathlib.Path, rows: list[dict]) -> None:
    """Write `rows` to the plan file `path` (atomically)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    outputs.write_text(path, json.dumps(validate(rows), indent=1) + "\n")


def merge(path: str | pathlib.Path, rows: list[dict]) -> None:
    """Add `rows` to the plan file `path`, replacing its rows of the same step and GPU."""
    new = {(r["key"], r["gpu"]) for r in rows}
    save(path, [r for r in load(path) if (r["key"], r["gpu"]) not in new] + rows)


def lookup(rows: list[dict], key: str, gpu: str) -> dict | None:
    """The newest row of `rows` compiled for step `key` on `gpu`, or None: not planned."""
    hits = [r for r in rows if r["key"] == key and r["gpu"] == gpu]
    return hits[-1] if hits else None


def describe(row: dict | None) -> str:
    """One line on a row for a person: fits or not, memory, headroom, fused attention."""
    if row is None:
        return "not planned"
    if row["error"]:
        return f"compile failed on {row['gpu']}: {row['error']}"
    verdict = "fits" if row["fits"] else "does NOT fit"
    pool = ("" if not row["fits"] or row["used_frac"] <= JAX_POOL else
            f"; above JAX's default {100 * JAX_POOL:.0f} % pool: set "
            "XLA_PYTHON_CLIENT_MEM_FRACTION=0.9")
    return (f"{verdict} on {row['gpu']}: {row['total_gb']:.1f} of {row['device_gb']:.1f} GB "
            f"({100 * (1 - row['used_frac']):.0f} % free, needs >= {100 * HEADROOM:.0f} %), "
            f"{row['flash_attention']} fused attention call(s), remat {row['remat']}, "
            f"batch {row['batch_size']} per GPU{pool}")


def entry_line(cfg: birdjepa.config.Config, gpu: str, devices: int, rows: list[dict],
               source: str) -> tuple[str, bool]:
    """(line, ok) on a finalized run config trained on `devices` GPUs of kind `gpu`, from the
    plan's `rows` (read from `source`): ok is False only for a planned step that does not fit
    or did not compile; a step without a row is "not planned", with the command that plans it."""
    per_device, rest = divmod(cfg.batch_size, max(devices, 1))
    if rest:
        return (f"plan: batch_size {cfg.batch_size} is not a multiple of the {devices} GPUs",
                False)
    row = lookup(rows, plan_key(dataclasses.replace(cfg, batch_size=per_device)), gpu)
    if row is None:
        return (f"plan: not planned (no row in {source} for this step at batch {per_device} "
                f"per GPU on {gpu}; `python -m benchmarks plan --sweep SWEEP --devices "
                f"{devices} --gpus {gpu} --json {source}` plans it)", True)
    return f"plan: {describe(row)}", row["fits"] and not row["error"]
