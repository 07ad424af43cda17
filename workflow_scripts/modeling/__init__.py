"""Local model backend: tokenizer, tiny MoE checkpoints of the three router families, training loop.

Below the stages because priors, training, probing and evaluation all load checkpoints and label
Q/A spans, and both the ``models`` stage (toy-base pretraining) and the ``train`` stage
(post-training) run the same loop. Submodules are imported explicitly; they import torch.

* ``tokenizer``: byte-level BPE with a chat template, and the Q/A span label of each token.
* ``moonlight``, ``deepseek_v2``, ``qwen3`` (over ``bpe``): each toy's tokenizer files as its
  hub model ships them, learned offline from the toy corpus.
* ``toy``: ``ToyModelSpec``, ``build_toy_model``, ``save_toy_base``, ``load_local``.
* ``batches``, ``objective``, ``loop``, ``checkpoint``, ``run_key``: encoded rows, what a
  registry condition adds to cross-entropy (both backends), the optimisation loop, and its
  resumable checkpoints bound to the run's key.
"""
