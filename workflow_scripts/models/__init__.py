"""The ``models`` stage: base checkpoints, pinned hub downloads or toy bases pretrained here.

A toy base is pretrained briefly with the same loop post-training uses; that loop, the
tokenizer and the checkpoint code live below the stages, in :mod:`workflow_scripts.modeling`.
"""
