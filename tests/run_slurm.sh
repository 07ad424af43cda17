#!/usr/bin/env bash
# Brings up the one-machine SLURM test cluster (tests/cluster/slurm.sh), runs the pipeline through
# it and tears the cluster down whatever happens: tests/test_slurm_cluster.py (about 5 minutes on
# 2 cores), then the rehearsal (tests/test_rehearsal_run.py: profiles/rehearsal's default target
# with the Megatron env, vLLM's CPU build and every stage env, which this script builds where they
# are missing). Needs root (apt-get, the daemons), Environment Modules and the .venv of the README's
# set-up; pytest arguments pass through to both. The cluster's state stays in $RPB_SLURM_DIR
# (default /tmp/rpb-slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "tests/run_slurm.sh: skipped: bringing up the test SLURM cluster needs root" >&2
    exit 0
fi
# shellcheck source=/dev/null
. .venv/bin/activate
[ -x .venv-megatron/bin/python ] || bash tests/build_megatron_env.sh
[ -x .venvs/eval/bin/python ] || python -m workflow_scripts envs venv eval --cpu
for stage in data train analysis; do
    [ -x ".venvs/$stage/bin/python" ] || { bash tests/build_stage_envs.sh; break; }
done
trap 'bash tests/cluster/slurm.sh down' EXIT
bash tests/cluster/slurm.sh up
python -m pytest -q -s -m slurm tests/test_slurm_cluster.py "$@"
python -m pytest -q -s -m rehearsal tests/test_rehearsal_run.py "$@"
