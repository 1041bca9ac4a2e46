#!/usr/bin/env bash
# The field's flow end to end on the demo generator's audio (issue 48): folders and Raven
# tables -> dataset -> train -> thresholds -> score -> predict on new recordings with a
# species list -> clips to review. Usage: bash flow.sh [WORKDIR] (default: a temporary one).
# Short training (the numbers are not the point; every step's command and output are).
set -euo pipefail
W=${1:-$(mktemp -d)}
PY=${PY:-python}
mkdir -p "$W"
cd "$W"
echo "workdir: $W"

# 1. Folders of clips, one per species, and a folder of site noise (the demo's synthetic songs).
$PY -m birdjepa.demo_data --out_dir corpus --n_recordings 48 --n_shards 1 --min_s 3 --max_s 6 \
    --noise 8 >/dev/null
$PY - <<'PYEOF'
import pathlib
import birdjepa.data.table as table
t = table.read("corpus", ["audio", "label"])
names = table.class_names("corpus", "label")
for i, (b, y) in enumerate(zip(table.audio_bytes(t), t.column("label").to_pylist())):
    d = pathlib.Path("noise" if names[y] == "noise" else f"folders/{names[y]}")
    d.mkdir(parents=True, exist_ok=True)
    (d / f"rec{i:03d}.ogg").write_bytes(b)
PYEOF

# 2. A dataset: one class per folder, the noise folder as rows without a class.
$PY -m birdjepa.sources from_files folders --label_from parent --negatives noise --out_dir train

# 3. A soundscape annotated in Raven (a validation split: 5 s windows, the empty ones negatives).
$PY - <<'PYEOF'
import pathlib, soundfile
import birdjepa.demo_data.catalogue as catalogue
import birdjepa.demo_data.soundscape as soundscape
pathlib.Path("val").mkdir(exist_ok=True)
for p in soundscape.plan_soundscapes(12, 7, n_segments=6):
    x, labels = soundscape.synthesize(p)
    soundfile.write(f"val/site{p.index}.wav", x, p.sample_rate)
    rows = [(5 * j + 0.5, 5 * j + 4.5, catalogue.SPECIES[c].code)
            for j, lab in enumerate(labels) for c in lab]
    lines = ["Selection\tView\tChannel\tBegin Time (s)\tEnd Time (s)\tSpecies"]
    lines += [f"{i}\tSpectrogram 1\t1\t{a}\t{b}\t{c}" for i, (a, b, c) in enumerate(rows, 1)]
    pathlib.Path(f"val/site{p.index}.Table.1.selections.txt").write_text("\n".join(lines) + "\n")
PYEOF
$PY -m birdjepa.sources from_annotations val --window_s 5 --classes_from train \
    --classes_column labels --drop_unknown --out_dir val_split

# 4. Train a supervised model on the list column (sigmoid per class: it can say "nothing").
cat > train.toml <<'TOML'
n_steps = 400
batch_size = 16
eval_every = 0
log_every = 100
ckpt_every = 400
[objective]
name = "supervised"
[objective.supervised.augment]
gain = 0.1
time_mask = 0.1
freq_mask = 0.1
[model]
preset = "debug"
patch = [8, 128]
pool = "mean"
[data]
train_shards = "train"
eval_shards = "train"
label_column = "labels"
n_views = 1
n_frames = 512
n_workers = 2
[wandb]
mode = "disabled"
TOML
$PY -m birdjepa.pretrain --cfg train.toml --run_dir run

# 5. Thresholds per class on the validation split (precision 0.7), then the score with them.
$PY -m birdjepa.evaluate --heads run --test_shards val_split --test_label_column \
    ebird_code_multilabel --segment columns --calibrate precision=0.7 --n_boot 200 \
    --out_dir scores
cat scores/thresholds.json | head -c 400; echo

# 6. New recordings, a species list, clips to review.
mkdir -p new && cp val/site*.wav new/
$PY -c "import json; print('\n'.join(json.load(open('run/thresholds.json'))['classes'][:3]))" \
    > species.txt
$PY -m birdjepa.predict run new --classes species.txt --segments clips --out detections.csv
head -5 detections.csv
find clips -name '*.wav' | head -5
