#!/usr/bin/env bash
# The Megatron-Core tests (router subclass parity, forward-step spans) on CPU, in their own
# Python 3.12 environment (.venv-megatron): Megatron-Core 0.19 needs Python >= 3.12.
# Interpreter: $PYTHON312, else python3.12 on PATH, else pyenv's 3.12.
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
    discard_when_done .venv-megatron
fi
.venv-megatron/bin/pip install -q -r envs/requirements-megatron-cpu.txt
.venv-megatron/bin/pip install -q --no-deps -e .
.venv-megatron/bin/python -m pytest -q -m megatron tests/test_*megatron*.py
