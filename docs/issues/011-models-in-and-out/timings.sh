#!/usr/bin/env bash
# CLI timings on a demo corpus (CPU). Usage, from the repository root with the venv active:
#   bash docs/issues/011-models-in-and-out/timings.sh DATA_DIR RUN_DIR
# DATA_DIR/train: demo shards (python -m birdjepa.demo_data --out_dir DATA_DIR/train --n_recordings 96
# --min-s 5 --max-s 8 --n-shards 1); RUN_DIR: a run trained on them (configs/demo.toml).
set -euo pipefail
DATA=$1; RUN=$2; OUT=$(mktemp -d)
python - "$DATA" <<'PY'
import pathlib, sys, birdjepa.data.table as t
root = pathlib.Path(sys.argv[1]); files = root / "files"; files.mkdir(exist_ok=True)
tbl = t.read(root / "train", ["audio", "codec"])
for i, (b, c) in enumerate(zip(t.audio_bytes(tbl), tbl.column("codec").to_pylist())):
    (files / f"rec{i:03d}.{c.split('-')[0].split('_')[0]}").write_bytes(b)
PY
python -m birdjepa.export "$RUN" --out_dir "$OUT/export"
run() { local label=$1; shift; local t0=$(date +%s.%N); "$@" 2> "$OUT/err"; local t1=$(date +%s.%N);
        local n=$(grep -oE '^[0-9]+ (windows|detections)' "$OUT/err" | tail -1)
        local bar=$(tr '\r' '\n' < "$OUT/err" | grep -oE 'windows [0-9]+ \([0-9.]+/s\)' | tail -1)
        printf '| %s | %s | %.1f s | %s |\n' "$label" "$n" "$(echo "$t1 - $t0" | bc)" "$bar"; }
echo "| command | output | wall | encode rate (progress bar) |"; echo "| --- | --- | --- | --- |"
for hop in 5 1; do
  run "embed shards --hop_s $hop" python -m birdjepa.embed "$OUT/export" "$DATA/train" --out "$OUT/e.parquet" --hop_s $hop
  run "embed audio files --hop_s $hop" python -m birdjepa.embed "$OUT/export" "$DATA/files" --out "$OUT/f.parquet" --hop_s $hop
done
run "embed shards, cls + mean + patches" python -m birdjepa.embed "$OUT/export" "$DATA/train" --out "$OUT/p.parquet" --patches --pool cls --pool mean
run "predict audio files (csv)" python -m birdjepa.predict "$OUT/export" "$DATA/files" --out "$OUT/d.csv"
run "embed shards --centre (Rust loader)" python -m birdjepa.embed "$OUT/export" "$DATA/train" --out "$OUT/c.parquet" --centre
rm -rf "$OUT"
