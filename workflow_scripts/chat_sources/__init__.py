"""Raw chat sources: the hub datasets' schemas read into one frame, and toy rows in those schemas.

Below the stages because the ``data`` stage builds the corpora from them and the ``models``
stage pretrains a toy base on toy rows read the same way.

* ``readers``: ``read_source`` (one normalised frame per source format).
* ``completions``: ``final_completion`` (the answer without its reasoning channel).
* ``toy``: ``generate`` (toy rows laid out like a hub source, from :mod:`workflow_scripts.toy_tasks`).
"""
