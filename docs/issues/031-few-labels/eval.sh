#!/usr/bin/env bash
# Probe every finished matched run of train.sh (runs/fs/<kind>-k<K>-s<S>) under Bird-MAE's
# protocol on its own k and seed: the probe sees exactly the labelled rows its encoder saw.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
for d in runs/fs/*-k*-s*/; do
  d=${d%/}; name=$(basename "$d")
  [ -e "$d/COMPLETE" ] || continue
  [ -e "runs/eval-fs/$name/results.csv" ] && continue
  k=${name#*-k}; k=${k%%-s*}; s=${name##*-s}
  $PY -m birdjepa.evaluate --cfg configs/eval-fewshot.toml --encoders "$d" --shots "$k" \
    --seeds "$s" --out_dir "runs/eval-fs/$name" > "runs/eval-fs-$name.log" 2>&1 \
    || { echo "evaluate $d failed: runs/eval-fs-$name.log" >&2; exit 1; }
done
# The label-free encoders of training seeds 1 and 2 (train.sh seeds) and the one-setting
# variants (train.sh label-free TAG: runs/demo-lejepa-TAG), frozen, as runs/demo-lejepa is in
# make ssl-demo: under the protocol and at all labels.
for d in runs/demo-lejepa-*/; do
  d=${d%/}; t=${d#runs/demo-lejepa-}
  [ -e "$d/COMPLETE" ] || continue
  [ -e "runs/eval-fs/lf-$t/results.csv" ] || $PY -m birdjepa.evaluate \
    --cfg configs/eval-fewshot.toml --encoders "$d" --out_dir "runs/eval-fs/lf-$t" \
    > "runs/eval-fs-lf-$t.log" 2>&1 || { echo "evaluate $d failed" >&2; exit 1; }
  [ -e "runs/eval-all/lf-$t/results.csv" ] || $PY -m birdjepa.evaluate \
    --cfg configs/eval-demo.toml --encoders "$d" --out_dir "runs/eval-all/lf-$t" \
    > "runs/eval-all-lf-$t.log" 2>&1 || { echo "evaluate $d failed" >&2; exit 1; }
done
