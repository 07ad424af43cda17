#!/usr/bin/env bash
# Builds every stage environment of envs/ as a virtual environment (the no-conda equivalent,
# docs/cluster-path.md) and runs a toy target with each rule in its own environment.
# Needs Environment Modules (Debian: environment-modules) and the .venv of the README's set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f /usr/share/modules/init/bash ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "Environment Modules not found: apt-get install environment-modules" >&2
        exit 1
    fi
    echo "tests/run_environments.sh: skipped: needs Environment Modules (as root: apt-get install environment-modules)" >&2
    exit 0
fi
. .venv/bin/activate
. tests/disk.sh
discard_when_done .venvs
bash tests/build_stage_envs.sh
python -m workflow_scripts envs venv eval --cpu
python -m pytest -q -m envs tests/test_environments.py
