#!/usr/bin/env bash
# Issue 49's trainings on the demo corpus (docs/issues/031-few-labels/README.md), after
# `make runs/demo/COMPLETE runs/demo-lejepa/COMPLETE` (supervised on all labels, label-free
# LeJEPA). Each few-shot split holds the rows evaluate's Bird-MAE protocol gives its probe for
# (k, seed): python -m birdjepa.sources fewshot --lenient, the sampler evaluate uses.
#   bash docs/issues/031-few-labels/train.sh [baseline] [semi K SEED ...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
FS=data/demo/fewshot
mkdir -p "$FS" runs/fs
split() {  # k seed keep
  local out="$FS/$3-k$1-s$2"
  [ -e "$out/state.json" ] || $PY -m birdjepa.sources fewshot data/demo/train --out_dir "$out" \
    --k "$1" --seed "$2" --lenient --keep "$3" >/dev/null 2>&1
  echo "$out"
}
if [ "${1:-}" = baseline ]; then
  shift
  # A supervised encoder trained on the k labels per class its probe will see (configs/demo.toml
  # otherwise unchanged: 600 steps of batch 32).
  for k in 1 5 10; do for s in 1 2 3; do
    d=runs/fs/sup-k$k-s$s
    [ -e "$d/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir="$d" \
      --seed=$((s - 1)) --data.train_shards="$(split $k $s labelled)" > "$d.log" 2>&1
  done; done
fi
if [ "${1:-}" = semi ]; then
  shift
  # LeJEPA (configs/demo-lejepa.toml) plus the class head's cross-entropy on the k labelled rows
  # per class; every other row of the corpus unlabelled.
  while [ $# -ge 2 ]; do
    k=$1 s=$2; shift 2
    d=runs/fs/semi-k$k-s$s
    [ -e "$d/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo-lejepa.toml \
      --run_dir="$d" --seed=$((s - 1)) --objective.lejepa.supervised_weight=${W:-1.0} \
      --data.train_shards="$(split $k $s all)" > "$d.log" 2>&1
  done
fi
