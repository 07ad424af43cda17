"""The local training backend on tiny MoE models of the three router families."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.dag import TOY_ROWS, TRAIN_SPEC, job_condition, router_terms, toy_rows, toy_tokenizer  # noqa: E402
from workflow_scripts.modeling.batches import (  # noqa: E402
    IGNORE_INDEX,
    BatchPlan,
    collate,
    encode_rows,
    labels_for,
    total_steps,
)
from workflow_scripts.modeling.loop import TrainConfig, learning_rate, train  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.modeling.toy import build_toy_model  # noqa: E402
from workflow_scripts.registry import job_condition as job_condition_of  # noqa: E402
from workflow_scripts.routing.hf import find_gates  # noqa: E402

MOE_LAYERS = TRAIN_SPEC.num_moe_layers
#: Every intervention: the built-in ones and each router term of the registry.
CONDITIONS = {
    "none": {"intervention": "none"},
    "rpb": {"intervention": "rpb", "params": {"beta": 1.0}},
    "rpb_hard": {"intervention": "rpb_hard"},
    "router_l2": {"intervention": "router_l2", "params": {"lambda": 100.0}},
    **{name: job_condition(name, coefficient=1e-2) for name in router_terms()},
}
ALL_ARCHS = ("deepseek_v3", "deepseek_v2", "qwen3_moe")
CASES = [(name, "deepseek_v3") for name in CONDITIONS] + [
    (name, arch) for name in ("rpb", "load_balancing") for arch in ("deepseek_v2", "qwen3_moe")
]


def toy_prior(rows: int = TOY_ROWS, seed: int = 0) -> np.ndarray:
    """Random probability rows ``(N, 2, L, E)``."""
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(TRAIN_SPEC.num_experts), size=(rows, 2, MOE_LAYERS)).astype(np.float32)


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
    model = build_toy_model(arch, TRAIN_SPEC, tokenizer, model_seed)
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


@pytest.mark.slow
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
        assert Objective.from_condition(CONDITIONS[name]).weight("load_balancing") == 0.0
    with pytest.raises(ValueError, match="no load-balancing"):
        Objective(
            intervention="rpb",
            routing_mode="soft",
            beta=1.0,
            terms=((router_terms()["load_balancing"], 1e-3),),
        )
    model = build_toy_model("deepseek_v3", TRAIN_SPEC, tokenizer, 0)
    with torch.no_grad():
        for _, gate in find_gates(model):
            gate.e_score_correction_bias.copy_(torch.linspace(-0.1, 0.1, TRAIN_SPEC.num_experts))
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
    model = build_toy_model("deepseek_v2", TRAIN_SPEC, tokenizer, 0)
    with pytest.raises(ValueError, match="needs a prior"):
        train(model, examples, Objective.from_condition(CONDITIONS["kl_base"]), config(1), 0, 0)


def test_training_section_checks(toy_config):
    from workflow_scripts.errors import UserInputError
    from workflow_scripts.train.cli import train_config

    parsed = train_config(toy_config["training"])
    assert (parsed.global_batch_size, parsed.label_mode, parsed.beta2) == (8, "answer", 0.95)
    for change in ({"backend": "megatron"}, {"packing": True}, {"precision": "bf16"}):
        with pytest.raises(UserInputError):
            train_config({**toy_config["training"], **change})


# ------------------------------------------------ expert (correction) bias update, F.6


def _bias(model) -> np.ndarray:
    return np.stack([gate.e_score_correction_bias.detach().numpy().copy() for _, gate in find_gates(model)])


def _biased_v3(tokenizer):
    """A deepseek_v3 toy whose correction bias is non-zero (so the update starts somewhere)."""
    model = build_toy_model("deepseek_v3", TRAIN_SPEC, tokenizer, 0)
    with torch.no_grad():
        for _, gate in find_gates(model):
            gate.e_score_correction_bias.copy_(torch.linspace(-0.01, 0.01, TRAIN_SPEC.num_experts))
    return model


def _step_loads_by_hand(model, examples, pad_token_id, plan, step):
    """Experts the stock gates select on the step's rows (non-pad tokens), counted per layer: (L, E)."""
    from workflow_scripts.modeling.batches import collate

    chosen = {}
    hooks = [
        gate.register_forward_hook(lambda m, a, out, i=i: chosen.__setitem__(i, out[2].detach()))
        for i, (_, gate) in enumerate(find_gates(model))
    ]
    counts = np.zeros((MOE_LAYERS, TRAIN_SPEC.num_experts), dtype=np.int64)
    with torch.no_grad():
        for rows in plan.micro_batches(step):
            batch = collate(examples, rows, pad_token_id, "answer")
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
            keep = batch.attention_mask.reshape(-1).bool()
            for layer in range(MOE_LAYERS):
                picked = chosen[layer][keep].reshape(-1).numpy()
                counts[layer] += np.bincount(picked, minlength=TRAIN_SPEC.num_experts)
    for hook in hooks:
        hook.remove()
    return counts


