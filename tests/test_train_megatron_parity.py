"""A Bridge-built Megatron model trains like the local backend: losses, routers and logits after a few steps.

Same toy Qwen3-MoE base, rows, prior and condition on both sides, ``STEPS`` optimizer steps:

* local: ``loop.train`` on the transformers model (the toy pipeline's trainer);
* Megatron: ``AutoBridge`` imports the base into a ``GPTModel`` (Megatron-Core's local layer
  spec), the product's ``install`` swaps its routers, and Megatron-Core's
  ``forward_backward_no_pipelining`` runs the product's ``forward_step`` with
  ``calculate_per_token_loss``, then ``finalize_model_grads``' per-token division and AdamW.

What differs from Bridge's ``finetune()``: one process (no DDP buffers or all-reduce, no
distributed optimizer); SGD with the local backend's parameter groups, a constant learning
rate and no clipping on both sides (``sgd``; the schedules differ at warm-up,
docs/training.md); the micro-batches are built from the local backend's encoding with every token
as input (Bridge's chat dataset drops each row's last input token, which the local backend
still routes). Test-side CPU adaptations: ``tests.bridge_cpu``; an explicit causal mask; the
schedule's one CUDA allocation on the CPU; the local backend's gate classes limited to those
of the transformers Bridge pins (5.12.1 has no ``DeepseekV2TopkRouter``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tests import bridge_cpu  # noqa: E402

bridge_cpu.install()  # Bridge imports Transformer Engine unguarded in one place: stubbed first

from megatron.bridge import AutoBridge  # noqa: E402
from megatron.core.pipeline_parallel import schedules  # noqa: E402
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed  # noqa: E402
from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler  # noqa: E402

from tests.dag import TRAIN_SPEC as SPEC  # noqa: E402
from tests.dag import job_condition, router_terms, toy_rows, toy_tokenizer  # noqa: E402
from tests.megatron_env import init_cpu_megatron  # noqa: E402
from tests.test_train_megatron_objective import _CpuTorch  # noqa: E402
from workflow_scripts.modeling import loop  # noqa: E402
from workflow_scripts.modeling.batches import IGNORE_INDEX, BatchPlan, encode_rows, labels_for  # noqa: E402
from workflow_scripts.modeling.loop import TrainConfig, train  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.modeling.toy import build_toy_model, router_modules, save_toy_base  # noqa: E402
from workflow_scripts.routing import hf  # noqa: E402
from workflow_scripts.routing.megatron import find_routers, install  # noqa: E402
from workflow_scripts.train.megatron.settings import router_settings  # noqa: E402
from workflow_scripts.train.megatron.spans import SpanTable  # noqa: E402
from workflow_scripts.train.megatron.step import make_forward_step, routing_context  # noqa: E402

pytestmark = pytest.mark.megatron

ROWS, GBS, STEPS, SEED, LR, MAX_LENGTH = 8, 4, 3, 0, 0.05, 64
#: Every layer MoE: Bridge's Qwen3-MoE mapping does not read ``mlp_only_layers`` (Qwen3-30B has none).
QWEN_SPEC = replace(SPEC, first_dense_layers=0)
#: Every router term of the registry, and soft RPB.
CONDITIONS = {
    **{name: job_condition(name, coefficient=0.1) for name in router_terms()},
    "rpb": {"intervention": "rpb", "params": {"beta": 1.0}},
}
#: Micro-batches of two rows of different lengths: Bridge pads them with eos, the local backend
#: masks its padding; the routers' load-balancing and z-loss means must leave it out on both sides.
MICRO_BATCH = 2


def _pinned_gate_classes() -> dict[str, type[nn.Module]]:
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    return {"deepseek_v3": DeepseekV3TopkRouter, "qwen3_moe": Qwen3MoeTopKRouter}


class CausalMasked(nn.Module):
    """A ``GPTModel`` given Megatron's explicit causal mask (its default mask is allocated on CUDA)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.config = module.config

    def set_input_tensor(self, tensor) -> None:
        self.module.set_input_tensor(tensor)

    def forward(self, input_ids, position_ids, attention_mask=None, labels=None, padding_mask=None):
        mask = bridge_cpu.causal_mask(input_ids.shape[1])
        return self.module(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=mask,
            labels=labels,
            padding_mask=padding_mask,
        )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    init_cpu_megatron()
    tokenizer = toy_tokenizer()
    base = tmp_path_factory.mktemp("parity") / "base"
    hf_model = build_toy_model("qwen3_moe", QWEN_SPEC, tokenizer, 0)
    save_toy_base(hf_model, tokenizer, base)
    layers = len(router_modules(hf_model))
    prompts, answers = toy_rows(ROWS)
    examples = encode_rows(tokenizer, prompts, answers, MAX_LENGTH)
    prior = np.random.default_rng(1).dirichlet(np.ones(SPEC.num_experts), (ROWS, 2, layers))
    yield {
        "base": base,
        "tokenizer": tokenizer,
        "examples": examples,
        "prior": prior.astype(np.float32),
        "layers": layers,
    }


def micro_batch(examples, rows, eos: int) -> dict:
    """Bridge's micro-batch keys for encoded rows, every token as input, padded with eos as Bridge pads."""
    length = max(len(examples[row].input_ids) for row in rows)
    tokens, labels, loss_masks = [], [], []
    for row in rows:
        ids = torch.tensor(examples[row].input_ids)
        answer = torch.tensor(labels_for(examples[row], "answer"))
        loss_mask = torch.zeros(length, dtype=torch.long)
        loss_mask[: len(ids) - 1] = (answer[1:] != IGNORE_INDEX).long()  # shifted to the next-token labels
        padded = torch.full((length + 1,), eos)
        padded[: len(ids)] = ids
        tokens.append(padded[:-1])
        labels.append(padded[1:])
        loss_masks.append(loss_mask)
    return {
        "tokens": torch.stack(tokens),
        "labels": torch.stack(labels),
        "loss_mask": torch.stack(loss_masks),
        "position_ids": torch.arange(length).expand(len(rows), -1),
        "metadata": [{"prior_row": int(row)} for row in rows],
    }


