#!/usr/bin/env bash
# Brings up the one-machine SLURM test cluster (tests/cluster/slurm.sh), runs the pipeline through
# it (tests/test_slurm_cluster.py, about 5 minutes on 2 cores) and tears the cluster down whatever
# happens. Needs root (apt-get, the daemons) and the .venv of the README's set-up; pytest arguments
# pass through. The cluster's state stays in $RPB_SLURM_DIR (default /tmp/rpb-slurm).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "tests/run_slurm.sh: skipped: bringing up the test SLURM cluster needs root" >&2
    exit 0
fi
# shellcheck source=/dev/null
. .venv/bin/activate
trap 'bash tests/cluster/slurm.sh down' EXIT
bash tests/cluster/slurm.sh up
python -m pytest -q -s -m slurm tests/test_slurm_cluster.py "$@"
