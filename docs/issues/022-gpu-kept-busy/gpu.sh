#!/usr/bin/env bash
# The GPU measurement of docs/issues/022-gpu-kept-busy, one script for one device call.
# Here: `make setup && bash ../shared/gpu/stage.sh`; on the node, from the checkout's root:
#   bash .gpu/on-node.sh bash docs/issues/022-gpu-kept-busy/gpu.sh
# Small sizes for a CPU dry run: SMALL=1 (batch 4, 3 steps).
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[+$(($(date +%s) - t0)) s] $*"; }
if [ "${SMALL:-0}" = 1 ]; then B=(--batch_size 4); N=3; LOOP=(--batch_size=4 --data.n_workers=2); P=4; S=3; VB=()
else B=(); N=20; LOOP=(); P=512; S=60; VB=(--configs vit-b); fi
python3 -c 'import jax; print("jax", jax.__version__, jax.devices())'

stamp "1. step alone beside the plain-JAX peer (one batch on the device; traces/compiles of update)"
timeout 200 python3 -m benchmarks train --configs vit-s "${VB[@]}" --synthetic_on_device \
    --steps $N "${B[@]}"

stamp "2. the shared anchor (../shared/gpu/anchor.py), same shapes"
if [ -f .gpu/anchor.py ] && [ "${SMALL:-0}" != 1 ]; then
    timeout 60 python3 .gpu/anchor.py --size s --batch 1024 --remat dots
    timeout 60 python3 .gpu/anchor.py --size b --batch 512 --remat dots
fi

stamp "3. the real loop: vit-s, demo corpus packed once as 32 kHz wav, 60 steps"
timeout 60 python3 -m birdjepa.sources pack data/demo/train --out_dir /tmp/demo-wav --codec wav \
    --sample_rate 32000 --workers 14 --shard_mb 40 | tail -n 2
loop() {
    timeout 150 python3 -m birdjepa.pretrain --cfg configs/vit-s.toml --data.train_shards="$1" \
        --data.eval_shards=data/demo/eval --n_classes=12 --n_steps=$S --eval_every=$S \
        --ckpt_every=1000 --log_every=10 --wandb.mode=disabled --run_dir="$2" "${LOOP[@]}"
}
loop /tmp/demo-wav /tmp/r-wav
stamp "4. the same loop over the demo corpus as stored (mixed codecs and rates)"
loop data/demo/train /tmp/r-stored

stamp "5. per-kernel profile of the vit-s step (../shared/gpu/prof.py)"
if [ -f .gpu/prof.py ] && [ "${SMALL:-0}" != 1 ]; then
    timeout 120 python3 .gpu/prof.py vit-s $P
fi
stamp done
