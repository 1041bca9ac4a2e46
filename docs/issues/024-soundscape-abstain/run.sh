#!/usr/bin/env bash
# Reproduces docs/issues/024-soundscape-abstain (the "before" of issue 36 item 2) on a CPU
# machine, from the checkout's root after `make setup` and `make data/demo/.done-split`
# (the demo corpus with its soundscape split). About 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=docs/issues/024-soundscape-abstain
W=${W:-/tmp/issue-024}
PY=.venv/bin/python
train() {  # run_dir, extra settings
    [ -f "$1/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir="$1" \
        --wandb.mode=disabled "${@:2}"
}
# 1. The main job as shipped: focal recordings of 5-20 s, 5 s crops (no padding to learn).
train "$W/focal"
# 2. The field's case: short focal clips (1.5-4 s, zero-padded to 5 s), the same species.
[ -f "$W/short/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$W/short" --seed 0 \
    --n_recordings 576 --min_s 1.5 --max_s 4 --workers 2 --overwrite
train "$W/short-zero" --data.train_shards="$W/short"
# 3. The same short clips padded with the clip's minimum log-mel (data.pad = "min").
train "$W/short-min" --data.train_shards="$W/short" --data.pad=min
for r in focal short-zero short-min; do
    echo "== $r"; $PY "$D/study.py" "$W/$r"
done
