"""Final completions: the answer without its reasoning channel.

The corpora hold (prompt, final completion) pairs only (Section 4 and F.2), so the reasoning
channel ``<think>...</think>`` of the source answers is cut here, for every row at once with
polars string kernels; a row whose cut is unsafe, or that keeps a tag, is flagged for the
scorer's ``reasoning_tag`` penalty (``final_completion`` states the rules).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

Text = pa.Array | pa.ChunkedArray | pl.Series


def series(text: Text) -> pl.Series:
    """``text`` as a polars string Series (Arrow data is wrapped without copying the characters)."""
    return text if isinstance(text, pl.Series) else pl.Series(pl.from_arrow(text))


def final_completion(answer: Text, close_tag: str = "</think>") -> pl.Series:
    """Text after the last ``close_tag`` (the whole answer when there is none), whitespace-stripped.

    1. An answer that contains the closing tag keeps only the text after its LAST
       closing tag. Taking the last one (not the first) means a second reasoning
       block, or a stray closing tag inside the reasoning, never leaks into the
       completion; an answer whose opening tag was dropped by the source rendering
       (only ``</think>`` present) is handled by the same rule.
    2. An answer with neither tag is a completion without a reasoning channel and
       is kept whole.
    3. An answer with an opening tag but no closing tag is an unclosed reasoning
       channel: there is no safe cut point, so its text is kept unchanged and the
       row is flagged, which the scorer turns into the ``reasoning_tag`` penalty.
    4. Any tag still present after the cut (in the final answer, e.g. a new
       ``<think>`` after the last ``</think>``) or anywhere in the prompt flags the
       row the same way: such a row "retains a reasoning-channel tag" (F.2).

    Leading and trailing whitespace (Unicode White_Space) of prompts and completions is
    stripped, so an answer that is only a reasoning channel becomes empty (the ``empty`` penalty).
    """
    return series(answer).str.split(close_tag).list.last().str.strip_chars()


def has_reasoning_tag(text: Text, tags: tuple[str, ...]) -> np.ndarray:
    """Whether each text contains any of ``tags`` (exact, case-sensitive, as rendered by the source)."""
    texts = series(text)
    found = [texts.str.contains(tag, literal=True).fill_null(False).to_numpy() for tag in tags if tag]
    return np.logical_or.reduce(found) if found else np.zeros(len(texts), dtype=bool)