def sgd(params) -> torch.optim.Optimizer:
    """Both sides' optimizer: the local backend's parameter groups (decay on matrices only) under SGD.

    Adam would divide each element by its gradient's magnitude, so an element whose gradient
    is float noise around zero moves by a whole step on one side only; SGD keeps the
    comparison at the precision of the gradients, which is what the objective decides.
    """
    params = list(params)
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.SGD(groups, lr=LR)


def megatron_run(objective: Objective, inputs, monkeypatch) -> tuple[list[float], nn.Module]:
    model_parallel_cuda_manual_seed(123)
    provider = AutoBridge.from_hf_pretrained(str(inputs["base"])).to_megatron_provider(load_weights=True)
    fields = router_settings(objective) | bridge_cpu.CPU_PROVIDER_FIELDS | {"calculate_per_token_loss": True}
    for name, value in fields.items():
        setattr(provider, name, value)
    provider.finalize()
    (gpt,) = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)
    model = CausalMasked(gpt)
    context = routing_context(objective, num_moe_layers=inputs["layers"])
    install([gpt], context)
    examples = inputs["examples"]
    # Every token is an input here: the table's encoding carries one more (Bridge never inputs the last).
    eos = inputs["tokenizer"].eos_token_id
    table = SpanTable(lambda row: ([*examples[row].input_ids, eos], [*examples[row].span_ids, -1]), ROWS)
    state = SimpleNamespace(cfg=SimpleNamespace(model=SimpleNamespace(sequence_parallel=False)))
    forward_step = partial(make_forward_step(context, inputs["prior"], table), state)

    def finalize(chunks, num_tokens, **_):  # finalize_model_grads' per-token division
        for param in chunks[0].parameters():
            if param.grad is not None:
                param.grad /= num_tokens.clamp(min=1)

    gpt.config.finalize_model_grads_func = finalize
    monkeypatch.setattr(schedules, "torch", _CpuTorch())
    plan = BatchPlan(ROWS, GBS, MICRO_BATCH, SEED, epochs=-(-STEPS * GBS // ROWS))  # the local loop's plan
    optimizer = sgd(gpt.parameters())
    losses = []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        batches = [micro_batch(examples, rows, eos) for rows in plan.micro_batches(step)]
        reduced = schedules.forward_backward_no_pipelining(
            forward_step_func=forward_step,
            data_iterator=iter(batches),
            model=model,
            num_microbatches=len(batches),
            seq_length=MAX_LENGTH,
            micro_batch_size=MICRO_BATCH,
            forward_only=False,
        )
        total, count = (sum(entry["lm loss"][i] for entry in reduced) for i in range(2))
        losses.append(float(total / count))
        optimizer.step()
    context.set_batch(None, None)
    return losses, gpt


def local_run(objective: Objective, inputs, monkeypatch) -> tuple[list[dict], nn.Module]:
    monkeypatch.setattr(hf, "_router_classes", _pinned_gate_classes)
    monkeypatch.setattr(loop, "_optimizer", lambda model, config: sgd(model.parameters()))
    model = build_toy_model("qwen3_moe", QWEN_SPEC, inputs["tokenizer"], 0)
    config = TrainConfig(
        epochs=1,
        global_batch_size=GBS,
        micro_batch_size=MICRO_BATCH,
        lr_max=LR,
        lr_min=LR,
        warmup_steps=0,
        grad_clip=1e9,
        max_steps=STEPS,
    )
    prior = inputs["prior"] if objective.needs_prior else None
    records = train(
        model, inputs["examples"], objective, config, SEED, inputs["tokenizer"].pad_token_id, prior
    )
    return records, model


@pytest.fixture(autouse=True)
def _fresh_aux_loss_scale():
    """Megatron keeps the aux-loss scale on a class; other tests' backward passes leave one behind."""
    MoEAuxLossAutoScaler.main_loss_backward_scale = None
    yield
    MoEAuxLossAutoScaler.main_loss_backward_scale = None


@pytest.mark.parametrize("name", sorted(CONDITIONS))
def test_bridge_model_trains_like_the_local_backend(name, inputs, monkeypatch):
    objective = Objective.from_condition(CONDITIONS[name])
    megatron_losses, gpt = megatron_run(objective, inputs, monkeypatch)
    records, hf_model = local_run(objective, inputs, monkeypatch)
    # The two stacks' float rounding moves the third step's loss by up to about 1e-5 (relative).
    assert megatron_losses == pytest.approx([r["ce"] for r in records], rel=2e-5)
    gates = [gate for _, gate in hf.find_gates(hf_model)]
    for router, gate in zip(find_routers([gpt]), gates, strict=True):
        torch.testing.assert_close(router.weight.detach(), gate.weight.detach(), rtol=1e-4, atol=1e-5)
    ids = torch.tensor(inputs["examples"][0].input_ids)[None]
    with torch.no_grad():
        expected = hf_model(input_ids=ids).logits
        positions, mask = torch.arange(ids.shape[1])[None], bridge_cpu.causal_mask(ids.shape[1])
        got = gpt(input_ids=ids, position_ids=positions, attention_mask=mask)
    # Megatron's layers and transformers' differ in the last float bits of their gradients; after
    # STEPS steps the logits differ by about 4e-4 in every condition alike, RPB (no auxiliary
    # loss) included, while losses and routers agree to 1e-5.
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-3)
