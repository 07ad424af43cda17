"""Cluster training backend: Megatron-Bridge post-training of the paper's models (F.1, F.6).

* ``settings``: every Bridge / Megatron-Core setting of a run, from the registry (pure Python).
* ``spans``: Q/A span ids of a Bridge micro-batch and the prior rows it reads (torch only).
* ``resume``: which Megatron checkpoint is complete, and what a finished run resumed from.
* ``plan``: node-hours and GPU-hours of a target before anything is submitted.
* ``entry``: ``python -m workflow_scripts train megatron ...`` (imports Megatron-Bridge).

Only ``entry`` needs Megatron-Bridge (and Transformer Engine); ``routing.megatron`` needs
Megatron-Core, which runs on CPU.
"""
