"""The ``models`` stage: base checkpoints, pinned hub downloads or toy bases pretrained here.

It sits above ``train`` because a toy base is pretrained briefly with the training loop; the
tokenizer and checkpoint code every stage shares lives below, in :mod:`workflow_scripts.modeling`.
"""
