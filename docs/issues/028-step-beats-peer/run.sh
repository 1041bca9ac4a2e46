#!/usr/bin/env bash
# Reproduces docs/issues/028-step-beats-peer on a CPU machine (no GPU): from the checkout's root,
# after `make setup`, `make data/demo/.done-split` and (for the step) `make .venv-gpu/.deps`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=docs/issues/028-step-beats-peer

# 1. The step's bytes against the peer, host and device features (XLA's GPU compiler, H100).
PYTHONPATH=src:. .venv-gpu/bin/python -m benchmarks bytes --configs vit-s --configs vit-b \
    --features host,device --top 8
# One change at a time (the table of section 1), e.g. the scan with remat dots:
PYTHONPATH=src:. .venv-gpu/bin/python -m benchmarks bytes --configs vit-s \
    --model scan_layers=true --model 'remat="dots"'

# 2. The bfloat16 residual against float32 on the demo, 3 seeds each (about 8 minutes).
bash "$D/curves.sh"

# 3. Device features: parity and resume tests, then the loader at the GPU configs' settings.
.venv/bin/python -m pytest -q tests/test_device_features.py tests/test_features_on_device.py \
    tests/test_model.py
PYTHONPATH=. .venv/bin/python -m benchmarks views --config vit-s --batch_size 256 --batches 6 \
    --repeat 2 --workers 2 --pack wav,flac

# 4. The GPU plan with the new configs (tests/fixtures/gpu-plan-rows.json is its output).
make gpu-plan
