#!/usr/bin/env bash
# Second device call of docs/issues/022-gpu-kept-busy: the loader alone with the node's 14 workers,
# and a longer real loop over the packed corpus. On the node: bash .gpu/on-node.sh bash THIS
set -u
t0=$(date +%s); stamp() { echo "[+$(($(date +%s) - t0)) s] $*"; }
S=${S:-200}; W=${W:-14}; BS=${BS:-512}
stamp "6. loader alone at vit-s's data settings, $W workers: clips/s and clips per CPU-second"
timeout 120 python3 -m benchmarks views --config vit-s --batch_size $BS --batches 8 --repeat 1 --workers $W --pack wav
stamp "7. the real loop over the packed corpus, $S steps (the loader's prefetch drained)"
timeout 60 python3 -m birdjepa.sources pack data/demo/train --out_dir /tmp/demo-wav --codec wav \
    --sample_rate 32000 --workers 14 --shard_mb 40 | tail -n 1
timeout 150 python3 -m birdjepa.pretrain --cfg configs/vit-s.toml --data.train_shards=/tmp/demo-wav \
    --data.eval_shards=data/demo/eval --n_classes=12 --n_steps=$S --eval_every=100000 \
    --ckpt_every=100000 --log_every=20 --wandb.mode=disabled --run_dir=/tmp/r-long ${EXTRA:-}
stamp done
