"""Teacher-forced gold-answer log-likelihood (evaluate/likelihood.py) against independent references."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.dag import TINY_SPEC, toy_tokenizer
from workflow_scripts.evaluate import cli as evaluate_cli
from workflow_scripts.evaluate.items import normalise
from workflow_scripts.evaluate.likelihood import (
    ROUTINGS,
    encode,
    global_permutations,
    gold_response,
    item_loglik,
    likelihood_rows,
    mean_se,
    own_prior,
    summarize,
)
from workflow_scripts.evaluate.toy_benchmarks import (
    DRAWS,
    draw_questions,
    toy_benchmark_rows,
    toy_gold_response,
)
from workflow_scripts.families import ARCHITECTURES
from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model
from workflow_scripts.priors.compute import span_means
from workflow_scripts.priors.shuffle import global_permutations as shuffle_global_permutations
from workflow_scripts.routing.hf import RoutingContext, attach
from workflow_scripts.toy_tasks import Choice


@pytest.fixture(scope="module")
def tokenizer():
    return toy_tokenizer()


def tiny_model(arch: str, tokenizer, seed: int = 0):
    model = build_toy_model(arch, ToyModelSpec(**TINY_SPEC), tokenizer, seed).eval()
    with torch.no_grad():  # sharper routers than the init, so that overriding them matters
        for name, parameter in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                parameter.normal_(0.0, 1.0)
    return model


def reference_loglik(model, ids: list[int], start: int) -> float:
    """Sum of log p(answer token) from torch's cross_entropy on the stock model (no override attached)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]  # (T, V)
    targets = torch.tensor(ids[start:])
    return -float(F.cross_entropy(logits[start - 1 : -1].double(), targets, reduction="sum"))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_own_routing_matches_cross_entropy_by_hand(arch, tokenizer):
    model = tiny_model(arch, tokenizer)
    ids, start = encode(tokenizer, "add the sum of two numbers 3?", "the answer is = 21")
    tokens, total = item_loglik(model, ids, start, "own", seed=0)
    assert tokens == len(ids) - start > 0
    assert total == pytest.approx(reference_loglik(model, ids, start), abs=1e-4)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_hard_overrides_change_the_score_deterministically(arch, tokenizer):
    model = tiny_model(arch, tokenizer)
    ids, start = encode(tokenizer, "print a list sort loop value 5?", "return answer is = 35")
    own = item_loglik(model, ids, start, "own", 0)[1]
    scrambled = item_loglik(model, ids, start, "global_hard", 0)
    assert scrambled == item_loglik(model, ids, start, "global_hard", 0)  # nothing sampled
    assert scrambled[1] != pytest.approx(own, abs=1e-6)
    # The override is removed afterwards: the stock model scores as before.
    assert item_loglik(model, ids, start, "own", 0)[1] == pytest.approx(own, abs=1e-9)


def test_global_hard_forces_the_permuted_span_top_k(tokenizer, monkeypatch):
    """Every token's selected experts are the top-k of its span's permuted own prior, computed here."""
    import workflow_scripts.routing.hf as routing_hf

    model = tiny_model("qwen3_moe", tokenizer)
    ids, start = encode(tokenizer, "add the sum of two numbers 3?", "the answer is = 21")
    context = RoutingContext(mode="hard")
    with attach(model, context), torch.no_grad():
        context.set_batch(None, None)
        model(input_ids=torch.tensor([ids]))
        probs = torch.stack([z.softmax(-1) for z in context.recorder.layer_logits()], dim=1)  # (T, L, E)
    prior = torch.stack([probs[:start].mean(0), probs[start:].mean(0)])  # (2, L, E)
    perms = shuffle_global_permutations(prior.shape[1], prior.shape[2], 3)
    permuted = prior[:, np.arange(prior.shape[1])[:, None], perms]  # (2, L, E)
    seen = []

    def spy(model_, context_):  # ``attach`` above is the original, imported before the patch
        seen.append(context_)
        return attach(model_, context_)

    monkeypatch.setattr(routing_hf, "attach", spy)
    item_loglik(model, ids, start, "global_hard", 3)
    indices = seen[0].recorder.layer_indices()  # L x (T, k), of the overridden pass
    for layer, chosen in enumerate(indices):
        for span, tokens in ((0, slice(0, start)), (1, slice(start, None))):
            expected = set(torch.topk(permuted[span, layer], 2).indices.tolist())
            assert all(set(row) == expected for row in chosen[tokens].tolist()), (layer, span)


