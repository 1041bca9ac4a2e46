#!/usr/bin/env bash
# Issue 49's trainings on the demo corpus (docs/issues/031-few-labels/README.md), after
# `make runs/demo/COMPLETE runs/demo-lejepa/COMPLETE` (supervised on all labels, label-free
# LeJEPA). Each few-shot split holds the rows evaluate's Bird-MAE protocol gives its probe for
# (k, seed): python -m birdjepa.sources fewshot --lenient, the sampler evaluate uses.
#   bash docs/issues/031-few-labels/train.sh baseline | finetune | seeds | semi K SEED [K SEED ...]
#   bash docs/issues/031-few-labels/train.sh selftrain K SEED [K SEED ...]   (after finetune, seeds)
#   bash docs/issues/031-few-labels/train.sh label-free TAG ARGS...   (e.g. local8 --data.n_local=8)
# (W=0.1 before semi sets objective.lejepa.supervised_weight, default 1.0, and names the runs
# semi-w0.1-kK-sS).
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
if [ "${1:-}" = finetune ]; then
  shift
  # The baseline's training (configs/demo.toml on the same k labels, same seed) started from the
  # label-free encoder instead of a random one, at a tenth of its learning rate: pretrain, then
  # fine-tune on what is labelled (at the baseline's own 3e-3: variants.sh lr3e-3 ...).
  for k in 1 5 10; do for s in 1 2 3; do
    d=runs/fs/ft-lr3e-4-k$k-s$s
    [ -e "$d/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir="$d" \
      --seed=$((s - 1)) --init_encoder=runs/demo-lejepa --optim.lr=3e-4 \
      --data.train_shards="$(split $k $s labelled)" > "$d.log" 2>&1
  done; done
fi
if [ "${1:-}" = seeds ]; then
  shift
  # Label-free LeJEPA at training seeds 1 and 2 (seed 0 is runs/demo-lejepa), then each k-shot
  # seed S >= 2 fine-tuned from the label-free encoder of training seed S - 1 (S = 1 is
  # finetune's run, from seed 0): the pretraining varies with the seed too.
  for t in 1 2; do
    d=runs/demo-lejepa-s$t
    [ -e "$d/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo-lejepa.toml \
      --run_dir="$d" --seed=$t > "$d.log" 2>&1
  done
  for k in 1 5 10; do for s in 2 3; do
    d=runs/fs/ftp-lr3e-4-k$k-s$s
    [ -e "$d/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir="$d" \
      --seed=$((s - 1)) --init_encoder=runs/demo-lejepa-s$((s - 1)) --optim.lr=3e-4 \
      --data.train_shards="$(split $k $s labelled)" > "$d.log" 2>&1
  done; done
fi
if [ "${1:-}" = semi ]; then
  shift
  # LeJEPA (configs/demo-lejepa.toml) plus the class head's cross-entropy on the k labelled rows
  # per class; every other row of the corpus unlabelled.
  while [ $# -ge 2 ]; do
    k=$1 s=$2; shift 2
    d=runs/fs/semi${W:+-w$W}-k$k-s$s
    [ -e "$d/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo-lejepa.toml \
      --run_dir="$d" --seed=$((s - 1)) --objective.lejepa.supervised_weight=${W:-1.0} \
      --data.train_shards="$(split $k $s all)" > "$d.log" 2>&1
  done
fi
if [ "${1:-}" = label-free ]; then
  shift
  # One label-free variant: configs/demo-lejepa.toml at seed 0 with ARGS on top, as
  # runs/demo-lejepa-TAG (eval.sh probes it as lf-TAG; ktable.py's second table).
  tag=$1; shift
  d=runs/demo-lejepa-$tag
  [ -e "$d/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo-lejepa.toml \
    --run_dir="$d" --seed=0 "$@" > "$d.log" 2>&1
fi
if [ "${1:-}" = selftrain ]; then
  shift
  # Self-training: the fine-tuned run of (k, seed) (finetune's for seed 1, seeds' ftp- runs for 2
  # and 3) labels the whole training split; the FRAC (default 0.5) of rows per class it is most
  # sure of, with these labels, plus the k true ones (pseudo.py) make the split on which its
  # label-free encoder is fine-tuned again, as finetune does. ROUND=2 starts from round 1's run
  # (st-kK-sS) and writes st2-kK-sS.
  r=${ROUND:-1}
  while [ $# -ge 2 ]; do
    k=$1 s=$2; shift 2
    if [ "$s" = 1 ]; then enc=runs/demo-lejepa; base=runs/fs/ft-lr3e-4-k$k-s1
    else enc=runs/demo-lejepa-s$((s - 1)); base=runs/fs/ftp-lr3e-4-k$k-s$s; fi
    name=st-k$k-s$s
    [ "$r" = 1 ] || { base=runs/fs/st-k$k-s$s; name=st2-k$k-s$s; }
    d=runs/fs/$name
    [ -e "$d/COMPLETE" ] && continue
    pred=runs/fs/$name.predictions.parquet
    $PY -m birdjepa.predict "$base" data/demo/train --out "$pred" --min_conf 0 --top_k 12 \
      --quiet --overwrite
    rm -rf "$FS/pseudo-$name"
    $PY docs/issues/031-few-labels/pseudo.py data/demo/train "$pred" "$k" "$s" \
      "${FRAC:-0.5}" "$FS/pseudo-$name"
    $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir="$d" --seed=$((s - 1)) \
      --init_encoder="$enc" --optim.lr=3e-4 --data.train_shards="$FS/pseudo-$name" > "$d.log" 2>&1
  done
fi
