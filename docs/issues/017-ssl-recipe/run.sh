#!/usr/bin/env bash
# Reproduce docs/issues/017-ssl-recipe from the repo root after `make demo` (venv + corpus).
# Runs one training at a time, niced; about 20 CPU-minutes per LeJEPA entry.
set -euo pipefail
PY=${PY:-.venv/bin/python}
N="nice -n 19"
# The supervised baseline, as `make ssl-demo` trains it.
[ -f runs/demo/COMPLETE ] || $N $PY -m birdjepa.pretrain --cfg configs/demo.toml --run_dir=runs/demo
# ---- Session 1: entries 0 and 1 (finished ones are skipped on resubmission; entry 2, the
# anchor, was queued but never run). Their run ids carry a hash of the config, which gained
# fields since: the globs below find them whatever the hash.
$N $PY -m birdjepa.launch --sweep sweeps/ssl_recipe.py --executor local --max_parallel 1 \
    --entries 0 --entries 1
# The encoders at k = all, beside both random inits (the 32 x 32 one: the old config).
git show cb699f4~1:configs/demo-lejepa.toml > runs/old-demo-lejepa.toml
$N $PY -m birdjepa.evaluate --cfg configs/eval-demo.toml --shots 0 --out_dir runs/eval-ssl-recipe \
    $(printf -- '--encoders %s ' runs/demo runs/ssl_recipe-00[01]-*) \
    --random configs/demo.toml --random runs/old-demo-lejepa.toml
# Intermediate checkpoints (ckpt_keep = 3 keeps 400-800: export 200 while a run is at 200-600).
for R in runs/ssl_recipe-00[01]-*; do
    for S in 200 400 600; do
        [ -d runs/ckpt/$(basename $R)-s$S ] || $N $PY -m birdjepa.export --step $S $R \
            --out_dir runs/ckpt/$(basename $R)-s$S || echo "step $S of $R is no longer kept"
    done
done
sed '/^random = /d' configs/eval-demo.toml > runs/eval-ckpt.toml  # no random encoder here
$N $PY -m birdjepa.evaluate --cfg runs/eval-ckpt.toml --shots 0 --probes prototypical \
    --out_dir runs/eval-ckpt $(printf -- '--encoders %s ' runs/ckpt/ssl_recipe-00[01]-*-s*)
$PY docs/issues/017-ssl-recipe/summarize.py runs/eval-ssl-recipe runs/eval-ckpt

# ---- Session 2: one setting at a time (entries 3-10), the new default (entry 11 = `make ssl-demo`).
$N $PY -m birdjepa.launch --sweep sweeps/ssl_recipe.py --executor local --max_parallel 1 \
    $(printf -- '--entries %s ' 3 4 5 6 7 8 9 10)
sed '/^random = /d' configs/eval-demo.toml > runs/eval-norandom.toml
for E in 003 004 005 006 008 009 010; do
    $N $PY -m birdjepa.evaluate --cfg runs/eval-norandom.toml --shots 0 --probes prototypical \
        --out_dir runs/eval-s2-$E --encoders runs/ssl_recipe-$E-*
done
$N $PY -m birdjepa.evaluate --cfg runs/eval-norandom.toml --shots 0 --out_dir runs/eval-s2-007 \
    --encoders runs/ssl_recipe-007-*   # MAE: every probe
# Checkpoints: ckpt_keep = 3 keeps a finished run's last three; the study exported each
# checkpoint while its run trained (a loop polling checkpoints/ every minute, --force), which
# also kept step 200 of entries 4-9. After the fact this gets the kept ones:
for R in runs/ssl_recipe-00[3-9]-*; do
    for S in $(ls $R/checkpoints); do
        [ -d runs/ckpt/$(basename $R)-s$S ] || $PY -m birdjepa.export --step $S $R \
            --out_dir runs/ckpt/$(basename $R)-s$S --force
    done
done
$N $PY -m birdjepa.evaluate --cfg runs/eval-norandom.toml --shots 0 --probes prototypical \
    --out_dir runs/eval-s2-ckpt $(ls -d runs/ckpt/ssl_recipe-00{3,4,5,6,8,9}-* | \
    grep -v -E 's800$|s1600$' | sed 's/^/--encoders /')
rm -rf runs/demo-lejepa runs/eval-demo && make ssl-demo   # entry 11, full protocol
# Another training seed of both sides: the default as sweep entry ENTRY, supervised as SEED.
another_seed() {  # SESSION ENTRY SEED
    $N $PY -m birdjepa.launch --sweep sweeps/ssl_recipe.py --executor local --max_parallel 1 \
        --entries $2
    $N $PY -m birdjepa.evaluate --cfg runs/eval-norandom.toml --shots 0 --probes prototypical \
        --out_dir runs/eval-$1-0$2 --encoders runs/ssl_recipe-0$2-*
    [ -f runs/demo-seed$3/COMPLETE ] || $N $PY -m birdjepa.pretrain --cfg configs/demo.toml \
        --run_dir=runs/demo-seed$3 --seed $3
    $N $PY -m birdjepa.evaluate --cfg runs/eval-norandom.toml --shots 0 \
        --out_dir runs/eval-$1-sup$3 --encoders runs/demo-seed$3
}
another_seed s2 12 1   # session 2: entry 12, runs/demo-seed1
another_seed s3 13 2   # session 3: entry 13, runs/demo-seed2
$PY docs/issues/017-ssl-recipe/summarize.py runs/eval-s[23]-*/ runs/eval-demo \
    --plot docs/issues/017-ssl-recipe/sigreg-vs-cmap.png
