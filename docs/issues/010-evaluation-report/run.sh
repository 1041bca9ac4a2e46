#!/bin/bash
# Reproduces docs/issues/010-evaluation-report: the demo data (+ soundscapes), the supervised and
# LeJEPA encoders (the shipped configs), then 3 encoders x 4 probes x k in {1, 5, all} x 5 seeds
# with every metric, intervals, results.parquet/.csv/.md/.png. Everything under $WORK (default
# /tmp/eval010). Run from the repository root. BEFORE=1 also times the previous evaluator
# (commit f51f519) on the same encoders and data.
set -euo pipefail
WORK=${WORK:-/tmp/eval010}
PY=${PY:-python}
D="--data.train_shards=$WORK/data/train --data.eval_shards=$WORK/data/eval"
[ -f "$WORK/data/train/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$WORK/data/train" --seed 0 \
    --n-recordings 576 --min-s 5 --max-s 20 --overwrite
[ -f "$WORK/data/eval/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$WORK/data/eval" --seed 1 \
    --n-recordings 240 --n-shards 2 --min-s 5 --max-s 10 --overwrite
[ -f "$WORK/data/soundscape/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$WORK/data/soundscape" \
    --soundscapes 24 --n-segments 12 --n-shards 2 --seed 2 --overwrite
[ -f "$WORK/runs/supervised/COMPLETE" ] || $PY -m birdjepa.pretrain \
    --cfg configs/demo.toml $D --run_dir="$WORK/runs/supervised" --wandb.mode=disabled
[ -f "$WORK/runs/lejepa/COMPLETE" ] || $PY -m birdjepa.pretrain \
    --cfg configs/demo-lejepa.toml $D --run_dir="$WORK/runs/lejepa" --wandb.mode=disabled
EVAL="--cfg configs/eval-demo.toml --encoders $WORK/runs/supervised --encoders $WORK/runs/lejepa \
    --train_shards=$WORK/data/train --test_shards=$WORK/data/soundscape"
if [ "${BEFORE:-0}" = 1 ]; then  # the previous evaluator, 5 seeds
    rm -rf "$WORK/before" "$WORK/eval-before" && mkdir -p "$WORK/before"
    git archive f51f519 src | tar -x -C "$WORK/before"
    cp src/birdjepa/_rs*.so "$WORK/before/src/birdjepa/"
    time PYTHONPATH="$WORK/before/src" $PY -m birdjepa.evaluate $EVAL --seeds 0 1 2 3 4 \
        --out_dir="$WORK/eval-before"
fi
rm -rf "$WORK/eval"  # no embedding cache: the timing includes embedding
time $PY -m birdjepa.evaluate $EVAL --out_dir="$WORK/eval"
$PY -m birdjepa.evaluate.report "$WORK/eval" --format markdown --metric cmap
