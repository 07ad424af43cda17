"""Training rows as token ids, span ids and labels, served in a deterministic order.

Labels follow the transformers convention: ``labels[t]`` is ``input_ids[t]`` (or -100 when
token ``t`` carries no loss) and the loss shifts them, i.e. the logits at position ``t - 1``
predict token ``t``. ``label_mode="answer"`` (SFT, Appendix F.6: loss on answer tokens) keeps
only A-span tokens; ``"all"`` (pretraining) keeps every non-pad token.

The order of an epoch is a permutation drawn from ``PCG64([seed, epoch])``, and the epochs
are concatenated into one stream of ``epochs * N`` rows that is cut into global batches, as
Megatron does: a global batch may straddle two epochs and only the very last one may be
short, so a run has ``ceil(epochs * N / global_batch_size)`` optimizer steps (Appendix F.6:
5 x 20,000 rows / 128 = 782; cutting each epoch separately would give 785). The rows of any
optimizer step are a function of (seed, step) alone: resuming needs no iterator state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from workflow_scripts.modeling.tokenizer import answer_span_mask
from workflow_scripts.registry import total_steps

IGNORE_INDEX = -100
NO_SPAN = -1
A_SPAN = 1
LABEL_MODES = ("answer", "all")


@dataclass(frozen=True)
class Example:
    """One encoded row: token ids and their span ids (0 = Q, 1 = A, -1 = template)."""

    input_ids: list[int]
    span_ids: list[int]


@dataclass(frozen=True)
class MicroBatch:
    """Right-padded tensors of a few rows; ``rows`` index the split (and the prior)."""

    rows: np.ndarray  # (B,)
    input_ids: Tensor  # (B, T)
    attention_mask: Tensor  # (B, T)
    span_ids: Tensor  # (B, T), -1 on padding
    labels: Tensor  # (B, T), -100 where no loss


def encode_rows(
    tokenizer: object, prompts: Sequence[str], answers: Sequence[str], sequence_length: int
) -> list[Example]:
    """Chat-render and span-label every (prompt, answer), keeping the first ``sequence_length`` tokens."""
    if sequence_length <= 0:
        raise ValueError(f"sequence_length must be positive, got {sequence_length}")
    examples = []
    for prompt, answer in zip(prompts, answers, strict=True):
        examples.append(Example(*answer_span_mask(tokenizer, prompt, answer, sequence_length)))
    return examples


def rows_without_answer(examples: Sequence[Example]) -> int:
    """How many rows keep no answer (A-span) token after truncation.

    When it is every row, an answer-only loss trains on nothing while every loss stays
    finite, so the caller refuses such a sequence length instead.
    """
    return sum(A_SPAN not in example.span_ids for example in examples)


def labels_for(example: Example, label_mode: str) -> list[int]:
    """Per-token labels (unshifted): the answer (``answer``) or every token (``all``).

    In ``answer`` mode the A-span tokens carry the loss, and so does the one token that
    closes the assistant turn (the template's end-of-turn), so that a tuned model learns
    to stop after its answer.
    """
    if label_mode == "answer":
        labels = [
            t if s == A_SPAN else IGNORE_INDEX
            for t, s in zip(example.input_ids, example.span_ids, strict=True)
        ]
        answer_positions = [i for i, s in enumerate(example.span_ids) if s == A_SPAN]
        if answer_positions and answer_positions[-1] + 1 < len(labels):
            closing = answer_positions[-1] + 1
            labels[closing] = example.input_ids[closing]
        return labels
    if label_mode == "all":
        return list(example.input_ids)
    raise ValueError(f"label_mode must be one of {LABEL_MODES}, got {label_mode!r}")


def collate(examples: Sequence[Example], rows: np.ndarray, pad_token_id: int, label_mode: str) -> MicroBatch:
    """Right-pad the rows ``rows`` of ``examples`` to their longest (pad: span -1, label -100, mask 0)."""
    picked = [examples[int(i)] for i in rows]
    width = max(len(e.input_ids) for e in picked)
    shape = (len(picked), width)
    input_ids = torch.full(shape, pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(shape, dtype=torch.long)
    span_ids = torch.full(shape, NO_SPAN, dtype=torch.long)
    labels = torch.full(shape, IGNORE_INDEX, dtype=torch.long)
    for b, example in enumerate(picked):
        n = len(example.input_ids)
        input_ids[b, :n] = torch.tensor(example.input_ids)
        attention_mask[b, :n] = 1
        span_ids[b, :n] = torch.tensor(example.span_ids)
        labels[b, :n] = torch.tensor(labels_for(example, label_mode))
    return MicroBatch(np.asarray(rows), input_ids, attention_mask, span_ids, labels)


@dataclass(frozen=True)
class BatchPlan:
    """Which rows make up each optimizer step and its micro-batches (gradient accumulation)."""

    num_rows: int
    global_batch_size: int
    micro_batch_size: int
    seed: int
    epochs: int

    def __post_init__(self) -> None:
        if self.num_rows <= 0:
            raise ValueError("no training rows")
        if self.micro_batch_size <= 0 or self.global_batch_size % self.micro_batch_size:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} is not a multiple of "
                f"micro_batch_size {self.micro_batch_size}"
            )

    @property
    def total_steps(self) -> int:
        return total_steps(self.num_rows, self.global_batch_size, self.epochs)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The permutation of all rows for ``epoch``, from ``PCG64([seed, epoch])``."""
        return np.random.Generator(np.random.PCG64([self.seed, epoch])).permutation(self.num_rows)

    def micro_batches(self, step: int) -> list[np.ndarray]:
        """Row indices of each micro-batch of optimizer step ``step`` (0-based) in the epoch stream."""
        start = step * self.global_batch_size
        stop = min(start + self.global_batch_size, self.epochs * self.num_rows)
        if start >= stop:
            raise ValueError(f"step {step} is past the last step {self.total_steps - 1}")
        epochs = range(start // self.num_rows, (stop - 1) // self.num_rows + 1)
        stream = np.concatenate([self.epoch_order(epoch) for epoch in epochs])
        offset = epochs[0] * self.num_rows
        rows = stream[start - offset : stop - offset]
        return [rows[i : i + self.micro_batch_size] for i in range(0, len(rows), self.micro_batch_size)]
