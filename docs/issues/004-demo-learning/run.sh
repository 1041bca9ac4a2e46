#!/usr/bin/env bash
# Reproduce docs/issues/004-demo-learning: from the repo root, `docs/issues/004-demo-learning/run.sh`.
# Builds the venv and the demo corpus (make), trains supervised, LeJEPA and the random-encoder
# probe baseline on it, then writes results.json and curves.png here. ~25-30 CPU-minutes.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=docs/issues/004-demo-learning
RUNS=${RUNS:-runs/004-demo-learning}
export WANDB_MODE=${WANDB_MODE:-offline}
make data/demo/.done-split
rm -rf "$RUNS"
mkdir -p "$RUNS"
for pair in supervised:demo lejepa:demo-lejepa random:demo-random; do
    name=${pair%%:*}
    cfg=${pair#*:}
    echo "== $name (configs/$cfg.toml)"
    /usr/bin/time -f "wall %e s, user %U s, sys %S s, load before: $(cut -d' ' -f1-3 /proc/loadavg)" \
        -o "$RUNS/$name.time" .venv/bin/python -m birdjepa.pretrain --cfg "configs/$cfg.toml" \
        --run_dir="$RUNS/$name" "$@" | grep -v '^wandb'
    mv "$RUNS/$name.time" "$RUNS/$name/time.txt"
done
.venv/bin/python "$HERE/report.py" "$RUNS"
# Acceptance (issue 4): supervised >= 90 %; LeJEPA probe >= random-encoder probe + 15 points;
# the random encoder really stayed at its init.
.venv/bin/python - "$HERE/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
checks = {
    "supervised eval head acc >= 0.90": r["supervised"]["eval_head_acc"] >= 0.90,
    "lejepa probe - random probe >= 15 points": r["lejepa_minus_random_points"] >= 15,
    "random encoder frozen (param_norm constant)": r["random"]["param_norm_constant"],
}
for k, ok in checks.items():
    print(("PASS " if ok else "FAIL ") + k)
sys.exit(0 if all(checks.values()) else 1)
PY
