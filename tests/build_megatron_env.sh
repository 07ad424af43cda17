#!/usr/bin/env bash
# Builds (or brings up to date) the Megatron tests' Python 3.12 environment, .venv-megatron:
# Megatron-Core 0.19 needs Python >= 3.12. Interpreter: $PYTHON312, else python3.12 on PATH,
# else pyenv's 3.12. Two transformers (envs/requirements-megatron-cpu.txt says why): Bridge's
# pin (5.12.1) in the environment, the local backend's (5.24.0) in .venv-megatron/local-transformers,
# which the tests comparing the Megatron router with the local backend put first on PYTHONPATH.
# Run by tests/run_megatron_cpu.sh; .ci/run starts it early, beside the main suite, since most
# of its time is downloading and unpacking wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
find_python() {
    for candidate in "${PYTHON312:-}" python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
        if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    echo "no Python 3.12 found: set PYTHON312 to a Python 3.12 interpreter" >&2
    exit 1
}
if [ ! -x .venv-megatron/bin/python ]; then
    . tests/disk.sh
    need_free_gb 9 "the Megatron environment (PyPI's CUDA build of torch for Python 3.12)"
    "$(find_python)" -m venv .venv-megatron
fi
export PIP_NO_CACHE_DIR=1
.venv-megatron/bin/pip install -q -r envs/requirements-megatron-cpu.txt
.venv-megatron/bin/pip install -q --no-deps -r envs/requirements-megatron-bridge.txt
.venv-megatron/bin/pip install -q --no-deps -e .
local_layer=.venv-megatron/local-transformers
if ! cmp -s envs/requirements-megatron-local-transformers.txt "$local_layer/requirements.txt"; then
    rm -rf "$local_layer"
    .venv-megatron/bin/pip install -q --no-deps --target "$local_layer" -r envs/requirements-megatron-local-transformers.txt
    cp envs/requirements-megatron-local-transformers.txt "$local_layer/requirements.txt"
fi
