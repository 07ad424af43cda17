#!/usr/bin/env bash
# The Megatron tests on CPU (Megatron-Core router, forward step, Megatron-Bridge import, config,
# checkpoints and export), in their own Python 3.12 environment (.venv-megatron): Megatron-Core
# 0.19 needs Python >= 3.12. Interpreter: $PYTHON312, else python3.12 on PATH, else pyenv's 3.12.
# Two transformers (envs/requirements-megatron-cpu.txt says why): Bridge's pin (5.12.1) in the
# environment, the local backend's (5.24.0) in a folder put first on PYTHONPATH for the tests
# that compare the Megatron router with the local backend's DeepSeek-V2 router class.
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
# Imports checked first: a test module that cannot import is skipped, which would hide a broken
# environment behind "1 skipped".
PYTHONPATH="$local_layer" .venv-megatron/bin/python -c 'import transformers.models.deepseek_v2.modeling_deepseek_v2 as m, megatron.core; m.DeepseekV2TopkRouter'
.venv-megatron/bin/python -c 'import megatron.core, transformers'
compared_with_local=(tests/test_routing_megatron.py)
PYTHONPATH="$local_layer" .venv-megatron/bin/python -m pytest -q -m megatron "${compared_with_local[@]}"
# Every other Megatron test file (pytest's --ignore does not drop a file named on the command line).
others=()
for file in tests/test_*megatron*.py; do
    [[ " ${compared_with_local[*]} " == *" $file "* ]] || others+=("$file")
done
.venv-megatron/bin/python -m pytest -q -m megatron "${others[@]}"
# A toy table through the Megatron rules on CPU (tests/finetune_cpu.py): Snakemake and the other
# stages in the project's .venv, the Megatron jobs in .venv-megatron. The GPU check's whole run on
# CPU (about 10 minutes, three trainings) is left to developers: .venv/bin/python -m pytest -m megatron_table tests/test_gpu_check.py
.venv/bin/python -m pytest -q -m megatron_table tests/test_megatron_toy_table.py
