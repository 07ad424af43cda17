"""The Megatron backend's effective objective equals the local backend's, auxiliary-loss weights included.

A toy MoE language model whose mixing weights come from real Megatron-Core ``TopKRouter``s
(swapped by the product's ``install``) is trained for a few optimizer steps twice from the
same weights on the same rows and prior:

* Megatron: Megatron-Core's own ``forward_backward_no_pipelining`` with
  ``calculate_per_token_loss``, the product's ``forward_step`` (``make_forward_step``) on
  Bridge-shaped micro-batches, Bridge's ``masked_next_token_loss``, Megatron's load-balancing,
  z-loss and auxiliary-loss scaling (``MoEAuxLossAutoScaler``), then the per-token division
  ``finalize_model_grads`` applies;
* local: the local backend's objective (``loop._step``): cross-entropy summed over answer
  tokens over the global batch's answer tokens, plus ``Objective.data_terms`` of each
  micro-batch's router logits times their coefficients over the number of micro-batches.

What differs from Bridge's loop: the model is a toy (embedding, routed linear experts, LM
head) instead of a ``GPTModel``; one process, so no DDP gradient buffers or all-reduce (the
finalize step is its per-token division alone); plain torch Adam instead of Megatron's
distributed optimizer; the micro-batches are built here instead of by Bridge's chat dataset.
The schedule's one CUDA allocation (its token counter) is made on the CPU.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from tests import bridge_cpu  # noqa: E402

bridge_cpu.install()  # Bridge imports Transformer Engine unguarded in one place: stubbed first

from megatron.core.pipeline_parallel import schedules  # noqa: E402
from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler  # noqa: E402

from tests.dag import job_condition, router_terms  # noqa: E402
from tests.megatron_env import build_router, init_cpu_megatron  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.routing.megatron import MegatronRoutingContext, install  # noqa: E402
from workflow_scripts.train.megatron.settings import router_settings  # noqa: E402
from workflow_scripts.train.megatron.spans import SpanTable  # noqa: E402
from workflow_scripts.train.megatron.step import make_forward_step, routing_context  # noqa: E402

pytestmark = pytest.mark.megatron

VOCAB, HIDDEN, EXPERTS, TOP_K, LAYERS = 40, 16, 8, 2, 2
ROWS, SEQ, MICRO_BATCHES, STEPS = 8, 14, 4, 2
LR = 1e-2
#: Every router term of the registry, and the routing overrides.
CONDITIONS = {
    **{name: job_condition(name, coefficient=0.1) for name in router_terms()},
    "rpb": {"intervention": "rpb", "params": {"beta": 1.0}},
    "rpb_hard": {"intervention": "rpb_hard"},
}


class _CpuTorch:
    """``torch`` for the schedule module, with its one ``device="cuda"`` allocation on the CPU."""

    def __getattr__(self, name: str):
        return getattr(torch, name)

    @staticmethod
    def zeros(*args, device=None, **kwargs):
        return torch.zeros(*args, **kwargs)


class ToyRoutedLM(nn.Module):
    """Embedding, ``LAYERS`` residual blocks of router-weighted linear experts, LM head.

    With ``labels`` it returns the per-token loss ``(B, S)``, as Megatron's ``GPTModel`` does.
    """

    def __init__(self, routers: list[nn.Module], seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.routers = nn.ModuleList(routers)
        self.experts = nn.Parameter(torch.randn(LAYERS, EXPERTS, HIDDEN, HIDDEN, generator=generator) * 0.2)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(VOCAB, HIDDEN, generator=generator))
            self.head.weight.copy_(torch.randn(VOCAB, HIDDEN, generator=generator) * 0.3)
            for router in routers:
                router.weight.copy_(torch.randn(EXPERTS, HIDDEN, generator=generator))
        self.config = routers[0].config
        self.model_type = None

    def set_input_tensor(self, tensor) -> None:
        """Pipeline stages' hook; one stage here."""

    def forward(self, input_ids, position_ids=None, attention_mask=None, labels=None, padding_mask=None):
        hidden = self.embed(input_ids).transpose(0, 1)  # (S, B, H), Megatron's layout
        padding = (
            None if padding_mask is None else padding_mask.transpose(0, 1)
        )  # (S, B), as MoE layers pass it
        for layer, router in enumerate(self.routers):
            probs, _ = router(hidden, padding)  # (S*B, E), row s*B + b
            outputs = torch.einsum("nh,ehk->nek", hidden.reshape(-1, HIDDEN), self.experts[layer])
            mixed = (probs.unsqueeze(-1) * outputs).sum(dim=1)  # (S*B, H)
            hidden = hidden + torch.tanh(mixed).reshape(hidden.shape)
        logits = self.head(hidden).transpose(0, 1)  # (B, S, V)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").reshape(labels.shape)


