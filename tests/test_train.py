"""The local training backend on tiny MoE models of the three router families."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from workflow_scripts.models.tokenizer import train_tokenizer  # noqa: E402
from workflow_scripts.models.toy import ToyModelSpec, build_toy_model  # noqa: E402
from workflow_scripts.routing.hf import find_gates  # noqa: E402
from workflow_scripts.train.batches import (  # noqa: E402
    IGNORE_INDEX,
    BatchPlan,
    collate,
    encode_rows,
    labels_for,
    total_steps,
)
from workflow_scripts.train.loop import TrainConfig, learning_rate, train  # noqa: E402
from workflow_scripts.train.objective import Objective  # noqa: E402

ROWS = 24
SPEC = ToyModelSpec(
    hidden_size=32,
    num_layers=3,
    num_experts=8,
    top_k=2,
    intermediate_size=64,
    moe_intermediate_size=16,
    num_heads=4,
    kv_lora_rank=16,
    qk_rope_head_dim=4,
    max_position_embeddings=128,
)
MOE_LAYERS = SPEC.num_moe_layers
CONDITIONS = {
    "none": {"intervention": "none"},
    "load_balancing": {"intervention": "load_balancing", "params": {"coefficient": 1e-2}},
    "rpb": {"intervention": "rpb", "params": {"beta": 1.0}},
    "rpb_hard": {"intervention": "rpb_hard"},
    "router_l2": {"intervention": "router_l2", "params": {"lambda": 100.0}},
    "kl_base": {"intervention": "kl_base", "params": {"coefficient": 1e-2}},
    "logit_l2": {"intervention": "logit_l2", "params": {"coefficient": 1e-2}},
    "z_loss": {"intervention": "z_loss", "params": {"coefficient": 1e-3}},
}
ALL_ARCHS = ("deepseek_v3", "deepseek_v2", "qwen3_moe")
CASES = [(name, "deepseek_v3") for name in CONDITIONS] + [
    (name, arch) for name in ("rpb", "load_balancing") for arch in ("deepseek_v2", "qwen3_moe")
]


def toy_rows(rows: int = ROWS) -> tuple[list[str], list[str]]:
    """Deterministic (prompt, answer) pairs."""
    rng = np.random.default_rng(0)
    words = "add the sum of two numbers print a list sort loop value function return answer is".split()
    prompts = [" ".join(rng.choice(words, 8)) + f" {i}?" for i in range(rows)]
    answers = [" ".join(rng.choice(words, 12)) + f" = {i * 7}" for i in range(rows)]
    return prompts, answers


def toy_tokenizer():
    prompts, answers = toy_rows()
    return train_tokenizer(prompts + answers, 300, min_frequency=1)


def toy_prior(rows: int = ROWS, seed: int = 0) -> np.ndarray:
    """Random probability rows ``(N, 2, L, E)``."""
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(SPEC.num_experts), size=(rows, 2, MOE_LAYERS)).astype(np.float32)


@pytest.fixture(scope="module")
def tokenizer():
    return toy_tokenizer()


@pytest.fixture(scope="module")
def examples(tokenizer):
    prompts, answers = toy_rows()
    return encode_rows(tokenizer, prompts, answers, 64)


def config(steps: int, **overrides) -> TrainConfig:
    values = dict(epochs=1, global_batch_size=8, micro_batch_size=4, lr_max=1e-3, lr_min=1e-4, warmup_steps=1)
    return TrainConfig(**{**values, **overrides, "max_steps": steps})


def run(arch, tokenizer, examples, condition, steps=2, seed=0, model_seed=0):
    model = build_toy_model(arch, SPEC, tokenizer, model_seed)
    records = train(
        model,
        examples,
        Objective.from_condition(condition),
        config(steps),
        seed,
        tokenizer.pad_token_id,
        toy_prior(),
    )
    return model, records


def test_learning_rate_schedule():
    hand = {0: 0.5, 1: 1.0, 2: 1.0, 6: 0.55, 10: 0.1}
    for step, expected in hand.items():
        assert learning_rate(step, 11, 2, 1.0, 0.1) == pytest.approx(expected)
    assert learning_rate(3, 11, 2, 1.0, 0.1) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 8)))


def test_paper_step_count():
    assert total_steps(20_000, 128, 5) == 782


def test_answer_labels(tokenizer, examples):
    prompts, answers = toy_rows()
    example = examples[0]
    labels = labels_for(example, "answer")
    carried = [i for i, label in enumerate(labels) if label != IGNORE_INDEX]
    answer = [i for i, span in enumerate(example.span_ids) if span == 1]
    # The answer's tokens, then the one token closing the assistant turn.
    assert carried == [*answer, answer[-1] + 1]
    assert tokenizer.decode([labels[i] for i in answer]) == answers[0]
    assert labels[answer[-1] + 1] == tokenizer.eos_token_id
    assert labels_for(example, "all") == example.input_ids
    batch = collate(examples, np.array([0, 1, 2]), tokenizer.pad_token_id, "answer")
    pad = batch.attention_mask == 0
    assert (batch.labels[pad] == IGNORE_INDEX).all() and (batch.span_ids[pad] == -1).all()


def test_batch_plan_order():
    plan = BatchPlan(num_rows=20, global_batch_size=8, micro_batch_size=4, seed=3, epochs=2)
    assert plan.total_steps == 5
    stream = np.concatenate([np.concatenate(plan.micro_batches(step)) for step in range(plan.total_steps)])
    assert np.array_equal(stream, np.concatenate([plan.epoch_order(0), plan.epoch_order(1)]))
    assert [len(m) for m in plan.micro_batches(2)] == [4, 4]  # straddles the epoch boundary
    assert [len(m) for m in plan.micro_batches(4)] == [4, 4]
    assert np.array_equal(plan.epoch_order(1), BatchPlan(20, 8, 4, 3, 1).epoch_order(1))
    assert not np.array_equal(plan.epoch_order(0), plan.epoch_order(1))
    with pytest.raises(ValueError, match="multiple"):
        BatchPlan(num_rows=20, global_batch_size=8, micro_batch_size=3, seed=0, epochs=1)


@pytest.mark.parametrize(("name", "arch"), CASES)
def test_intervention_runs(tokenizer, examples, name, arch):
    model, records = run(arch, tokenizer, examples, CONDITIONS[name])
    objective = Objective.from_condition(CONDITIONS[name])
    assert len(records) == 2
    for term in objective.coefficients():
        value = records[-1][term]
        assert math.isfinite(value) and value > 0, (term, value)
    assert "load_balancing" not in records[-1] or name == "load_balancing"
    assert all(math.isfinite(records[-1][key]) for key in ("loss", "ce", "grad_norm", "router_max_prob"))
    for _, gate in find_gates(model):
        assert gate.weight.grad is not None and gate.weight.grad.abs().sum() > 0
        assert "forward" not in vars(gate)


def test_rpb_beta_zero_is_sft(tokenizer, examples):
    sft, _ = run("deepseek_v3", tokenizer, examples, CONDITIONS["none"], steps=3)
    rpb0, _ = run(
        "deepseek_v3", tokenizer, examples, {"intervention": "rpb", "params": {"beta": 0.0}}, steps=3
    )
    rpb1, _ = run("deepseek_v3", tokenizer, examples, CONDITIONS["rpb"], steps=3)
    a, b, c = sft.state_dict(), rpb0.state_dict(), rpb1.state_dict()
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert not all(torch.equal(a[key], c[key]) for key in a)


def test_rpb_has_no_load_balancing_and_v3_bias_frozen(tokenizer, examples):
    for name in ("rpb", "rpb_hard"):
        assert Objective.from_condition(CONDITIONS[name]).load_balancing == 0.0
    with pytest.raises(ValueError, match="no load-balancing"):
        Objective(intervention="rpb", routing_mode="soft", beta=1.0, load_balancing=1e-3)
    model = build_toy_model("deepseek_v3", SPEC, tokenizer, 0)
    with torch.no_grad():
        for _, gate in find_gates(model):
            gate.e_score_correction_bias.copy_(torch.linspace(-0.1, 0.1, SPEC.num_experts))
    before = [gate.e_score_correction_bias.clone() for _, gate in find_gates(model)]
    objective = Objective.from_condition(CONDITIONS["rpb_hard"])
    records = train(model, examples, objective, config(2), 0, tokenizer.pad_token_id, toy_prior())
    assert all("load_balancing" not in record for record in records)
    after = [gate.e_score_correction_bias for _, gate in find_gates(model)]
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))


def test_seed_determines_run(tokenizer, examples):
    weights = [
        run("qwen3_moe", tokenizer, examples, CONDITIONS["rpb"], seed=seed)[0].state_dict()
        for seed in (1, 1, 2)
    ]
    assert all(torch.equal(weights[0][key], weights[1][key]) for key in weights[0])
    assert not all(torch.equal(weights[0][key], weights[2][key]) for key in weights[0])


def test_missing_prior_is_an_error(tokenizer, examples):
    model = build_toy_model("deepseek_v2", SPEC, tokenizer, 0)
    with pytest.raises(ValueError, match="needs a prior"):
        train(model, examples, Objective.from_condition(CONDITIONS["kl_base"]), config(1), 0, 0)


def test_training_section_checks(toy_config):
    from workflow_scripts.cli import UserInputError
    from workflow_scripts.train.cli import train_config

    parsed = train_config(toy_config["training"])
    assert (parsed.global_batch_size, parsed.label_mode, parsed.beta2) == (8, "answer", 0.95)
    for change in ({"backend": "megatron"}, {"packing": True}, {"precision": "bf16"}):
        with pytest.raises(UserInputError):
            train_config({**toy_config["training"], **change})
