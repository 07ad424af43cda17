"""Local (transformers, single-process) training backend for post-training and toy-base pretraining.

* ``batches``: encode (prompt, answer) rows, labels, deterministic epoch order, micro-batches.
* ``objective``: what a registry condition adds to cross-entropy (router hook, auxiliary terms).
* ``loop``: the optimisation loop (AdamW, warmup + cosine, accumulation, clipping, JSON-lines log).
* ``checkpoint``: atomic resume checkpoints next to the run's output.
* ``cli``: ``python -m workflow_scripts train run``.

Importing this package is cheap; the submodules import torch.
"""
