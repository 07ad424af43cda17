"""Test-only: the CPU adaptations of ``tests.finetune_cpu`` in every Python process of the Megatron env.

A test puts this folder first on a job's ``PYTHONPATH`` to run the product's Megatron
commands (import, training under ``torchrun``, export) unchanged on a CPU machine. Interpreters
without Megatron-Core (the other stages' environments) are left alone.
"""

import importlib.util

if importlib.util.find_spec("megatron") and importlib.util.find_spec("megatron.bridge"):
    from tests import finetune_cpu

    finetune_cpu.install()
