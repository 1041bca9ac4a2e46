#!/usr/bin/env bash
# Fourth device call of docs/issues/022-gpu-kept-busy: the same figures re-measured on a later
# tree (after issue 36's loader `put` change, pad "repeat" and the multilabel heads), to see that
# nothing regressed. LOOP_ONLY=1: the loops alone; PADS="repeat zero": their order. On the node: bash .gpu/on-node.sh bash THIS. CPU dry run: SMALL=1.
set -u
t0=$(date +%s); stamp() { echo "[+$(($(date +%s) - t0)) s] $*"; }
if [ "${SMALL:-0}" = 1 ]; then N=3; B=(--batch_size 4); S=4; LOOP=(--batch_size=4 --data.n_workers=2)
else N=20; B=(); S=200; LOOP=(); fi
python3 -c 'import jax; print("jax", jax.__version__, jax.devices())'
if [ -z "${LOOP_ONLY:-}" ]; then
stamp "1. vit-s step alone beside the plain-JAX peer (compiles of update, steady ms/step)"
timeout 200 python3 -m benchmarks train --configs vit-s --synthetic_on_device --steps $N "${B[@]}"
stamp "2. the shared anchor, same shapes"
[ "${SMALL:-0}" != 1 ] && timeout 60 python3 .gpu/anchor.py --size s --batch 1024 --remat dots
fi
stamp "3. the real loop, packed wav 32 kHz, n_workers auto, pad zero then pad repeat, $S steps"
timeout 60 python3 -m birdjepa.sources pack data/demo/train --out_dir /tmp/demo-wav --codec wav \
    --sample_rate 32000 --workers 14 --shard_mb 40 | tail -n 1
for pad in ${PADS:-zero repeat}; do
    stamp "loop, pad $pad"
    timeout 150 python3 -m birdjepa.pretrain --cfg configs/vit-s.toml --data.train_shards=/tmp/demo-wav \
        --data.eval_shards=data/demo/eval --n_classes=12 --n_steps=$S --eval_every=100000 \
        --ckpt_every=100000 --log_every=20 --wandb.mode=disabled --data.pad=$pad \
        --run_dir=/tmp/r-$pad-$t0 "${LOOP[@]}" | grep -vE "^\s*$" | tail -n 14
done
stamp done
