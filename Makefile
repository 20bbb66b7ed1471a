# Two entry points for a new machine: `make demo` and `make test`. Both create .venv/ first
# (idempotent: re-running only reinstalls when pyproject.toml changed).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STORE ?= .cograg-demo
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

demo: setup
	$(BIN)/cograg ingest examples/corpus --store $(DEMO_STORE)
	$(BIN)/cograg docs list --store $(DEMO_STORE)

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

bench: setup
	$(BIN)/python benchmarks/ingest.py

clean:
	rm -rf $(VENV) $(DEMO_STORE) build *.egg-info src/*.egg-info
