#!/usr/bin/env bash
# Reproduces docs/issues/024-soundscape-abstain (issue 36 item 2: the padding experiment and the
# trainable "nothing here") on a CPU machine, from the checkout's root after `make setup` and
# `make data/demo/.done-split` (the demo corpus with its soundscape split). About 45 minutes on
# 2 cores: eleven demo trainings (600 or 1200 steps), each then run over the demo soundscape by study.py.
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=docs/issues/024-soundscape-abstain
W=${W:-/tmp/issue-024}
PY=.venv/bin/python
train() {  # run_dir, extra settings
    [ -f "$1/COMPLETE" ] || $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir="$1" \
        --wandb.mode=disabled "${@:2}"
}
corpus() {  # out_dir, extra demo_data options (the demo's train corpus, seed 0, 576 birds)
    [ -f "$1/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$1" --seed 0 \
        --n_recordings 576 --workers 2 --overwrite "${@:2}"
}
corpus "$W/short" --min_s 1.5 --max_s 4                      # the field's short focal clips
corpus "$W/noisy" --min_s 5 --max_s 20 --noise 144           # the demo corpus + 144 noise
corpus "$W/short-noisy" --min_s 1.5 --max_s 4 --noise 144    # short clips + 144 noise
# The demo's held-out clips (as data/demo/eval) with the `labels` column, for runs 5-6.
[ -f "$W/eval/state.json" ] || $PY -m birdjepa.demo_data --out_dir "$W/eval" --seed 1 \
    --n_recordings 240 --n_shards 2 --min_s 5 --max_s 10 --noise 0 --overwrite
# 1. The main job as shipped: focal recordings of 5-20 s, 5 s crops (no padding to learn).
train "$W/focal"
# 2-4. The padding experiment: short clips (1.5-4 s) padded to 5 s three ways, softmax head.
train "$W/short-zero" --data.train_shards="$W/short"
train "$W/short-min" --data.train_shards="$W/short" --data.pad=min
train "$W/short-repeat" --data.train_shards="$W/short" --data.pad=repeat
# 5-6. "Nothing here" trained: noise recordings with an empty label set, sigmoid targets
#      (a list<int> label column: binary cross-entropy per class).
train "$W/focal-nocall" --data.train_shards="$W/noisy" --data.eval_shards="$W/eval" \
    --data.label_column=labels
train "$W/short-nocall" --data.train_shards="$W/short-noisy" --data.eval_shards="$W/eval" \
    --data.label_column=labels --data.pad=repeat
# 7. "Nothing here" as an explicit class: the same corpus, its `label` column (12 species and
#    "noise"), softmax head over 13 classes.
train "$W/focal-noiseclass" --data.train_shards="$W/noisy" --data.eval_shards="$W/eval" \
    --n_classes=13
# 8-9. Runs 5-6 with multilabel mixup: each clip gets another (a bird or noise) mixed in at a
#      power weight up to 0.5, its labels joined (soundscape conditions in training).
train "$W/focal-nocall-mix" --data.train_shards="$W/noisy" --data.eval_shards="$W/eval" \
    --data.label_column=labels --objective.supervised.mix=0.5
train "$W/short-nocall-mix" --data.train_shards="$W/short-noisy" --data.eval_shards="$W/eval" \
    --data.label_column=labels --data.pad=repeat --objective.supervised.mix=0.5
# 10-11. Runs 1 and 5 trained twice as long (1200 steps).
train "$W/focal-1200" --n_steps=1200
train "$W/focal-nocall-1200" --data.train_shards="$W/noisy" --data.eval_shards="$W/eval" \
    --data.label_column=labels --n_steps=1200

for r in focal short-zero short-min short-repeat focal-nocall short-nocall focal-noiseclass focal-nocall-mix short-nocall-mix focal-1200 \
    focal-nocall-1200; do
    echo "== $r"; $PY "$D/study.py" "$W/$r"
done
