"""The ``train`` stage: post-train one (model, corpus, condition, seed) on either backend.

* ``cli``: ``python -m workflow_scripts train run`` (the local transformers backend, whose loop
  lives in :mod:`workflow_scripts.modeling`) and the ``megatron-*`` commands.
* ``condition``: the run's ``Objective`` and prior meta, built the same way by both backends.
* ``megatron``: the cluster backend (Megatron-Bridge); see its package docstring.

Importing this package is cheap; the submodules import torch.
"""
