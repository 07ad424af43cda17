#!/usr/bin/env bash
# Run by Snakemake in envs/megatron.yaml's env once it is created (its text is part of the env's
# hash): what a conda pip list cannot say.
# 1. Megatron-Core and Megatron-Bridge without their dependencies: their runtime imports are the
#    yaml's pins (envs/requirements-megatron-gpu.txt says why).
# 2. Transformer Engine's PyTorch extension, an sdist whose setup imports torch: built against
#    the env's torch (--no-build-isolation; --no-deps: what it imports is pinned), from source
#    rather than NVIDIA's prebuilt wheel on GitHub (NVTE_PYTORCH_FORCE_BUILD), which compute nodes
#    often cannot reach. The build needs nvcc of a CUDA 13 toolkit (torch 2.13.0's PyPI build is
#    CUDA 13.0) on PATH or under CUDA_HOME, and a C++ compiler; cuDNN's and NCCL's headers, which
#    a toolkit lacks, come from torch's own nvidia-cudnn-cu13 and nvidia-nccl-cu13 wheels.
set -euo pipefail
python -m pip install --no-deps megatron-core==0.19.2 megatron-bridge==0.6.2
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
export CPATH="$site/nvidia/cudnn/include:$site/nvidia/nccl/include${CPATH:+:$CPATH}"
NVTE_PYTORCH_FORCE_BUILD=TRUE python -m pip install --no-deps --no-build-isolation transformer-engine-torch==2.17.1
