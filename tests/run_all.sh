#!/usr/bin/env bash
# Every test, from a fresh checkout: the project's .venv (the README's set-up), whether the
# Megatron conda env's pins install on its platform, the unit and toy-pipeline tests, then the
# scripts that run what otherwise runs only on a cluster (docs/cluster-path.md), the last of them
# with the rehearsal: profiles/rehearsal's default target through SLURM with every stage's
# environment, each job checked to have run in its own (which is what tests/run_environments.sh
# checks on a toy target, for a machine without SLURM). Building an environment is mostly
# downloading and unpacking wheels, so every one is built beside the main suite, which is mostly
# computing; their logs are logs/megatron-env.log and logs/stage-envs.log.
# The rehearsal needs every environment at once, so none is discarded on the way
# (RPB_DISCARD_TEST_ENVS is for the scripts run alone).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q -r envs/requirements-local.txt
pip install -q -e .
mkdir -p logs
. tests/disk.sh
need_free_gb 25 "every test environment at once (the rehearsal's) and the runs' outputs"
# The rehearsal, last, needs every environment, and runs the Megatron rules end to end (so
# run_megatron_cpu.sh leaves out its one-table run of them).
export RPB_DISCARD_TEST_ENVS=0 RPB_REHEARSAL=1
# Waits for a step started in the background; prints its log if it failed.
finish() {
    if ! wait "$1"; then
        cat "$2" >&2
        exit 1
    fi
}
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # a failing step leaves no build behind
# The resolution check fetches 3 GB of wheels (1.5 to 6.5 minutes) and removes them before the
# build starts, so that the two never share the disk. Tests, by contrast, run one script at a time:
# each keeps both cores busy (tried: the Megatron tests beside the main suite gained nothing, their
# contention costing what the main suite's idle core gave).
(bash tests/check_megatron_env_resolves.sh && bash tests/build_megatron_env.sh) > logs/megatron-env.log 2>&1 &
megatron_env=$!
(python -m workflow_scripts envs venv eval --cpu && bash tests/build_stage_envs.sh) > logs/stage-envs.log 2>&1 &
stage_envs=$!
# Both cores (pytest-xdist): a module's tests, and the users of the toy run, stay on one worker
# (tests/conftest.py).
python -m pytest -q -n auto --maxprocesses 4 --dist loadgroup
finish "$megatron_env" logs/megatron-env.log
bash tests/run_megatron_cpu.sh
finish "$stage_envs" logs/stage-envs.log
bash tests/run_vllm_cpu.sh
bash tests/run_slurm.sh