def test_own_prior_is_the_priors_stage_span_mean():
    torch.manual_seed(0)
    logits = [torch.randn(7, 5) for _ in range(3)]  # L x (T, E)
    spans = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    probs = torch.stack([z.softmax(-1) for z in logits], dim=1)[None]  # (1, T, L, E)
    expected, _ = span_means(probs, spans[None])
    assert torch.allclose(own_prior(logits, spans), expected, atol=1e-6)


def test_permutations_are_the_global_shuffle_of_the_priors_stage():
    for seed in (0, 1, 7):
        assert np.array_equal(global_permutations(4, 16, seed), shuffle_global_permutations(4, 16, seed))


def test_cli_routings_are_the_module_routings():
    assert evaluate_cli.ROUTINGS == ROUTINGS


def test_mean_se_matches_the_statistics_module():
    values = [-0.5, -1.25, -2.0, -0.75, -3.0]
    result = mean_se(values)
    assert result["mean"] == pytest.approx(statistics.fmean(values))
    assert result["se"] == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)))
    assert result["n"] == 5
    assert math.isnan(mean_se([1.0])["se"])
    with pytest.raises(ValueError):
        mean_se([])


def test_summary_pools_a_domain_over_its_benchmarks_items():
    rows = [
        {"benchmark": "gsm8k", "item_id": "a", "routing": "own", "loglik_mean": -1.0},
        {"benchmark": "gsm8k", "item_id": "b", "routing": "own", "loglik_mean": -3.0},
        {"benchmark": "math500", "item_id": "c", "routing": "own", "loglik_mean": -2.0},
        {"benchmark": "mbpp", "item_id": "d", "routing": "own", "loglik_mean": -0.5},
    ]
    families = {"gsm8k": "math", "math500": "math", "mbpp": "code"}
    summary = summarize(rows, families)["own"]
    assert summary["benchmarks"]["gsm8k"]["mean"] == pytest.approx(-2.0)
    assert summary["domains"]["math"] == pytest.approx(mean_se([-1.0, -3.0, -2.0]))
    assert summary["domains"]["code"]["n"] == 1
    with pytest.raises(ValueError, match="no family"):
        summarize(rows, {"gsm8k": "math"})


def _toy_items(benchmark: str, rows: int = 6, seed: int = 5):
    from workflow_scripts import registry

    spec = registry.read_config_file(registry.CONFIG_FILE)["benchmarks"][benchmark]
    return normalise(benchmark, toy_benchmark_rows(benchmark, rows, seed), {"template": spec["template"]}, 42)


@pytest.mark.parametrize("benchmark", sorted(DRAWS))
def test_toy_gold_is_the_family_objects_own_response(benchmark):
    """The rebuilt response equals the drawn task's ``response`` (options as the item shuffled them)."""
    items = _toy_items(benchmark)
    questions = draw_questions(benchmark, len(items), 5)
    for (_, item), question in zip(items.iterrows(), questions, strict=True):
        task = question.task
        if isinstance(task, Choice):
            options = tuple(item["choices"])
            task = Choice(task.category, options, options.index(task.options[task.answer]))
        assert toy_gold_response(item) == task.response


def test_answer_line_gold_follows_the_template_and_skips_coding_without_text():
    math_item = {"item_id": "x", "grader": "math", "answer": "7", "metadata": "{}"}
    assert gold_response(math_item) == "The answer is $\\boxed{7}$."
    assert (
        gold_response({"item_id": "y", "grader": "multiple_choice", "answer": "C", "metadata": {}})
        == "Answer: C"
    )
    coding = {
        "item_id": "z",
        "grader": "livebench",
        "answer": "",
        "metadata": json.dumps({"category": "coding"}),
    }
    assert gold_response(coding) is None
    with pytest.raises(ValueError, match="no gold response"):
        gold_response({"item_id": "w", "grader": "unknown", "answer": "", "metadata": {}})


def test_rows_cover_every_routing_of_every_scored_item(tokenizer):
    model = tiny_model("deepseek_v3", tokenizer)
    items = [
        {"benchmark": "gsm8k", "item_id": "a", "grader": "math", "answer": "3", "metadata": "{}"},
        {"benchmark": "lcb", "item_id": "b", "grader": "livebench", "answer": "", "metadata": "{}"},
    ]
    rows = likelihood_rows(model, tokenizer, items, ["add the sum 1?", "print a list"], ROUTINGS, 0)
    assert [(row["item_id"], row["routing"]) for row in rows] == [("a", routing) for routing in ROUTINGS]
    assert all(row["loglik_mean"] == pytest.approx(row["loglik_sum"] / row["tokens"]) for row in rows)
    assert all(row["loglik_mean"] < 0 for row in rows)
