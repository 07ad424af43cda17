"""Sanity gates (report/gates.py): paired differences, verdicts and the runs they read."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.dag import TOY, dry_run
from workflow_scripts import layout, registry
from workflow_scripts.report import gates


def frame(
    values: dict[tuple[str, str], float], metric: str = gates.LOGLIK, routing: str = "own"
) -> pd.DataFrame:
    rows = [{"benchmark": b, "item_id": i, "routing": routing, metric: v} for (b, i), v in values.items()]
    return pd.DataFrame(rows)


def test_paired_difference_is_the_paired_t_test_numerator_and_denominator():
    rng = np.random.default_rng(0)
    a, b = rng.normal(-1.0, 0.5, 12), rng.normal(-1.3, 0.5, 12)
    keys = [("gsm8k", f"i{n}") for n in range(12)]
    value, se, n = gates.paired_difference(
        frame(dict(zip(keys, a, strict=True))), frame(dict(zip(keys, b, strict=True))), gates.LOGLIK
    )
    assert n == 12
    assert value == pytest.approx(float(np.mean(a - b)))
    assert value / se == pytest.approx(stats.ttest_rel(a, b).statistic)


def test_paired_difference_pairs_by_item_not_by_row_order():
    first = frame({("m", "x"): -1.0, ("m", "y"): -2.0})
    second = frame({("m", "y"): -2.5, ("m", "x"): -1.5})
    value, se, _ = gates.paired_difference(first, second, gates.LOGLIK)
    assert value == pytest.approx(0.5) and se == pytest.approx(0.0)


def test_paired_difference_refuses_unpaired_or_duplicate_items():
    with pytest.raises(ValueError, match="one run only"):
        gates.paired_difference(
            frame({("m", "x"): 1.0, ("m", "y"): 1.0}), frame({("m", "x"): 1.0}), gates.LOGLIK
        )
    doubled = pd.concat([frame({("m", "x"): 1.0})] * 2)
    with pytest.raises(ValueError, match="more than one row"):
        gates.paired_difference(doubled, frame({("m", "x"): 1.0}), gates.LOGLIK)


@pytest.mark.parametrize(
    ("value", "se", "passed"), [(0.5, 0.2, True), (0.4, 0.2, False), (0.39, 0.2, False), (-1.0, 0.1, False)]
)
def test_verdict_passes_strictly_above_two_standard_errors(value, se, passed):
    gate = gates.verdict("in_domain_headroom", gates.LOGLIK, "m", "c", (value, se, 10), 2.0)
    assert gate.passed is passed and gate.threshold == pytest.approx(2 * se)


def test_a_single_item_never_passes():
    assert not gates.verdict("in_domain_headroom", gates.LOGLIK, "m", "c", (5.0, math.nan, 1), 2.0).passed


def test_an_unknown_gate_is_refused():
    with pytest.raises(ValueError, match="unknown gate 'forgetting'"):
        gates.verdict("forgetting", gates.LOGLIK, "m", "c", (0.5, 0.1, 10), 2.0)


def test_routing_gates_compare_own_with_each_override():
    own = {("m", f"i{n}"): -1.0 - 0.01 * n for n in range(6)}
    base = pd.concat(
        [
            frame(own),
            frame({k: v - 0.5 for k, v in own.items()}, routing="global_hard"),
            frame(
                {k: v - (0.01 if n % 2 else -0.01) for n, (k, v) in enumerate(own.items())},
                routing="own_prior_hard",
            ),
        ]
    )
    routing, conditioned = gates.routing_gates("moonlight", base, 2.0)
    assert (routing.gate, routing.value, routing.passed) == ("routing_carries_task", pytest.approx(0.5), True)
    assert (conditioned.gate, conditioned.value, conditioned.passed) == (
        "token_conditioned_routing", pytest.approx(0.0), False,
    )  # fmt: skip


def test_the_ood_change_reads_out_of_domain_items_only():
    families = {"gsm8k": "math", "mbpp": "code", "mmlu": "multi_domain"}
    base = frame({("gsm8k", "a"): -1.0, ("mbpp", "b"): -1.0, ("mmlu", "c"): -1.0, ("mmlu", "d"): -1.2})
    sft = frame({("gsm8k", "a"): 0.0, ("mbpp", "b"): -1.5, ("mmlu", "c"): -1.7, ("mmlu", "d"): -1.7})
    headroom, ood = gates.sft_gates("m", "math20k", "math", families, base, sft, None, None, 2.0)
    assert (ood.gate, ood.role, ood.items) == ("ood_change", "diagnostic", 3)  # gsm8k is in domain
    assert ood.value == pytest.approx(-np.mean([0.5, 0.7, 0.5]))  # SFT minus base: a loss is negative
    assert (headroom.gate, headroom.role, headroom.items, headroom.value) == (
        "in_domain_headroom", "premise", 1, pytest.approx(1.0),
    )  # fmt: skip


def test_sft_above_the_base_out_of_domain_as_in_the_paper_is_no_failure():
    """The paper's SFT gains out of domain (15.65 vs 12.56, 35.83 vs 19.89): no premise reads it."""
    families = {"gsm8k": "math", "mbpp": "code"}
    base = {("mbpp", f"o{n}"): -1.0 - 0.01 * n for n in range(6)}
    base |= {("gsm8k", f"i{n}"): -1.0 for n in range(6)}
    # SFT gains on every item, 0.3 out of domain and 0.5 in domain, give or take 0.01
    gains = {key: (0.3 if key[0] == "mbpp" else 0.5) + 0.01 * (n % 3) for n, key in enumerate(base)}
    base, sft = frame(base), frame({key: value + gains[key] for key, value in base.items()})
    headroom, ood = gates.sft_gates("m", "math20k", "math", families, base, sft, None, None, 2.0)
    assert headroom.passed and ood.passed and ood.role == gates.DIAGNOSTIC
    text = gates.render_markdown(gates.gates_frame([headroom, ood]), 2.0, "toy")
    assert "| ood_change | diagnostic |" in text and "| positive |" in text and "FAIL" not in text
    assert "15.65 vs 12.56" in text and "35.83 vs 19.89" in text
    assert "forgetting is no premise" in text


