#!/usr/bin/env bash
# Reproduce docs/issues/008-views-from-one-decode from the repo root:
#   docs/issues/008-views-from-one-decode/run.sh
# 1. the loader benchmark: 2 views per sample, a decode each against one decoded window;
# 2. the demo LeJEPA recipe (docs/issues/004-demo-learning) with both, each probed frozen by
#    the same linear probe as the random init.
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS=${RUNS:-runs/008-views}
export WANDB_MODE=${WANDB_MODE:-offline}
make data/demo/.done-split
.venv/bin/python -m benchmarks views --workers 1,2 --repeat 2 --batches 8 \
    --window_s "${WINDOW:-6}"
rm -rf "$RUNS"
mkdir -p "$RUNS"
run() {  # run NAME CONFIG [overrides...]
    local name=$1 cfg=$2
    shift 2
    echo "== $name (configs/$cfg.toml $*)"
    /usr/bin/time -f "wall %e s, user %U s, sys %S s" -o "$RUNS/$name.time" \
        .venv/bin/python -m birdjepa.pretrain --cfg "configs/$cfg.toml" --run_dir="$RUNS/$name" \
        "$@" | grep -E "eval|probe|step +400|step +600" | tail -4
    cat "$RUNS/$name.time"
}
# As measured here: 400 steps, no local crops (configs/demo-lejepa.toml now has both: 009).
OLD="--n_steps=400 --data.n_local=0"
run lejepa demo-lejepa $OLD --data.view_window_s=0
run lejepa_window demo-lejepa $OLD --data.view_window_s="${LEJEPA_WINDOW:-8}"
run lejepa_probe demo-random --init_encoder="$RUNS/lejepa"
run lejepa_window_probe demo-random --init_encoder="$RUNS/lejepa_window"
run random demo-random
