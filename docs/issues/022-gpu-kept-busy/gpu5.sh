#!/usr/bin/env bash
# Fifth device call of docs/issues/022-gpu-kept-busy: which threads use the CPUs of a training
# process that compiled its update (compilation-cache miss) once its loop runs, against one that
# loaded it from the cache: `top -H` samples at +40 s and +55 s. On the node:
#   bash .gpu/on-node.sh bash THIS       (CPU dry run: SMALL=1)
set -u
t0=$(date +%s); stamp() { echo "[+$(($(date +%s) - t0)) s] $*"; }
if [ "${SMALL:-0}" = 1 ]; then S=6; LOOP=(--batch_size=4 --data.n_workers=2); W=(5 8)
else S=200; LOOP=(); W=(40 55); fi
cache=/tmp/cc-$t0
timeout 60 python3 -m birdjepa.sources pack data/demo/train --out_dir /tmp/demo-wav --codec wav \
    --sample_rate 32000 --workers 14 --shard_mb 40 | tail -n 1
for kind in miss hit; do
    stamp "loop, compilation cache $kind"
    BIRDJEPA_COMPILE_CACHE=$cache timeout 150 python3 -m birdjepa.pretrain --cfg configs/vit-s.toml \
        --data.train_shards=/tmp/demo-wav --data.eval_shards=data/demo/eval --n_classes=12 \
        --n_steps=$S --eval_every=100000 --ckpt_every=100000 --log_every=20 \
        --wandb.mode=disabled --run_dir=/tmp/r-$kind-$t0 "${LOOP[@]}" > /tmp/loop-$kind.log 2>&1 &
    pid=$!
    sleep "${W[0]}"
    for at in "${W[@]}"; do
        [ "$at" != "${W[0]}" ] && sleep $((at - W[0]))
        echo "--- top -H at +$at s (threads by name: count, summed %CPU)"
        top -H -b -w 512 -n 1 -d 1 -p "$(pgrep -P $pid -n)" | awk 'NR>7 {n[$12]++; c[$12]+=$9} END {for (k in n) printf "%6.0f %%  %3d  %s\n", c[k], n[k], k}' | sort -rn | head -n 8
    done
    wait $pid
    grep -E "compiling|step (20|60|100|160|200)/|^done" /tmp/loop-$kind.log
done
stamp done
