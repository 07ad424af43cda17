"""Corpus construction (Appendix F.2): score every row of a raw source, select train and probe splits.

The source readers and the toy raw sources this stage starts from live below the stages, in
:mod:`workflow_scripts.chat_sources`, because the ``models`` stage pretrains on them too.
"""
