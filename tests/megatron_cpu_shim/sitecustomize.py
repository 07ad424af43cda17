"""Test-only: the CPU adaptations of ``tests.finetune_cpu`` in every Python process that imports Bridge.

A test puts this folder first on a job's ``PYTHONPATH`` to run the product's Megatron
commands (import, training under ``torchrun``, export) unchanged on a CPU machine.

The adaptations are installed when a process first imports ``megatron.bridge``, just before
the package's own ``__init__`` runs, not at start-up: importing Bridge costs about 20 s of CPU,
and most processes of a Megatron job never do (the launcher, ``torchrun``'s agent, the work
folder's claim, the checkpoint writer's workers, the chat dataset's writer). Interpreters
without Megatron-Bridge, and processes that never import it, are left alone.
"""

import importlib.abc
import importlib.machinery
import sys

BRIDGE = "megatron.bridge"


class AdaptBeforeBridge(importlib.abc.MetaPathFinder):
    """Finds ``megatron.bridge`` as the import system would, and adapts the process before it runs."""

    def find_spec(self, name, path, target=None):
        if name != BRIDGE:
            return None
        sys.meta_path.remove(self)  # once per process; install() imports Bridge's modules itself
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        run_init = spec.loader.exec_module

        def exec_module(module):
            from tests import finetune_cpu

            finetune_cpu.install()
            run_init(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, AdaptBeforeBridge())
