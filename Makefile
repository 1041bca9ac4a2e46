# Two entry points, both from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUST_SRC := $(shell find rust/src -name '*.rs') rust/Cargo.toml Cargo.toml pyproject.toml
DEMO_DIR := data/demo

.PHONY: setup demo test test-py test-rust lint bench clean

setup: $(VENV)/.built

$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip maturin
	touch $@

# Python dependencies and the Rust extension, built in release mode into an editable install.
$(VENV)/.built: $(VENV)/.deps $(RUST_SRC)
	VIRTUAL_ENV=$(abspath $(VENV)) PATH=$(abspath $(VENV))/bin:$$PATH maturin develop --release --extras dev -q
	touch $@

$(DEMO_DIR)/.done: $(VENV)/.built
	$(PY) -m birdjepa.demo_data $(DEMO_DIR)
	touch $@

demo: $(DEMO_DIR)/.done
	$(PY) -m birdjepa.pretrain --cfg configs/demo.toml

test: setup test-rust test-py

test-rust:
	cargo fmt --check
	cargo clippy --release --all-features --all-targets -- -D warnings
	cargo test --release

test-py: setup
	$(PY) -m ruff check src tests sweeps
	$(PY) -m pytest -q

bench: setup
	$(PY) -m birdjepa.bench transforms

clean:
	rm -rf $(VENV) target $(DEMO_DIR)
