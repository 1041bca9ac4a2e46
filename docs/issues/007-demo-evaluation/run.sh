#!/bin/bash
# Reproduces docs/issues/007-demo-evaluation: demo data (+ soundscapes), LeJEPA and supervised
# training (the shipped configs), then 3 encoders x 4 probes x k in {1,5,all} x 3 seeds.
# Everything under $WORK (default /tmp/eval007). Run from the repository root.
set -euo pipefail
WORK=${WORK:-/tmp/eval007}
PY=${PY:-python}
D="--data.train_shards=$WORK/data/train --data.eval_shards=$WORK/data/eval"
[ -f "$WORK/data/train/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$WORK/data/train" --seed 0 \
    --n_recordings 576 --min_s 5 --max_s 20 --overwrite
[ -f "$WORK/data/eval/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$WORK/data/eval" --seed 1 \
    --n_recordings 240 --n_shards 2 --min_s 5 --max_s 10 --overwrite
[ -f "$WORK/data/soundscape/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$WORK/data/soundscape" \
    --soundscapes 24 --n-segments 12 --n_shards 2 --seed 2 --overwrite
# Session 1 (tables "Session 1" in README.md): LeJEPA --n_steps=400 --data.view_window_s=0
# --data.n_local=0, supervised --n_steps=300, and eval with --train_windows=centre.
[ -f "$WORK/runs/lejepa/COMPLETE" ] || $PY -m birdjepa.pretrain \
    --cfg configs/demo-lejepa.toml $D --run_dir="$WORK/runs/lejepa" --wandb.mode=disabled
[ -f "$WORK/runs/supervised/COMPLETE" ] || $PY -m birdjepa.pretrain \
    --cfg configs/demo.toml $D --run_dir="$WORK/runs/supervised" --wandb.mode=disabled
rm -rf "$WORK/eval-full"
time $PY -m birdjepa.evaluate --cfg configs/eval-demo.toml \
    --encoders "$WORK/runs/supervised" --encoders "$WORK/runs/lejepa" \
    --train_shards="$WORK/data/train" --test_shards="$WORK/data/soundscape" \
    --out_dir="$WORK/eval-full"
