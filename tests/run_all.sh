#!/usr/bin/env bash
# Every test, from a fresh checkout: the project's .venv (the README's set-up), whether the
# Megatron conda env's pins install on its platform, the unit and toy-pipeline tests, then the
# four scripts that run what otherwise runs only on a cluster (docs/cluster-path.md). Building an
# environment is mostly downloading and unpacking wheels, so the Megatron one is checked and built
# beside the main suite and the stage ones beside the vLLM tests, which are mostly computing; their logs are
# logs/megatron-env.log and logs/stage-envs.log.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q -r envs/requirements-local.txt
pip install -q -e .
mkdir -p logs
# Waits for a build started in the background; prints its log if it failed.
finish() {
    if ! wait "$1"; then
        cat "$2" >&2
        exit 1
    fi
}
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # a failing step leaves no build behind
# The resolution check fetches 3 GB of wheels (1.5 to 6.5 minutes) and removes them before the
# build starts, so that the two never share the disk.
(bash tests/check_megatron_env_resolves.sh && bash tests/build_megatron_env.sh) > logs/megatron-env.log 2>&1 &
megatron_env=$!
python -m pytest -q
finish "$megatron_env" logs/megatron-env.log
bash tests/run_megatron_cpu.sh
# The stage environments beside the vLLM tests: the Megatron environment is gone by then, and the
# eval environment and these (about 8 GB together) are on disk together for the environment tests
# in any case.
bash tests/build_stage_envs.sh > logs/stage-envs.log 2>&1 &
stage_envs=$!
bash tests/run_vllm_cpu.sh
finish "$stage_envs" logs/stage-envs.log
bash tests/run_environments.sh
bash tests/run_slurm.sh