def test_expert_bias_update_rate_per_condition(toy_config):
    rate = 1e-3
    for name, condition in toy_config["conditions"].items():
        objective = Objective.from_condition(job_condition_of(toy_config, name), expert_bias_update_rate=rate)
        frozen = condition["intervention"] in ("rpb", "rpb_hard")  # rpb*, within_*, global_hard
        own = condition.get("settings", {}).get("expert_bias_update_rate", rate)  # sft_frozen_bias: 0
        assert objective.expert_bias_update_rate == (0.0 if frozen else own), name
        assert objective.weight("load_balancing") == 0.0 or not frozen
    assert toy_config["training"]["expert_bias_update_rate"] == 1e-3
    with pytest.raises(ValueError, match="bias-update"):
        Objective(intervention="rpb", routing_mode="soft", beta=1.0, expert_bias_update_rate=1e-3)
    with pytest.raises(ValueError, match="bias-update"):
        Objective(intervention="rpb_hard", expert_bias_update_rate=1e-3)
    with pytest.raises(ValueError, match=">= 0"):
        Objective(expert_bias_update_rate=-1.0)


@pytest.mark.parametrize("name", ["none", "load_balancing"])
def test_non_rpb_step_moves_the_correction_bias_toward_balance(tokenizer, examples, name):
    import copy

    rate = 1e-3
    model = _biased_v3(tokenizer)
    before = _bias(model)
    plan = BatchPlan(len(examples), 8, 4, 0, 1)
    loads_step1 = _step_loads_by_hand(copy.deepcopy(model).train(), examples, tokenizer.pad_token_id, plan, 0)
    objective = Objective.from_condition(CONDITIONS[name], expert_bias_update_rate=rate)
    records = train(model, examples, objective, config(2), 0, tokenizer.pad_token_id, toy_prior())
    loads = [np.asarray(r["expert_load"], dtype=np.int64) for r in records]
    assert np.array_equal(loads[0], loads_step1)  # the recorded counts are the gates' real selections
    for step, load in enumerate(loads):  # every non-pad token of the global batch fills top_k slots
        tokens = sum(len(examples[int(i)].input_ids) for rows in plan.micro_batches(step) for i in rows)
        assert (load.sum(axis=-1) == tokens * TRAIN_SPEC.top_k).all()
    # by hand (float32, as the buffer): b += rate * sign(mean load - load), once per step
    expected = before.astype(np.float32)
    for load in loads:
        direction = np.sign(load.mean(axis=-1, keepdims=True) - load).astype(np.float32)
        assert (direction != 0).any()
        moved = expected + direction * np.float32(rate)
        np.testing.assert_allclose(np.abs(moved - expected)[direction != 0], rate, rtol=1e-4)
        expected = moved
    after = _bias(model)
    assert np.array_equal(after, expected)
    step1 = np.sign(loads[0].mean(axis=-1, keepdims=True) - loads[0])
    assert ((after - before)[step1 < 0] < rate).all()  # overloaded at step 1 cannot have gained twice


@pytest.mark.parametrize("name", ["rpb", "rpb_hard"])
def test_rpb_step_leaves_the_correction_bias_unchanged(tokenizer, examples, name):
    model = _biased_v3(tokenizer)
    before = _bias(model)
    objective = Objective.from_condition(CONDITIONS[name], expert_bias_update_rate=1e-3)
    assert objective.expert_bias_update_rate == 0.0
    records = train(model, examples, objective, config(2), 0, tokenizer.pad_token_id, toy_prior())
    assert np.array_equal(_bias(model), before)
    assert any(np.ptp(np.asarray(r["expert_load"]), axis=-1).any() for r in records)  # unbalanced loads


