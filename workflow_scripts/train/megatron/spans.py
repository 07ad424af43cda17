"""Q/A span ids and prior rows of a Megatron-Bridge micro-batch.

Bridge's chat dataset tokenises each row itself and hands the step ``tokens`` ``(B, S)``:
the row's encoding without its last token, cut to the sequence length and padded with eos.
The span of every token is derived the same way the local backend derives it:
``modeling.tokenizer.answer_span_mask`` on the row's prompt and answer (``span_table``). The
token ids of both encodings must agree on every input position; a mismatch (another chat
template, another tokenizer) stops the run with the row named, because a misaligned span
would bias the wrong tokens. The encoding's last token is never an input: where the
template does not end in eos (Qwen3's ``<|im_end|>\\n``, Moonlight's ``<|im_end|>``) Bridge's
padding stands there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from workflow_scripts.modeling.batches import NO_SPAN
from workflow_scripts.modeling.tokenizer import answer_span_mask
from workflow_scripts.train.megatron.vocabulary import check_row

#: The metadata key of a chat-dataset row that holds its row id in the split (and the prior).
ROW_ID_KEY = "prior_row"


class SpanTable:
    """Token ids and span ids of each split row, encoded on demand with the local backend's rule."""

    def __init__(
        self,
        encode: Callable[[int], tuple[Sequence[int], Sequence[int]]],
        num_rows: int,
        cache_rows: int = 4096,
    ):
        self._encode = lru_cache(maxsize=cache_rows)(encode)
        self.num_rows = num_rows

    def row(self, row_id: int) -> tuple[Sequence[int], Sequence[int]]:
        return self._encode(int(row_id))


def span_table(
    tokenizer: Any, prompts: Sequence[str], answers: Sequence[str], sequence_length: int, rows: int
) -> SpanTable:
    """The split's ``SpanTable``: each row encoded to one token past Bridge's ``sequence_length`` inputs.

    Bridge's inputs are the encoding without its last token, so the token after the last
    input decides whether the encoding was cut; ``batch_span_ids`` compares the inputs only.
    A row with a token id at or past the model's ``rows`` embedding rows is refused as it is
    encoded, before any forward takes it (``vocabulary.check_row``).
    """

    def encode(row: int) -> tuple[Sequence[int], Sequence[int]]:
        ids, spans = answer_span_mask(tokenizer, prompts[row], answers[row], sequence_length + 1)
        check_row(row, ids, rows)
        return ids, spans

    return SpanTable(encode, len(prompts))


def row_ids(metadata: Sequence[dict], num_rows: int) -> np.ndarray:
    """The split row id of every sample of a micro-batch, from Bridge's per-sample ``metadata``."""
    ids = []
    for sample, entry in enumerate(metadata):
        if ROW_ID_KEY not in entry:
            raise ValueError(f"micro-batch sample {sample} has no {ROW_ID_KEY!r} in its metadata: {entry}")
        row = int(entry[ROW_ID_KEY])
        if not 0 <= row < num_rows:
            raise ValueError(
                f"micro-batch sample {sample}: {ROW_ID_KEY} {row} outside the split's {num_rows} rows"
            )
        ids.append(row)
    return np.asarray(ids, dtype=np.int64)


def batch_span_ids(tokens: Tensor, rows: np.ndarray, table: SpanTable) -> Tensor:
    """``(B, S)`` span ids of a micro-batch's input tokens (0 = Q, 1 = A, -1 = template / padding).

    Position ``t`` of ``tokens`` is token ``t`` of the row's encoding for every ``t`` before
    the encoding's last token; later positions (Bridge's eos padding) get no span. Raises
    ``ValueError`` when the tokens disagree.
    """
    batch, seq = tokens.shape
    spans = torch.full((batch, seq), NO_SPAN, dtype=torch.long)
    for sample, row in enumerate(rows):
        ids, row_spans = table.row(int(row))
        shared = min(seq, len(ids) - 1)
        expected = torch.as_tensor(list(ids[:shared]), dtype=tokens.dtype)
        got = tokens[sample, :shared].cpu()
        if not torch.equal(got, expected):
            first = int((got != expected).nonzero()[0, 0])
            raise ValueError(
                f"split row {row}: the chat dataset's token {first} is {int(got[first])}, the span "
                f"encoding's is {int(expected[first])}; both must apply the same tokenizer and chat template"
            )
        spans[sample, :shared] = torch.as_tensor(list(row_spans[:shared]), dtype=torch.long)
    return spans


def padding_mask(tokens: Tensor, rows: np.ndarray, table: SpanTable) -> Tensor:
    """``(B, S)`` true on Bridge's eos padding: the positions at or past each row's last input.

    Megatron's ``padding_mask`` convention, which keeps padding out of the load-balancing and
    z-loss means and the expert-bias counts as the local backend's attention mask does.
    """
    batch, seq = tokens.shape
    lengths = torch.tensor([min(seq, len(table.row(int(row))[0]) - 1) for row in rows])  # (B,)
    return torch.arange(seq)[None, :] >= lengths[:, None]


def gather_prior(prior: np.ndarray, rows: np.ndarray) -> Tensor:
    """A micro-batch's ``(B, 2, L, E)`` float32 prior rows from the memory-mapped ``(N, 2, L, E)`` table."""
    return torch.from_numpy(np.asarray(prior[rows], dtype=np.float32))
