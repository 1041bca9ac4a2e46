#!/usr/bin/env bash
# Third device call of docs/issues/022-gpu-kept-busy: how many cores the real loop over the packed
# corpus uses (bash `time`: user + sys over wall), at the auto worker count (14) and at 16.
set -u
t0=$(date +%s); stamp() { echo "[+$(($(date +%s) - t0)) s] $*"; }
S=${S:-120}
timeout 60 python3 -m birdjepa.sources pack data/demo/train --out_dir /tmp/demo-wav --codec wav \
    --sample_rate 32000 --workers 14 --shard_mb 40 | tail -n 1
TIMEFORMAT='TIME wall %R s | user %U s | sys %S s'
for w in auto 16; do
    stamp "loop, packed corpus, n_workers $w, $S steps"
    time timeout 150 python3 -m birdjepa.pretrain --cfg configs/vit-s.toml \
        --data.train_shards=/tmp/demo-wav --data.eval_shards=data/demo/eval --n_classes=12 \
        --n_steps=$S --eval_every=100000 --ckpt_every=100000 --log_every=20 --wandb.mode=disabled \
        --data.n_workers=$w --run_dir=/tmp/r-$w ${EXTRA:-} | grep -E "^step ($S|[0-9]+0)/|done in"
done
stamp done
