# Two entry points, both from a fresh clone: `make demo` and `make test`. `make gpu-plan` (not part
# of `make test`) compiles the GPU configs with XLA's GPU compiler, without a GPU.
PYTHON ?= python3
VENV := .venv
VENV_GPU := .venv-gpu
PY := $(VENV)/bin/python
RUST_SRC := $(shell find rust/src -name '*.rs') rust/Cargo.toml Cargo.toml pyproject.toml
DEMO_DIR := data/demo

.PHONY: setup demo ssl-demo test test-fast test-py test-rust lint bench gpu-plan bytes clean

setup: $(VENV)/.built

$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip maturin
	touch $@

# Python dependencies and the Rust extension, built in release mode into an editable install.
$(VENV)/.built: $(VENV)/.deps $(RUST_SRC)
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH maturin develop --release --extras dev -q
	touch $@

# The demo corpus: train = 576 recordings (48 per species, 5-20 s) drawn with seed 0; eval =
# 240 other recordings (20 per species, 5-10 s: eval reads one centre crop each) of the same
# species drawn with seed 1. Both balanced; codecs and rates are dealt independently of species.
# soundscape = the BirdSet-style test split: 24 one-minute soundscapes of 0-4 of the same species
# over noise, cut into 288 5 s multilabel segments (docs/issues/007-demo-evaluation).
# Many short recordings rather than few long ones: with 16 per species LeJEPA learned to tell
# the recordings apart (docs/issues/004-demo-learning).
$(DEMO_DIR)/.done-split: $(VENV)/.built $(wildcard src/birdjepa/demo_data/*.py) Makefile
	$(PY) -m birdjepa.demo_data --out_dir $(DEMO_DIR)/train --seed 0 --n_recordings 576 --min_s 5 \
		--max_s 20 --overwrite
	$(PY) -m birdjepa.demo_data --out_dir $(DEMO_DIR)/eval --seed 1 --n_recordings 240 --n_shards 2 \
		--min_s 5 --max_s 10 --overwrite
	$(PY) -m birdjepa.demo_data --out_dir $(DEMO_DIR)/soundscape --soundscapes 24 --n_segments 12 \
		--n_shards 2 --seed 2 --overwrite
	touch $@

demo: $(DEMO_DIR)/.done-split
	$(PY) -m birdjepa.pretrain --cfg configs/demo.toml

# Label-free against supervised (docs/issues/017-ssl-recipe): the supervised demo encoder
# (runs/demo), the default label-free recipe (runs/demo-lejepa, the same encoder), then both and
# that encoder's random init, probed with 5 seeds into runs/eval-demo (results.csv). A run directory
# with a COMPLETE marker is reused as it is: delete it to retrain (e.g. after changing its config).
# Then few labels (docs/issues/031-few-labels): both encoders under Bird-MAE's few-shot protocol
# (runs/eval-fewshot), 9 supervised baselines each trained on the k = 1, 5, 10 labels of one
# sampling seed (runs/fs), the same 9 trainings started from the label-free encoder (the recipe
# that needs fewest labels), each probed on its own k rows, and the k table. SEMI="K SEED ..." adds
# semi-supervised LeJEPA runs (17 minutes each on 2 cores), e.g. make ssl-demo SEMI="5 1".
SEMI ?=
ssl-demo: runs/eval-demo/results.csv runs/eval-fewshot/results.csv
	PY=$(PY) bash docs/issues/031-few-labels/train.sh baseline
	PY=$(PY) bash docs/issues/031-few-labels/train.sh finetune
	$(if $(strip $(SEMI)),PY=$(PY) bash docs/issues/031-few-labels/train.sh semi $(SEMI))
	PY=$(PY) bash docs/issues/031-few-labels/eval.sh
	$(PY) docs/issues/031-few-labels/ktable.py

runs/demo/COMPLETE: | $(DEMO_DIR)/.done-split
	$(PY) -m birdjepa.pretrain --cfg configs/demo.toml --run_dir=runs/demo

runs/demo-lejepa/COMPLETE: | $(DEMO_DIR)/.done-split
	$(PY) -m birdjepa.pretrain --cfg configs/demo-lejepa.toml --run_dir=runs/demo-lejepa

runs/eval-fewshot/results.csv: runs/demo/COMPLETE runs/demo-lejepa/COMPLETE configs/eval-fewshot.toml
	$(PY) -m birdjepa.evaluate --cfg configs/eval-fewshot.toml --out_dir runs/eval-fewshot \
		--encoders runs/demo --encoders runs/demo-lejepa

runs/eval-demo/results.csv: runs/demo/COMPLETE runs/demo-lejepa/COMPLETE configs/eval-demo.toml
	$(PY) -m birdjepa.evaluate --cfg configs/eval-demo.toml --out_dir runs/eval-demo \
		--encoders runs/demo --encoders runs/demo-lejepa

test: setup test-rust test-py

test-rust:
	cargo fmt --check
	cargo clippy --release --all-features --all-targets -- -D warnings
	cargo test --release

# Both cores (pytest-xdist): each test module stays on one worker, the multi-process modules
# share one (tests/conftest.py SERIAL_GROUPS); the slowest tests are listed at the end.
test-py: setup
	$(PY) -m ruff check src tests sweeps benchmarks docs
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=25

# The edit loop: every test but the slow, heavy and Slurm ones (`make test` runs them all).
test-fast: setup
	$(PY) -m ruff check src tests sweeps benchmarks docs
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow and not heavy and not slurm" \
		--durations=10

bench: setup
	$(PY) -m benchmarks transforms

# XLA's GPU compiler on this machine (no GPU): a venv of its own with the project's dependencies
# and the cuda12 extra (jax[cuda12], same pin as the CPU build), kept apart from .venv so tests
# and the CPU build do not change; the Rust extension comes from `make setup` (abi3).
$(VENV_GPU)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV_GPU)
	$(VENV_GPU)/bin/python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print(*p['dependencies'], *p['optional-dependencies']['cuda12'], sep=chr(10))" > $(VENV_GPU)/requirements.txt
	$(VENV_GPU)/bin/python -m pip install -q -r $(VENV_GPU)/requirements.txt
	touch $@

# vit-s and vit-b on every shipped GPU kind, remat none/dots/block at batch 256 and 512: the table,
# runs/gpu-plan.json (also the cache: a rerun compiles only what changed), and exit 1 if a
# config's own settings do not fit or use no fused attention on the H100.
gpu-plan: $(VENV)/.built $(VENV_GPU)/.deps
	PYTHONPATH=$(abspath src):$(abspath .) nice -n 10 $(VENV_GPU)/bin/python -m benchmarks plan \
		--configs vit-s --configs vit-b --remat none --remat dots --remat block \
		--batch_size 256 --batch_size 512 \
		--json runs/gpu-plan.json --check

# The step's bytes per update against the plain-JAX peer, by XLA's GPU compiler for an H100 (no
# GPU): vit-s and vit-b with the features made on the host and on the device
# (docs/issues/028-step-beats-peer).
bytes: $(VENV)/.built $(VENV_GPU)/.deps
	PYTHONPATH=$(abspath src):$(abspath .) nice -n 10 $(VENV_GPU)/bin/python -m benchmarks bytes \
		--configs vit-s --configs vit-b --features host,device

clean:
	rm -rf $(VENV) $(VENV_GPU) target $(DEMO_DIR)
