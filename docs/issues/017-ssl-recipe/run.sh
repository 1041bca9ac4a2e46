#!/usr/bin/env bash
# Reproduce docs/issues/017-ssl-recipe from the repo root after `make demo` (venv + corpus).
# Runs one training at a time, niced; about 20 CPU-minutes per LeJEPA entry.
set -euo pipefail
PY=${PY:-.venv/bin/python}
N="nice -n 19"
# The supervised baseline, as `make ssl-demo` trains it.
[ -f runs/demo/COMPLETE ] || $N $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir=runs/demo
# The study's LeJEPA runs (finished ones are skipped on resubmission; entry 2, the anchor,
# was queued but not run in the session that wrote the README).
$N $PY -m birdjepa.launch --sweep sweeps/ssl_recipe.py --executor local --max_parallel 1
# The encoders at k = all, beside both random inits (the 32 x 32 one: the old config).
git show cb699f4~1:configs/demo-lejepa.toml > runs/old-demo-lejepa.toml
$N $PY -m birdjepa.evaluate --cfg configs/eval-demo.toml --shots 0 --out_dir runs/eval-ssl-recipe \
    $(printf -- '--encoders %s ' runs/demo runs/ssl_recipe-*) \
    --random configs/demo.toml --random runs/old-demo-lejepa.toml
# Intermediate checkpoints (ckpt_keep = 3 keeps 400-800: export 200 while a run is at 200-600).
for R in runs/ssl_recipe-000-c2de7d75 runs/ssl_recipe-001-a1c27d4b; do
    for S in 200 400 600; do
        [ -d runs/ckpt/$(basename $R)-s$S ] || $N $PY -m birdjepa.export --step $S $R \
            --out_dir runs/ckpt/$(basename $R)-s$S || echo "step $S of $R is no longer kept"
    done
done
sed '/^random = /d' configs/eval-demo.toml > runs/eval-ckpt.toml  # no random encoder here
$N $PY -m birdjepa.evaluate --cfg runs/eval-ckpt.toml --shots 0 --probes prototypical \
    --out_dir runs/eval-ckpt $(printf -- '--encoders %s ' runs/ckpt/*-s*)
# The full protocol (k = 1, 5, all) for the default recipe: what `make ssl-demo` runs.
make ssl-demo
$PY docs/issues/017-ssl-recipe/summarize.py runs/eval-ssl-recipe runs/eval-ckpt runs/eval-demo
