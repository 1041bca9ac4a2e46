#!/usr/bin/env bash
# Reproduce docs/issues/009-multi-crop from the repo root: docs/issues/009-multi-crop/run.sh
# 1. views from one 8 s window with and without 4 local crops (views per CPU-second);
# 2. the loader's peak RSS against buffers + 300 MB at 1-16 workers;
# 3. the whole-clip transform cost against the Python peers;
# 4. demo LeJEPA with the window alone and with 4 local crops (400 and 800 steps), the frozen
#    linear probe of the multi-crop encoder, and the BirdSet-style soundscape evaluation.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS=${RUNS:-runs/009-multi-crop}
export WANDB_MODE=${WANDB_MODE:-offline}
make data/demo/.done-split
mkdir -p "$RUNS"
.venv/bin/python -m benchmarks views --data "$RUNS/corpus60" --workers 1,2 --repeat 2 \
    --batches 8 --window_s 8 --local 4
.venv/bin/python -m benchmarks loader --data "$RUNS/corpus60" --workers 1,2,4,8,14,16 \
    --repeat 1 --batches 8 --no-peer
.venv/bin/python -m benchmarks transforms
train() {  # train NAME CONFIG [overrides...]
    local name=$1 cfg=$2
    shift 2
    [ -f "$RUNS/$name/COMPLETE" ] || .venv/bin/python -m birdjepa.pretrain \
        --cfg "configs/$cfg.toml" --run_dir="$RUNS/$name" "$@" | grep -E "eval|done"
}
train window_400 demo-lejepa --n_steps=400 --data.n_local=0
train window_800 demo-lejepa --data.n_local=0
train multicrop_400 demo-lejepa --n_steps=400
train multicrop_800 demo-lejepa
train multicrop_800_probe demo-random --init_encoder="$RUNS/multicrop_800"
.venv/bin/python -m birdjepa.evaluate --cfg configs/eval-demo.toml --out_dir="$RUNS/eval" \
    --encoders "$RUNS/window_400" --encoders "$RUNS/window_800" --encoders "$RUNS/multicrop_400" \
    --encoders "$RUNS/multicrop_800"
