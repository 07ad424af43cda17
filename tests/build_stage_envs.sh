#!/usr/bin/env bash
# Builds the data, train and analysis stage environments as virtual environments (.venvs/<env>,
# the no-conda equivalent: docs/cluster-path.md) with the project's .venv; the eval environment
# is the vLLM tests' (tests/run_vllm_cpu.sh). Run by tests/run_environments.sh; tests/run_all.sh
# starts it beside the main suite, since it is mostly downloading and unpacking wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/disk.sh
need_free_gb 6 "the data, train and analysis environments"
for env in data train analysis; do
    .venv/bin/python -m workflow_scripts envs venv "$env"
done