def rows_and_prior() -> tuple[list[dict], np.ndarray]:
    """Rows of different question and answer lengths, so answer tokens vary per micro-batch."""
    rng = np.random.default_rng(0)
    rows = []
    for row in range(ROWS):
        ids = rng.integers(1, VOCAB, SEQ + 1)
        question = 3 + row % 4
        spans = np.full(SEQ + 1, -1)
        spans[1 : 1 + question] = 0
        spans[question + 2 : SEQ] = 1
        loss_mask = (spans[1:] == 1).astype(np.int64)  # shifted to the labels, as Bridge's collate
        rows.append(
            {
                "tokens": torch.as_tensor(ids[:-1])[None],
                "labels": torch.as_tensor(ids[1:])[None],
                "loss_mask": torch.as_tensor(loss_mask)[None],
                "position_ids": torch.arange(SEQ)[None],
                "metadata": [{"prior_row": row}],
                "spans": spans[:-1],
                "encoding": (ids.tolist(), spans.tolist()),  # Bridge's inputs are all but its last token
            }
        )
    prior = rng.dirichlet(np.ones(EXPERTS), size=(ROWS, 2, LAYERS)).astype(np.float32)
    return rows, prior


def build(objective: Objective, seed: int) -> ToyRoutedLM:
    fields = {
        "hidden_size": HIDDEN,
        "num_moe_experts": EXPERTS,
        "moe_router_topk": TOP_K,
        "moe_router_score_function": "softmax",
        "moe_router_pre_softmax": False,
        "calculate_per_token_loss": True,
    } | router_settings(objective)
    fields.pop("moe_router_bias_update_rate")  # no expert bias on a softmax router
    return ToyRoutedLM([build_router(dict(fields), layer_number=layer + 1) for layer in range(LAYERS)], seed)


def step_batches(step: int, rows: list[dict]) -> list[dict]:
    order = np.random.default_rng(step).permutation(ROWS)[:MICRO_BATCHES]
    return [rows[int(row)] for row in order]


def megatron_steps(objective: Objective, rows: list[dict], prior: np.ndarray, monkeypatch) -> dict:
    """``STEPS`` optimizer steps through Megatron's schedule and the product's forward step."""
    model = build(objective, seed=1)
    context = routing_context(objective, num_moe_layers=LAYERS)
    install([model], context)
    assert model.config.moe_grad_scale_func is None  # the config Bridge saves with a checkpoint is untouched
    table = SpanTable(lambda row: rows[row]["encoding"], len(rows))
    state = SimpleNamespace(cfg=SimpleNamespace(model=SimpleNamespace(sequence_parallel=False)))
    forward_step = partial(make_forward_step(context, prior, table), state)

    def finalize(chunks, num_tokens, **_):  # finalize_model_grads' per-token division
        for param in chunks[0].parameters():
            if param.grad is not None:
                param.grad /= num_tokens.clamp(min=1)

    model.config.finalize_model_grads_func = finalize
    monkeypatch.setattr(schedules, "torch", _CpuTorch())
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses, probs = [], []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        reduced = schedules.forward_backward_no_pipelining(
            forward_step_func=forward_step,
            data_iterator=iter(step_batches(step, rows)),
            model=model,
            num_microbatches=MICRO_BATCHES,
            seq_length=SEQ,
            micro_batch_size=1,
            forward_only=False,
        )
        total, count = (sum(entry["lm loss"][i] for entry in reduced) for i in range(2))
        losses.append(float(total / count))
        probs.append(router_outputs(model, context, rows[0], prior, objective))
        optimizer.step()
    return {"losses": losses, "probs": probs, "params": dict(model.named_parameters())}


