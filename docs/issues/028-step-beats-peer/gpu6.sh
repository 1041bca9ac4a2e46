#!/usr/bin/env bash
# Issue 46's device checks, in the issue's order, for the next session lent a GPU (this one had
# none). From the checkout's root after `bash ../shared/gpu/stage.sh`, with `.gpu` carried:
#   bash .gpu/on-node.sh bash docs/issues/028-step-beats-peer/gpu6.sh          # all: ~8 min
#   PARTS="2 3" bash .gpu/on-node.sh bash docs/issues/028-step-beats-peer/gpu6.sh   # some
# CPU dry run of every command (tiny sizes): SMALL=1 bash docs/issues/028-step-beats-peer/gpu6.sh
# 1. docs/issues/022-gpu-kept-busy/gpu5.sh: a training process that compiled its update keeps
#    its loop at the step's pace now that workers trim at most twice a second (~170 s).
# 2. The step against the plain-JAX peer, vit-s then vit-b, with the real loader over the packed
#    demo corpus (device features: the fbank inside the step), the configs' remat (none) beside
#    dots: step alone, fed steps, data wait, memory, the peer's step (~200 s).
# 3. The real loop, vit-s with device features over the packed corpus at 8 of 16 workers:
#    data wait (the issue asks < 2 %) (~90 s).
# 4. The per-kernel profile of the vit-s step (../shared/gpu/prof.py, copied to .gpu/) (~60 s).
set -u
t0=$(date +%s); stamp() { echo "[+$(($(date +%s) - t0)) s] $*"; }
PARTS=${PARTS:-1 2 3 4}
if [ "${SMALL:-0}" = 1 ]; then
  STEPS=2; LOOP=(--n_steps=4 --batch_size=4); BATCH=(--batch_size 2); WORKERS=2
else
  STEPS=20; LOOP=(--n_steps=200); BATCH=(); WORKERS=8
fi
packed=/tmp/demo-wav
[ -f $packed/pack-manifest.json ] || timeout 120 python3 -m birdjepa.sources pack data/demo/train \
  --out_dir $packed --codec wav --sample_rate 32000 --workers "$(nproc)" --shard_mb 40 | tail -n 1
for part in $PARTS; do
  case $part in
  1) stamp "1. gpu5.sh"; SMALL=${SMALL:-0} timeout 240 bash docs/issues/022-gpu-kept-busy/gpu5.sh ;;
  2) for c in vit-s vit-b; do
       stamp "2. $c: the step against the peer, remat none beside dots"
       timeout 300 python3 -m benchmarks train --configs $c --data $packed --steps $STEPS \
         --remat dots "${BATCH[@]}"
     done ;;
  3) stamp "3. the loop, vit-s, device features, $WORKERS workers, packed wav"
     timeout 200 python3 -m birdjepa.pretrain --cfg configs/vit-s.toml --data.train_shards=$packed \
       --data.eval_shards=data/demo/eval --n_classes=12 --data.n_workers=$WORKERS \
       --eval_every=100000 --ckpt_every=100000 --log_every=20 --wandb.mode=disabled \
       --run_dir=/tmp/loop6-$t0 "${LOOP[@]}" 2>&1 | grep -E "compiling|step [0-9]+/|^done" ;;
  4) stamp "4. prof.py vit-s"
     if [ -f .gpu/prof.py ]; then timeout 200 python3 .gpu/prof.py vit-s; else
       echo "no .gpu/prof.py (stage.sh copies it)"; fi ;;
  esac
done
stamp done
