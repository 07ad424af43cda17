"""The Megatron-Bridge ``forward_step`` of post-training: prior rows and spans into the routers.

Bridge's own batch getter drops every key it does not know, ``metadata`` included, so this
step reads the raw batch from the iterator: it takes each sample's split row id from its
metadata, derives the Q/A span ids (``spans.batch_span_ids``), gathers the samples' prior
rows from the memory-mapped ``(N, 2, L, E)`` table, slices the spans for this rank's
sequence-parallel chunk and installs both in the routing context before the forward. With
pipeline parallelism 1 every micro-batch runs forward then backward before the next, so the
context is still that micro-batch's during activation recomputation.

The loss is Bridge's masked next-token loss in its per-token form (sum, token count), which
with ``calculate_per_token_loss`` is the mean over the answer tokens of the global batch,
as in the local backend. Bridge's eos padding goes to the model as Megatron's
``padding_mask``, so the routers' load-balancing and z-loss means and expert-bias counts
leave it out as the local backend's attention mask does. The auxiliary losses the routers
attach get the local backend's weight (the mean over micro-batches) through
``routing.megatron.aux_loss_correction``, which needs the global batch's answer-token count
before the first backward: the step reads all of its micro-batches at the first forward
(``StepBatches``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch

from workflow_scripts.modeling.objective import Objective
from workflow_scripts.routing.megatron import (
    MEGATRON_NATIVE_TERMS,
    MegatronRoutingContext,
    aux_loss_correction,
    sequence_parallel_slice,
)
from workflow_scripts.train.megatron.spans import (
    SpanTable,
    batch_span_ids,
    gather_prior,
    padding_mask,
    row_ids,
)


def routing_context(objective: Objective, num_moe_layers: int) -> MegatronRoutingContext:
    """The routers' shared context for a condition (the same ``Objective`` the local backend uses):
    every router term but those Megatron-Core computes itself (``settings.router_settings``)."""
    return MegatronRoutingContext(
        mode=objective.routing_mode,
        beta=objective.beta,
        bias_in_gate_weights=objective.bias_in_gate_weights,
        terms=tuple(
            (term, weight) for term, weight in objective.terms if term.name not in MEGATRON_NATIVE_TERMS
        ),
        num_moe_layers=num_moe_layers,
        clip_eps=objective.clip_eps,
        clip_c=objective.clip_c,
    )


def set_micro_batch(
    context: MegatronRoutingContext,
    batch: dict[str, Any],
    prior: np.ndarray | None,
    table: SpanTable,
    tp_rank: int,
    tp_size: int,
    sequence_parallel: bool,
) -> None:
    """Install one micro-batch's prior rows and this rank's span ids in ``context``."""
    if not context.needs_prior:
        context.set_batch(None, None)
        return
    if prior is None:
        raise ValueError("this condition reads a prior, but the run has none")
    tokens = batch["tokens"]
    rows = row_ids(batch["metadata"], prior.shape[0])
    spans = batch_span_ids(tokens, rows, table)  # (B, S)
    world, rank = (tp_size, tp_rank) if sequence_parallel else (1, 0)
    local = sequence_parallel_slice(spans, rank, world).to(tokens.device)  # (S_local, B)
    context.set_batch(gather_prior(prior, rows).to(tokens.device), local)


def routed_tokens(padding: torch.Tensor, tp_rank: int, tp_size: int, sequence_parallel: bool) -> int:
    """The token count Megatron multiplies this rank's auxiliary losses by under per-token loss.

    Its routers attach ``loss * valid * tp_size``, ``valid`` the non-padding tokens the rank
    routes: its sequence-parallel chunk, or the whole sequence without sequence parallelism.
    """
    chunk = sequence_parallel_slice(padding, tp_rank, tp_size) if sequence_parallel else padding
    return int((~chunk).sum()) * tp_size


class StepBatches:
    """The current optimizer step's micro-batches on this rank, read ahead from Bridge's iterator.

    Bridge's train step hands the schedule a new iterator over the step's micro-batches
    (``prepare_finetuning_batch``), so a new iterator object marks a new step.
    """

    def __init__(self) -> None:
        self._source: Any = None
        self._pending: list[dict[str, Any]] = []
        self.answer_tokens = 0.0
        self.micro_batches = 0

    def next(self, data_iterator: Any, device: Any) -> dict[str, Any]:
        """The next micro-batch; at a step's first, also its global answer tokens and micro-batches."""
        if data_iterator is not self._source:
            from megatron.core import parallel_state

            self._source = data_iterator
            self._pending = list(data_iterator)
            self.micro_batches = len(self._pending) * parallel_state.get_data_parallel_world_size()
            local = sum(float(batch["loss_mask"].sum()) for batch in self._pending)
            total = torch.tensor(local, dtype=torch.float64, device=device)
            group = parallel_state.get_data_parallel_group(with_context_parallel=True)
            if torch.distributed.get_world_size(group) > 1:
                torch.distributed.all_reduce(total, group=group)  # finalize_model_grads' divisor
            self.answer_tokens = float(total)
        return self._pending.pop(0)


def make_forward_step(
    context: MegatronRoutingContext, prior: np.ndarray | None, table: SpanTable
) -> Callable[..., tuple[torch.Tensor, Callable]]:
    """A ``forward_step(state, data_iterator, model)`` for ``megatron.bridge.training.finetune``."""
    from megatron.bridge.training.losses import masked_next_token_loss
    from megatron.core import parallel_state

    step = StepBatches()

    def forward_step(state: Any, data_iterator: Any, model: Any, return_schedule_plan: bool = False):
        device = torch.cuda.current_device()
        batch = step.next(data_iterator, device)
        tensors = {
            key: batch[key].to(device, non_blocking=True)
            for key in ("tokens", "labels", "loss_mask", "position_ids")
        }
        sequence_parallel = bool(state.cfg.model.sequence_parallel)
        tp_rank = parallel_state.get_tensor_model_parallel_rank()
        tp_size = parallel_state.get_tensor_model_parallel_world_size()
        set_micro_batch(
            context,
            {"tokens": tensors["tokens"], "metadata": batch["metadata"]},
            prior,
            table,
            tp_rank,
            tp_size,
            sequence_parallel,
        )
        padding = padding_mask(batch["tokens"], row_ids(batch["metadata"], table.num_rows), table)  # (B, S)
        context.aux_loss_scale = aux_loss_correction(
            step.answer_tokens,
            step.micro_batches,
            routed_tokens(padding, tp_rank, tp_size, sequence_parallel),
        )
        output = model(
            input_ids=tensors["tokens"],
            position_ids=tensors["position_ids"],
            attention_mask=None,
            labels=tensors["labels"],
            padding_mask=padding.to(device),
        )
        return output, partial(masked_next_token_loss, tensors["loss_mask"])

    return forward_step
