#!/usr/bin/env bash
# The Megatron tests on CPU (Megatron-Core router, forward step, Megatron-Bridge import, config,
# checkpoints and export), in their own Python 3.12 environment (.venv-megatron, built or brought
# up to date by tests/build_megatron_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/build_megatron_env.sh
. tests/disk.sh
discard_when_done .venv-megatron
local_layer=.venv-megatron/local-transformers
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
# The product's training entry under torchrun at world size 4 (Bridge's finetune(), Megatron's
# distributed optimizer, optimizer.step()): every condition kind, Router-L2's anchor and resume.
.venv-megatron/bin/python -m pytest -q -m megatron_world tests/test_megatron_world.py
# A toy table through the Megatron rules on CPU (tests/finetune_cpu.py): Snakemake and the other
# stages in the project's .venv, the Megatron jobs in .venv-megatron. The GPU check's whole run on
# CPU (about 10 minutes, three trainings) is left to developers: .venv/bin/python -m pytest -m megatron_table tests/test_gpu_check.py
# The rehearsal (RPB_REHEARSAL=1 tests/run_slurm.sh, which run_all.sh runs) runs the Megatron rules
# end to end through SLURM; without it, one table through them here.
if [ "${RPB_REHEARSAL:-0}" != 1 ]; then
    .venv/bin/python -m pytest -q -m megatron_table tests/test_megatron_toy_table.py
fi
