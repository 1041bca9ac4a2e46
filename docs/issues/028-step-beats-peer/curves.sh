#!/usr/bin/env bash
# The bfloat16 residual stream against float32 on the demo (issue 46: "show the loss curve of 300
# demo steps within the float32 run's seed-to-seed spread"): configs/demo.toml with the GPU
# configs' block options (bfloat16 compute, LayerScale 1e-4, QK-norm, RoPE), 300 steps, seeds 0-2,
# residual_dtype float32 and bfloat16. Then curves.py prints the table and draws curves.png.
set -euo pipefail
cd "$(dirname "$0")/../../.."
W=${W:-/tmp/issue-028-curves}
mkdir -p "$W"
for seed in 0 1 2; do
  for r in float32 bfloat16; do
    d="$W/$r-s$seed"
    [ -f "$d/COMPLETE" ] && continue
    WANDB_MODE=disabled nice -n 5 .venv/bin/python -m birdjepa.pretrain --cfg configs/demo.toml \
      --run_dir="$d" --n_steps=300 --seed=$seed --model.compute_dtype=bfloat16 \
      --model.layerscale=1e-4 --model.qk_norm --model.pos=rope --model.residual_dtype=$r \
      > "$W/$r-s$seed.log" 2>&1
  done
done
.venv/bin/python docs/issues/028-step-beats-peer/curves.py "$W"
