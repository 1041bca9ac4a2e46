#!/usr/bin/env bash
# Reproduces docs/issues/022-gpu-kept-busy on a CPU machine (no GPU): from the checkout's root,
# after `make setup`, `make data/demo/.done-split` and (for the step) `make .venv-gpu/.deps`.
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=docs/issues/022-gpu-kept-busy
W=${W:-/tmp/issue-022}
mkdir -p "$W"

# 1. One trace and one compile per process; the compiled update reused by a second process.
.venv/bin/python -m pytest -q tests/test_compiles.py

# 2. Where a clip's CPU time goes (one thread), and the loader at the GPU configs' data settings
#    over the demo corpus as stored and packed at 32 kHz (wav, flac).
.venv/bin/python "$D/stages.py" data/demo/train
PYTHONPATH=. .venv/bin/python -m benchmarks views --config vit-s --batch_size 256 --batches 12 \
    --repeat 3 --workers 2

# 3. The same against 589d8d8's Rust extension, interleaved (the figure the issue asks to double).
if [ ! -f "$W/old/lib_rs.so" ]; then
    git worktree add -f "$W/src-589d8d8" 589d8d8
    (cd "$W/src-589d8d8" && CARGO_TARGET_DIR="$W/old" cargo build --release -p birdjepa-rs \
        --features python)
    cp "$W/old/release/lib_rs.so" "$W/old/lib_rs.so"
fi
for c in wav flac; do
    [ -d "$W/$c" ] || .venv/bin/python -m birdjepa.sources pack data/demo/train --out_dir "$W/$c" \
        --codec $c --sample_rate 32000
done
cp src/birdjepa/_rs.abi3.so "$W/new_rs.so"
PYTHONPATH=. .venv/bin/python "$D/ab.py" "$W/old/lib_rs.so" "$W/new_rs.so" data/demo/train \
    "$W/wav" "$W/flac"

# 4. The step as XLA's GPU compiler sees it (H100 target, no GPU): bytes read and written per
#    update, beside the plain-JAX peer of the same shape.
for c in vit-s vit-b; do
    PYTHONPATH=src:. .venv-gpu/bin/python -m benchmarks bytes --configs $c  # was step_cost.py here
done

# 5. The step on this machine's CPU beside the peer (not a GPU figure).
PYTHONPATH=. .venv/bin/python -m benchmarks train --configs demo --configs vit-s \
    --synthetic_on_device --steps 5