def test_bias_update_resumes_bit_identically(tokenizer, examples, tmp_path):
    """A run resumed from its step-2 checkpoint continues from the updated bias, not the base's."""
    objective = Objective.from_condition(CONDITIONS["none"], expert_bias_update_rate=1e-2)
    settings = config(4, checkpoint_every_steps=2)
    straight = _biased_v3(tokenizer)
    records = train(straight, examples, objective, settings, 0, tokenizer.pad_token_id, None, tmp_path, "k")
    assert [p.name for p in sorted(tmp_path.glob("step_*.pt"))] == ["step_00000002.pt"]
    resumed = _biased_v3(tokenizer)  # a fresh base: everything after step 2 comes from the checkpoint
    again = train(resumed, examples, objective, settings, 0, tokenizer.pad_token_id, None, tmp_path, "k")
    a, b = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in records] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in again
    ]
    assert not np.array_equal(_bias(straight), _bias(_biased_v3(tokenizer)))


def flip_bytes(path, count=64, at=None) -> None:
    """Invert ``count`` bytes of ``path`` in place, from its middle unless ``at`` is given."""
    data = bytearray(path.read_bytes())
    start = len(data) // 2 if at is None else at
    data[start : start + count] = bytes(b ^ 0xFF for b in data[start : start + count])
    path.write_bytes(bytes(data))


def test_a_damaged_newest_checkpoint_is_not_resumed_but_the_one_before(tokenizer, examples, tmp_path, capsys):
    """Flipped bytes in the newest checkpoint: the run resumes from the previous one and ends identical."""
    from workflow_scripts.modeling import checkpoint

    objective = Objective.from_condition(CONDITIONS["none"], expert_bias_update_rate=1e-2)
    settings = config(4, checkpoint_every_steps=1)
    straight = _biased_v3(tokenizer)
    records = train(straight, examples, objective, settings, 0, tokenizer.pad_token_id, None, tmp_path, "k")
    kept = [p.name for p in checkpoint.checkpoint_files(tmp_path)]
    assert kept == ["step_00000002.pt", "step_00000003.pt"]
    assert all(checkpoint.damage(tmp_path / name) is None for name in kept)
    flip_bytes(tmp_path / "step_00000003.pt")
    capsys.readouterr()
    resumed = _biased_v3(tokenizer)
    again = train(resumed, examples, objective, settings, 0, tokenizer.pad_token_id, None, tmp_path, "k")
    stderr = capsys.readouterr().err
    damaged = tmp_path / "step_00000003.pt"
    assert f"not resuming from {damaged}: 1 file(s) differ from their recorded sha256" in stderr
    assert "resuming after step 2 " in stderr
    assert (tmp_path / "step_00000003.pt.damaged").is_file()
    a, b = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(a[key], b[key]) for key in a)
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in records] == [
        {k: v for k, v in r.items() if k != "seconds"} for r in again
    ]


def _saved_pair(tmp_path):
    """Checkpoints of steps 1 and 2 of a small linear model; the model's weights at each."""
    from workflow_scripts.modeling import checkpoint

    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    weights = {}
    for step in (1, 2):
        with torch.no_grad():
            model.weight.add_(1.0)
        weights[step] = model.weight.detach().clone()
        checkpoint.save(tmp_path, step, model, optimizer, [{"step": step}], "k")
    return weights


def _restored(tmp_path):
    from workflow_scripts.modeling import checkpoint

    model = torch.nn.Linear(64, 64)
    step, records = checkpoint.restore(tmp_path, "k", model, torch.optim.AdamW(model.parameters()))
    return step, records, model.weight.detach()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: flip_bytes(p, at=4096), "differ from their recorded sha256 (step_00000002.pt:"),
        (lambda p: p.write_bytes(p.read_bytes()[:-100]), "1 file(s) differ from their recorded sha256"),
        (lambda p: Path(f"{p}.sha256").unlink(), "it has no digest list (step_00000002.pt.sha256)"),
        (lambda p: Path(f"{p}.sha256").write_text(Path(f"{p}.sha256").read_text()[:30]), "is cut short"),
        (
            lambda p: Path(f"{p}.sha256").write_text("0" * 64 + "  step_00000001.pt\n"),
            "listed file(s) are missing",
        ),
    ],
    ids=["flipped bytes", "truncated checkpoint", "no digest", "truncated digest", "digest of another file"],
)
def test_a_checkpoint_that_fails_its_digest_falls_back_to_the_previous(tmp_path, capsys, damage, reason):
    from workflow_scripts.modeling import checkpoint

    weights = _saved_pair(tmp_path)
    newest = tmp_path / "step_00000002.pt"
    damage(newest)
    assert reason in checkpoint.damage(newest)
    step, records, restored = _restored(tmp_path)
    assert (step, records) == (1, [{"step": 1}]) and torch.equal(restored, weights[1])
    stderr = capsys.readouterr().err
    assert f"not resuming from {newest}: " in stderr and reason in stderr
    assert "resuming after step 1 " in stderr
    assert not newest.exists() and (tmp_path / "step_00000002.pt.damaged").is_file()


