#!/usr/bin/env bash
# Brings up the one-machine SLURM test cluster (tests/cluster/slurm.sh), runs the pipeline through
# it (tests/test_slurm_cluster.py) and tears the cluster down whatever
# happens. With RPB_REHEARSAL=1 (as tests/run_all.sh sets it) the rehearsal runs beside them
# (tests/test_rehearsal_run.py: profiles/rehearsal's default target with the Megatron env, vLLM's
# CPU build and every stage env, which it builds where they are missing). Needs root (apt-get, the daemons), Environment Modules and the .venv of the
# README's set-up; pytest arguments pass through. The cluster's state stays in $RPB_SLURM_DIR
# (default /tmp/rpb-slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "tests/run_slurm.sh: skipped: bringing up the test SLURM cluster needs root" >&2
    exit 0
fi
# shellcheck source=/dev/null
. .venv/bin/activate
rehearsal="${RPB_REHEARSAL:-0}"
if [ "$rehearsal" = 1 ]; then
    [ -x .venv-megatron/bin/python ] || bash tests/build_megatron_env.sh
    [ -x .venvs/eval/bin/python ] || python -m workflow_scripts envs venv eval --cpu
    for stage in data train analysis; do
        [ -x ".venvs/$stage/bin/python" ] || { bash tests/build_stage_envs.sh; break; }
    done
fi
trap 'bash tests/cluster/slurm.sh down' EXIT
bash tests/cluster/slurm.sh up
if [ "$rehearsal" = 1 ]; then
    # Side by side, one pytest-xdist worker each: the suite's jobs mostly wait on the scheduler.
    python -m pytest -q -n 2 --dist loadgroup -m "slurm or rehearsal" \
        tests/test_slurm_cluster.py tests/test_rehearsal_run.py "$@"
else
    python -m pytest -q -s -m slurm tests/test_slurm_cluster.py "$@"
fi
