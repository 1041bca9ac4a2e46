"""Render a plan file as this write-up's tables (no JAX):

    PYTHONPATH=src python docs/issues/020-gpu-plan/table.py [runs/gpu-plan.json]

every compiled row, then the plan's pick per config and GPU kind (birdjepa.launch.gpuplan.rules.choose
over the batches planned)."""

import sys

import birdjepa.launch.gpuplan.rules as rules

NAMES = {"h100": "H100 80GB", "h200": "H200 141GB", "a100-80g": "A100 80GB", "l40s": "L40S 48GB"}


def all_rows(rows: list[dict]) -> None:
    print("| config | GPU | remat | batch x 2 views | attention | argument GB | temp GB | total GB "
          "| of device | fits | fused attention calls |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r["total_gb"] is not None:
            print(f"| {r['config']} | {r['gpu']} | {r['remat']} | {r['batch_size']} | "
                  f"{r['attention']} | {r['argument_gb']:.2f} | {r['temp_gb']:.1f} | "
                  f"{r['total_gb']:.1f} | {100 * r['used_frac']:.0f} % of {r['device_gb']:.1f} | "
                  f"{'yes' if r['fits'] else 'no'} | {r['flash_attention']} |")


def picks(rows: list[dict]) -> None:
    configs = sorted({r["config"] for r in rows}, reverse=True)
    print("| GPU (target) | " + " | ".join(f"{c}: remat, batch x 2 views, total" for c in configs)
          + " |")
    print("| --- |" + " --- |" * len(configs))
    for gpu in NAMES:
        cells = []
        for c in configs:
            mine = [r for r in rows if (r["config"], r["gpu"]) == (c, gpu)]
            pick = rules.choose(mine, min_batch=min((r["batch_size"] for r in mine), default=0))
            cells.append("not planned" if not mine else "nothing fits" if pick is None else
                         f"{pick['remat']}, {pick['batch_size']}, {pick['total_gb']:.1f} GB "
                         f"({100 * pick['used_frac']:.0f} %), {pick['flash_attention']} fused")
        print(f"| {NAMES[gpu]} ({gpu}) | " + " | ".join(cells) + " |")


def main(path: str = "runs/gpu-plan.json") -> None:
    rows = rules.load(path)
    rows.sort(key=lambda r: (r["config"], r["gpu"], r["batch_size"], r["remat"], r["attention"]))
    all_rows(rows)
    print()
    picks([r for r in rows if r["attention"] == "auto"])


if __name__ == "__main__":
    main(*sys.argv[1:])
