"""Rows of a raw source that repeat an id: a copy is dropped, a conflict is refused.

The splits name their rows by the dataset's own id (``source_id``), and the probe pool must be
disjoint from training (Appendix F.8): a row repeated in the raw file would otherwise be
selected twice, possibly once on each side. Content is the first exchange as read (the user
turn and the whole assistant turn, reasoning included), which is all a corpus takes of a row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workflow_scripts.errors import UserInputError

CONTENT = ("prompt_raw", "answer_raw")


def drop_repeated_rows(source: pd.DataFrame, raw: str) -> tuple[pd.DataFrame, np.ndarray]:
    """``source`` (``read_source``'s frame) without rows that repeat an earlier row; their row ids.

    A row with the id and content of an earlier row is a copy: dropped, the first kept. Two
    rows of one id with different content are refused (``UserInputError`` naming ``raw``, the
    id and the row ids): which one the id means is not the build's to guess. Rows without an id
    (``""``) are not compared here; identical texts under different ids are kept apart by the
    selection (``selection.select``).
    """
    ids = source["source_id"]
    repeated = ids.duplicated(keep=False).to_numpy(dtype=bool) & (ids != "").to_numpy(dtype=bool)
    if not repeated.any():
        return source, np.zeros(0, dtype=np.int64)
    # Only rows whose id repeats are compared on their (long) texts.
    candidates = source.loc[repeated, ["row_id", "source_id", *CONTENT]]
    copy = candidates.duplicated(["source_id", *CONTENT], keep="first")
    distinct = candidates[~copy]
    conflicting = distinct["source_id"].duplicated(keep=False)
    if conflicting.any():
        first = distinct.loc[conflicting, "source_id"].iloc[0]
        rows = ", ".join(map(str, distinct.loc[distinct["source_id"] == first, "row_id"]))
        others = distinct.loc[conflicting, "source_id"].nunique() - 1
        more = f" ({others} more ids likewise)" if others else ""
        raise UserInputError(
            f"{raw}: id {first!r} names rows with different content, row ids {rows}{more}; an id must "
            "name one row: fix or re-download the raw file"
        )
    dropped = candidates.loc[copy, "row_id"].to_numpy(dtype=np.int64)
    kept = source[~source["row_id"].isin(dropped)].reset_index(drop=True)
    return kept, dropped