@pytest.mark.parametrize(
    ("role", "value", "passed", "reading"),
    [
        ("premise", 0.5, True, "pass"),
        ("premise", -0.5, False, "FAIL"),
        ("premise", 0.1, False, "FAIL"),
        ("diagnostic", 0.5, True, "positive"),
        ("diagnostic", -0.5, False, "negative"),
        ("diagnostic", 0.1, False, "within noise"),
        ("diagnostic", -0.1, False, "within noise"),
    ],
)
def test_a_premise_passes_or_fails_and_a_diagnostic_reads_its_sign(role, value, passed, reading):
    assert gates.reading(role, value, 0.2, passed) == reading


def test_every_gate_has_a_role_and_a_meaning():
    assert set(gates.ROLES) == set(gates.GATE_MEANINGS)
    assert {name for name, role in gates.ROLES.items() if role == gates.PREMISE} == {
        "routing_carries_task", "in_domain_headroom",
    }  # fmt: skip


def test_the_sft_gates_on_accuracy_average_each_items_repeats():
    families = {"gsm8k": "math", "mbpp": "code"}
    scores = lambda s: pd.DataFrame(  # noqa: E731
        [{"benchmark": b, "item_id": i, "repeat": r, "score": s[b, i][r]} for b, i in s for r in range(2)]
    )
    base = {
        ("mbpp", "x"): [1.0, 1.0],
        ("mbpp", "y"): [1.0, 0.0],
        ("mbpp", "z"): [0.0, 0.0],
        ("gsm8k", "w"): [0.0, 0.0],
    }
    sft = {
        ("mbpp", "x"): [0.0, 1.0],
        ("mbpp", "y"): [0.0, 0.0],
        ("mbpp", "z"): [0.0, 0.0],
        ("gsm8k", "w"): [1.0, 1.0],
    }
    lik = frame(dict.fromkeys(base, -1.0))
    gates_ = gates.sft_gates("m", "math20k", "math", families, lik, lik, scores(base), scores(sft), 2.0)
    accuracy = {gate.gate: gate for gate in gates_ if gate.metric == "accuracy"}
    assert accuracy["ood_change"].value == pytest.approx(-100 * (0.5 + 0.5 + 0.0) / 3)
    assert accuracy["in_domain_headroom"].value == pytest.approx(100.0)


def test_markdown_names_every_gate_and_its_verdict():
    gate = gates.verdict("in_domain_headroom", gates.LOGLIK, "moonlight", "math20k", (0.1, 0.01, 40), 2.0)
    text = gates.render_markdown(gates.gates_frame([gate]), 2.0, "toy")
    row = "| in_domain_headroom | premise | loglik_mean | moonlight | math20k | 40 | 0.1000 | 0.0100 |"
    assert f"{row} 0.0200 | pass |" in text
    assert all(name in text for name in gates.GATE_MEANINGS)


def test_gate_runs_reuse_sft_runs_the_grid_already_trains():
    config = registry.load_config([registry.CONFIG_FILE, registry.TOY_OVERLAY], {})
    runs = gates.gate_runs(config)
    assert runs.models == tuple(sorted(config["models"]))
    assert {(e.model, e.corpus) for e in runs.sft} == {
        (m, c) for m in config["models"] for c in gates.GATE_CORPORA
    }
    assert {e.seed for e in runs.sft} == {42}
    trained = set().union(*(registry.closure(config, o).trainings for o in registry.outputs(config)))
    assert {registry.Training(e.model, e.corpus, e.condition, e.seed) for e in runs.sft} <= trained


@pytest.mark.slow
def test_toy_gates_table_resolves_to_likelihoods_of_every_base_and_sft_run():
    target = layout.rule_path("table", ".md", table=layout.GATES_TABLE)
    jobs = dry_run(TOY, target)
    likelihoods = {job["model"] + "/" + job["evaluated"] for rule, job in jobs if rule == "likelihood"}
    config = registry.load_config([registry.CONFIG_FILE, registry.TOY_OVERLAY], {})
    runs = gates.gate_runs(config)
    expected = {f"{m}/base" for m in runs.models} | {f"{e.model}/{e.corpus}/sft/s{e.seed}" for e in runs.sft}
    assert likelihoods == expected
    assert [rule for rule, _ in jobs].count("gates") == 1
    assert {job["condition"] for rule, job in jobs if rule == "train_local"} == {"sft"}
