"""The forward step's micro-batch context: spans from metadata, prior rows, sequence-parallel slices.

Runs in the Megatron-Core environment (the context lives beside the router subclass).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron-Core environment (docs/training.md)")
pytestmark = pytest.mark.megatron

import torch  # noqa: E402

from tests.dag import job_condition, toy_rows, toy_tokenizer  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.modeling.tokenizer import answer_span_mask  # noqa: E402
from workflow_scripts.routing.core import prior_to_bias, span_bias_per_token  # noqa: E402
from workflow_scripts.train.megatron.spans import SpanTable, padding_mask  # noqa: E402
from workflow_scripts.train.megatron.step import routed_tokens, routing_context, set_micro_batch  # noqa: E402

LAYERS, EXPERTS = 2, 4


@pytest.fixture(scope="module")
def micro_batch():
    tokenizer = toy_tokenizer()
    prompts, answers = toy_rows(5)
    table = SpanTable(lambda row: answer_span_mask(tokenizer, prompts[row], answers[row], 64), len(prompts))
    rows = [3, 1]
    encoded = [table.row(r) for r in rows]
    seq = max(len(ids) for ids, _ in encoded) + 4
    seq += seq % 2  # divisible by the tensor-parallel size
    tokens = torch.full((2, seq), tokenizer.eos_token_id)
    for b, (ids, _) in enumerate(encoded):
        tokens[b, : len(ids) - 1] = torch.tensor(ids[:-1])
    prior = np.random.default_rng(0).dirichlet(np.ones(EXPERTS), size=(5, 2, LAYERS)).astype(np.float32)
    batch = {"tokens": tokens, "metadata": [{"prior_row": r} for r in rows]}
    full_spans = torch.full((2, seq), -1)
    for b, (ids, spans) in enumerate(encoded):
        full_spans[b, : len(ids) - 1] = torch.tensor(spans[:-1])
    return batch, prior, table, rows, full_spans


def test_sequence_parallel_ranks_together_hold_the_whole_micro_batch_in_router_order(micro_batch):
    batch, prior, table, rows, full_spans = micro_batch
    objective = Objective.from_condition({"intervention": "rpb", "params": {"beta": 1.0}, "prior": "base"})
    bias = prior_to_bias(torch.from_numpy(prior[rows]))  # (B, 2, L, E)
    for layer in range(LAYERS):
        want = span_bias_per_token(bias[:, :, layer], full_spans).transpose(0, 1)  # (S, B, E)
        parts = []
        for rank in range(2):
            context = routing_context(objective, LAYERS)
            set_micro_batch(context, batch, prior, table, rank, 2, sequence_parallel=True)
            seq_local = full_spans.shape[1] // 2
            parts.append(context.token_rows(context._rows, layer, seq_local * 2, torch.device("cpu")))
        got = torch.cat(parts).reshape(want.shape)
        torch.testing.assert_close(got, want)


def test_without_sequence_parallelism_every_rank_routes_the_whole_sequence(micro_batch):
    batch, prior, table, rows, full_spans = micro_batch
    objective = Objective.from_condition(job_condition("kl_base", "base", coefficient=1.0))
    context = routing_context(objective, LAYERS)
    set_micro_batch(context, batch, prior, table, tp_rank=1, tp_size=2, sequence_parallel=False)
    mask = context.span_mask(torch.device("cpu"))
    assert torch.equal(mask, (full_spans.T >= 0).reshape(-1))


def test_conditions_without_a_prior_clear_the_context(micro_batch):
    batch, prior, table, _, _ = micro_batch
    context = routing_context(Objective.from_condition({"intervention": "none"}), LAYERS)
    set_micro_batch(context, batch, None, table, 0, 1, sequence_parallel=False)
    assert not context.has_batch
    rpb = routing_context(
        Objective.from_condition({"intervention": "rpb", "params": {"beta": 1.0}, "prior": "base"}), LAYERS
    )
    with pytest.raises(ValueError, match="reads a prior"):
        set_micro_batch(rpb, batch, None, table, 0, 1, sequence_parallel=False)


def test_padding_is_every_position_past_a_rows_inputs(micro_batch):
    batch, _, table, rows, full_spans = micro_batch
    padding = padding_mask(batch["tokens"], np.asarray(rows), table)
    lengths = [len(table.row(r)[0]) - 1 for r in rows]
    want = torch.stack([torch.arange(full_spans.shape[1]) >= n for n in lengths])
    assert torch.equal(padding, want)
    assert padding.any() and not padding.all()


def test_routed_tokens_count_the_non_padding_tokens_a_rank_routes_times_the_tp_size(micro_batch):
    batch, _, table, rows, _ = micro_batch
    padding = padding_mask(batch["tokens"], np.asarray(rows), table)  # (B, S), padding at the end
    valid = int((~padding).sum())
    assert routed_tokens(padding, 0, 1, sequence_parallel=False) == valid
    assert routed_tokens(padding, 1, 2, sequence_parallel=False) == 2 * valid
    half = padding.shape[1] // 2
    first, second = (int((~padding[:, part]).sum()) for part in (slice(0, half), slice(half, None)))
    assert second < first  # the chunks differ: the later one holds more padding
    assert [routed_tokens(padding, rank, 2, sequence_parallel=True) for rank in (0, 1)] == [
        2 * first,
        2 * second,
    ]
