# The single entry point for people and CI. `make` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# Cargo builds live outside the clone so a fresh clone reuses compiled RocksDB.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/weir/target
export CARGO_TERM_COLOR ?= never
VENV := $(CURDIR)/.venv
PY := $(VENV)/bin/python
SYS_PACKAGES := libclang-dev clang
EXT_STAMP := $(VENV)/.weir-ext
RUST_SOURCES := $(shell find crates -name '*.rs' -o -name Cargo.toml) Cargo.toml Cargo.lock

.PHONY: help
help: ## Show this help
	@grep -hE '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: sys-deps
sys-deps: ## Install the system packages the build needs (root, apt-get)
	@missing=""; for p in $(SYS_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed: ci/requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r ci/requirements-dev.txt
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create .venv with the pinned Python dependencies

# The state host's native binary goes into the package (python/weir/bin):
# tasks start it instead of the Python launcher, which takes ten times as
# long to accept connections. Built from the same sources as the extension
# it must speak the same protocol as.
HOST_BIN := python/weir/bin/weir-host

$(HOST_BIN): $(RUST_SOURCES)
	cargo build --release --locked --quiet -p weir-host --bin weir-host
	install -D -m 755 $(CARGO_TARGET_DIR)/release/weir-host $@

$(EXT_STAMP): $(VENV)/.installed $(RUST_SOURCES) pyproject.toml $(HOST_BIN)
	VIRTUAL_ENV=$(VENV) $(VENV)/bin/maturin develop --release --quiet
	touch $@

# The extension carries the `weir` and `weir-host` commands too (console
# scripts in .venv/bin), so the demo and the Python tests build nothing else.
.PHONY: build
build: sys-deps venv $(EXT_STAMP) ## Install the extension, the native state host and the weir and weir-host commands into .venv

.PHONY: wheel
wheel: build ## Build the wheel (extension, native state host, Python package) into $CARGO_TARGET_DIR/wheels
	$(VENV)/bin/maturin build --release --quiet

.PHONY: test-rust
test-rust: sys-deps venv ## Rust unit, property and integration tests (S3 tests use moto from .venv)
	cargo test --release --workspace --quiet

.PHONY: test-python
test-python: build ## Python tests (pytest), including Spark ones
	$(PY) -m pytest

.PHONY: test-cluster
test-cluster: build ## Only the local-cluster tests (two executor JVMs; part of test-python)
	$(PY) -m pytest -m cluster tests/cluster

.PHONY: test
test: lint test-rust test-python ## Every check and test: what CI runs

.PHONY: demo
demo: build ## The main job: CountWindowAverage on Spark local mode, a failure, a savepoint, a rescaled resume
	$(PY) examples/demo.py $(CURDIR)/.demo

# Growth: Weir, the ceilings and the function floor at N = 20M (the Spark peers
# would take hours there); skipped with ARGS=--quick.
GROWTH := --n 20000000 --files 200 --skip spark-apply --skip spark-transform --skip spark-jvm \
	--skip local-cluster --results-dir benchmarks/results/growth

.PHONY: bench
bench: sys-deps venv $(EXT_STAMP) ## Criterion benches, keyed-average vs Spark peers (N = 2M, then 20M), checkpoint benchmarks, an epoch's fixed cost (ARGS=--quick: small)
	cargo bench -p weir-state -p weir-state-rocksdb
	$(PY) benchmarks/run.py $(ARGS)
	$(if $(filter --quick,$(ARGS)),,$(PY) benchmarks/run.py $(GROWTH))
	$(PY) benchmarks/checkpoints.py $(filter --quick,$(ARGS))
	$(PY) benchmarks/epoch_overhead.py --function native
	$(PY) benchmarks/epoch_overhead.py --function per-record

.PHONY: lint
lint: sys-deps venv $(EXT_STAMP) ## clippy, rustfmt check, the no-pyo3 rule, the binding's share, ruff, mypy and stubtest
	cargo fmt --all --check
	cargo clippy --release --workspace --all-targets --quiet -- -D warnings
	ci/check-no-pyo3.sh
	ci/binding-share.sh
	$(VENV)/bin/ruff check python tests ci
	$(VENV)/bin/mypy --strict python/weir
	$(PY) -m mypy.stubtest weir._internal --allowlist ci/stubtest-allowlist.txt

.PHONY: fmt
fmt: ## Format Rust and Python sources
	cargo fmt --all
	$(VENV)/bin/ruff format python tests ci

.PHONY: clean
clean: ## Remove build outputs (keeps the shared cargo cache)
	rm -rf $(VENV) target
