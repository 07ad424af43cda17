"""Final completions: the answer without its reasoning channel.

The corpora hold (prompt, final completion) pairs only (Section 4 and F.2), so
the reasoning channel ``<think>...</think>`` that the source answers carry is
removed here. The rules, applied to every row at once with RE2 kernels:

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

Leading and trailing whitespace of prompts and completions is stripped, so an
answer that is only a reasoning channel becomes empty (the ``empty`` penalty).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def final_completion(answer: pa.Array | pa.ChunkedArray, close_tag: str = "</think>") -> pa.ChunkedArray:
    """Text after the last ``close_tag`` (the whole answer when there is none), whitespace-stripped."""
    # Greedy ``.*`` under (?s) runs to the last occurrence of the closing tag.
    cut = pc.utf8_trim_whitespace(pc.replace_substring_regex(answer, f"(?s)^.*{re.escape(close_tag)}", ""))
    return pa.chunked_array([cut]) if isinstance(cut, pa.Array) else cut


def has_reasoning_tag(text: pa.Array | pa.ChunkedArray, tags: tuple[str, ...]) -> np.ndarray:
    """Whether each text contains any of ``tags`` (exact, case-sensitive, as rendered by the source)."""
    pattern = "|".join(re.escape(tag) for tag in tags)
    return pc.fill_null(pc.match_substring_regex(text, pattern), False).to_numpy(zero_copy_only=False)
