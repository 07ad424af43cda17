#!/usr/bin/env bash
# The first GPU check of the paper-scale path (docs/training.md): Megatron-Bridge's finetune()
# under RPB on a toy Moonlight on one GPU, killed at its first checkpoint and resumed, exported to
# HF, and the two models' logits compared; PASS/FAIL per step. About 10 minutes on one H200.
#
#   srun --gres=gpu:1 --cpus-per-task=8 --time=30 bash tests/gpu/check_bridge_finetune.sh \
#       [--container envs/megatron.sif] [--work results/gpu_check] [--dry-run]
#
# Runs in the Python that runs Snakemake (it needs the repository's workflow_scripts and PyYAML).
# The steps run in the stage envs, as the rules do: TRAIN_PYTHON (default $RPB_VENVS/train, else
# .venvs/train, else python) builds the toy base and prior and loads the export; MEGATRON_PYTHON
# (likewise for megatron) imports, trains and exports, unless --container names the image.
set -euo pipefail
cd "$(dirname "$0")/../.."
stage_python() {
    local candidate="${RPB_VENVS:-$PWD/.venvs}/$1/bin/python"
    if [ -x "$candidate" ]; then echo "$candidate"; else echo python; fi
}
exec python -m tests.gpu.check_bridge_finetune \
    --train-python "${TRAIN_PYTHON:-$(stage_python train)}" \
    --megatron-python "${MEGATRON_PYTHON:-$(stage_python megatron)}" "$@"
