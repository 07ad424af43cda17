#!/usr/bin/env bash
# Every test, from a fresh checkout: the project's .venv (the README's set-up), the unit and
# toy-pipeline tests, then the four scripts that run what otherwise runs only on a cluster
# (docs/cluster-path.md). The Megatron environment is mostly downloading and unpacking wheels,
# so it is built beside the main suite, which is mostly computing; its log is logs/megatron-env.log.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q -r envs/requirements-local.txt
pip install -q -e .
mkdir -p logs
bash tests/build_megatron_env.sh > logs/megatron-env.log 2>&1 &
megatron_env=$!
trap 'kill "$megatron_env" 2>/dev/null || true' EXIT  # a failing suite leaves no build behind
python -m pytest -q
if ! wait "$megatron_env"; then
    cat logs/megatron-env.log >&2
    exit 1
fi
bash tests/run_megatron_cpu.sh
bash tests/run_vllm_cpu.sh
bash tests/run_environments.sh
bash tests/run_slurm.sh
