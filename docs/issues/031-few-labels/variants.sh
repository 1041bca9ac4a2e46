#!/usr/bin/env bash
# One-setting variants of train.sh's fine-tuning (docs/issues/031-few-labels/README.md; the
# study's lr3e-3 runs: variants.sh lr3e-3 K "1 2 3" --optim.lr=3e-3):
#   bash docs/issues/031-few-labels/variants.sh TAG K "SEEDS" ARGS...
# trains runs/fs/ft-TAG-kK-sS for each seed S: configs/demo.toml from the label-free encoder on
# the k labels of seed S, with ARGS (e.g. --optim.lr=3e-4) on top.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
tag=$1 k=$2 seeds=$3; shift 3
for s in $seeds; do
  src=data/demo/fewshot/labelled-k$k-s$s
  [ -e "$src/state.json" ] || $PY -m birdjepa.sources fewshot data/demo/train --out_dir "$src" \
    --k "$k" --seed "$s" --lenient >/dev/null 2>&1
  d=runs/fs/ft-$tag-k$k-s$s
  [ -e "$d/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir="$d" \
    --seed=$((s - 1)) --init_encoder=runs/demo-lejepa --data.train_shards="$src" "$@" \
    > "$d.log" 2>&1
done