def router_outputs(model, context, row, prior, objective) -> list[torch.Tensor]:
    """Every router's ``(S, E)`` probabilities on ``row`` (no gradient, so no auxiliary loss)."""
    if context.needs_prior:
        context.set_batch(torch.from_numpy(prior[[0]]), torch.as_tensor(row["spans"])[:, None])
    with torch.no_grad():
        hidden = model.embed(row["tokens"]).transpose(0, 1)
        out = []
        for layer, router in enumerate(model.routers):
            probs, _ = router(hidden)
            out.append(probs.clone())
            mixed = torch.einsum("nh,ehk->nek", hidden.reshape(-1, HIDDEN), model.experts[layer])
            hidden = hidden + torch.tanh((probs.unsqueeze(-1) * mixed).sum(dim=1)).reshape(hidden.shape)
    return out


def local_steps(objective: Objective, rows: list[dict], prior: np.ndarray) -> dict:
    """The same steps with the local backend's objective on the same routers (losses not attached)."""
    plain = Objective(
        intervention="none",
        routing_mode=objective.routing_mode,
        beta=objective.beta,
        clip_eps=objective.clip_eps,
        clip_c=objective.clip_c,
    )
    model = build(plain, seed=1)
    context = MegatronRoutingContext(mode=objective.routing_mode, beta=objective.beta, num_moe_layers=LAYERS)
    install([model], context)
    recorded: list[torch.Tensor] = []
    for router in model.routers:
        router.gating = partial(lambda gating, x: recorded.append(gating(x)) or recorded[-1], router.gating)
    weights = objective.coefficients()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses, probs = [], []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        batches = step_batches(step, rows)
        answer_tokens = sum(int(batch["loss_mask"].sum()) for batch in batches)
        ce = 0.0
        for batch in batches:
            spans = torch.as_tensor(batch["spans"])[None]  # (B, S)
            prior_rows = torch.from_numpy(prior[[batch["metadata"][0]["prior_row"]]])
            if context.needs_prior:
                context.set_batch(prior_rows, spans.transpose(0, 1))
            recorded.clear()
            per_token = model(batch["tokens"], labels=batch["labels"])
            ce_sum = (per_token * batch["loss_mask"]).sum()
            logits = [z.reshape(-1, EXPERTS) for z in recorded]
            chosen = [z.topk(TOP_K, dim=-1).indices for z in logits]
            mask = torch.ones(SEQ, dtype=torch.bool)
            terms = objective.data_terms("qwen3_moe", logits, chosen, mask, spans, prior_rows)
            aux = sum((weights[name] * value for name, value in terms.items()), torch.zeros(()))
            (ce_sum / answer_tokens + aux / len(batches)).backward()
            ce += float(ce_sum) / answer_tokens
        losses.append(ce)
        context.set_batch(None, None)
        probs.append(router_outputs(model, context, rows[0], prior, objective))
        optimizer.step()
    return {"losses": losses, "probs": probs, "params": dict(model.named_parameters())}


@pytest.fixture(autouse=True)
def _megatron():
    init_cpu_megatron()
    # A class-level scale other tests' backward passes leave behind (of either shape): the
    # schedule then sets its own, and a backward without one uses 1.
    MoEAuxLossAutoScaler.main_loss_backward_scale = None
    yield
    MoEAuxLossAutoScaler.main_loss_backward_scale = None


@pytest.mark.parametrize("name", sorted(CONDITIONS))
def test_megatron_steps_equal_the_local_backends(name, monkeypatch):
    objective = Objective.from_condition(CONDITIONS[name])
    rows, prior = rows_and_prior()
    megatron = megatron_steps(objective, rows, prior, monkeypatch)
    local = local_steps(objective, rows, prior)
    assert megatron["losses"] == pytest.approx(local["losses"], rel=1e-6)
    for step in range(STEPS):
        for got, expected in zip(megatron["probs"][step], local["probs"][step], strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for param, value in megatron["params"].items():
        torch.testing.assert_close(value, local["params"][param], rtol=1e-5, atol=1e-6, msg=param)
