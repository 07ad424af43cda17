"""Local model backend: byte-level BPE tokenizer and tiny MoE checkpoints of the three router families.

Below the stages because priors, training, probing and evaluation all load checkpoints and label
Q/A spans, while the ``models`` stage itself pretrains a toy base with the training loop.

* ``workflow_scripts.modeling.tokenizer``: ``train_tokenizer`` (byte-level BPE with special
  tokens and a chat template) and ``answer_span_mask`` (Q/A span label per token).
* ``workflow_scripts.modeling.toy``: ``ToyModelSpec``, ``toy_config``, ``build_toy_model``,
  ``moe_layer_indices``, ``router_modules``, ``save_toy_base``, ``load_local``.
"""