def test_with_every_checkpoint_damaged_the_run_starts_fresh(tmp_path, capsys):
    _saved_pair(tmp_path)
    for path in sorted(tmp_path.glob("step_*.pt")):
        flip_bytes(path)
    assert _restored(tmp_path)[:2] == (0, [])
    stderr = capsys.readouterr().err
    assert stderr.count("not resuming from") == 2
    assert f"starting fresh: no intact resume checkpoint is left in {tmp_path}" in stderr


def test_saving_keeps_the_newest_two_checkpoints_each_with_its_digest(tmp_path):
    import hashlib

    from workflow_scripts.modeling import checkpoint

    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    for step in (2, 4, 6):
        checkpoint.save(tmp_path, step, model, optimizer, [], "k")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_00000004.pt",
        "step_00000004.pt.sha256",
        "step_00000006.pt",
        "step_00000006.pt.sha256",
    ]
    sha256 = hashlib.sha256((tmp_path / "step_00000006.pt").read_bytes()).hexdigest()
    assert (
        tmp_path / "step_00000006.pt.sha256"
    ).read_text() == f"{sha256}  step_00000006.pt\n"  # sha256sum -c


def test_training_section_bias_rate(toy_config):
    from workflow_scripts.errors import UserInputError
    from workflow_scripts.train.condition import expert_bias_update_rate

    assert expert_bias_update_rate(toy_config["training"]) == 1e-3
    assert expert_bias_update_rate({"expert_bias_update_rate": 0}) == 0.0
    for bad in (-1e-3, "fast", True):
        with pytest.raises(UserInputError, match="expert_bias_update_rate"):
            expert_bias_update_rate({"expert_bias_update_rate": bad})


# ------------------------------------------------ layer combination of the aux terms (Megatron)


def test_load_balancing_and_z_loss_sum_over_layers_kl_terms_average():
    from workflow_scripts.modeling.objective import router_probabilities
    from workflow_scripts.routing import core

    generator = torch.Generator().manual_seed(0)
    layers, tokens, experts, k = 3, 10, 8, 2
    logits = [torch.randn(tokens, experts, generator=generator) for _ in range(layers)]
    indices = [z.topk(k, dim=-1).indices for z in logits]
    mask = torch.ones(tokens, dtype=torch.bool)
    mask[-2:] = False
    spans = torch.tensor([[-1, 0, 0, 0, 1, 1, 1, 1, -1, -1]])
    prior = torch.distributions.Dirichlet(torch.ones(experts)).sample((1, 2, layers))
    weights = {"load_balancing": 1e-3, "z_loss": 1e-3, "kl_base": 1.0, "logit_l2": 1e-2}
    objective = Objective(terms=tuple((router_terms()[name], weight) for name, weight in weights.items()))
    for arch in ("deepseek_v3", "qwen3_moe"):
        terms = objective.data_terms(arch, logits, indices, mask, spans, prior)
        lbl = [
            core.load_balancing_loss(router_probabilities(arch, z), i, experts, k, mask)
            for z, i in zip(logits, indices, strict=True)
        ]
        torch.testing.assert_close(terms["load_balancing"], torch.stack(lbl).sum())
        torch.testing.assert_close(terms["z_loss"], torch.stack([core.z_loss(z, mask) for z in logits]).sum())
        span_mask = spans.reshape(-1) >= 0
        kl = []
        for layer, z in enumerate(logits):
            rows = core.span_bias_per_token(prior[:, :, layer], spans).reshape(z.shape)
            kl.append(core.kl_to_base(rows, z, span_mask))
        torch.testing.assert_close(terms["kl_base"], torch.stack(kl).mean())


def test_non_finite_loss_stops_naming_the_step(tokenizer, examples, tmp_path):
    """lr_max inf (once accepted by the config) turns step 1's update into NaN weights: step 2 must stop."""
    from workflow_scripts.modeling.loop import NonFiniteLossError

    model = build_toy_model("deepseek_v3", TRAIN_SPEC, tokenizer, 0)
    settings = config(3, lr_max=math.inf, checkpoint_every_steps=1)
    objective = Objective.from_condition(CONDITIONS["none"])
    with pytest.raises(NonFiniteLossError, match=r"training step 2: loss is nan"):
        train(model, examples, objective, settings, 0, tokenizer.pad_token_id, None, tmp_path, "k")
    assert [p.name for p in tmp_path.glob("step_*.pt")] == ["step_00000001.pt"]
