"""training.expert_bias_update_rate is the one switch of the expert-bias update for every non-RPB
condition, on both backends; the claims table's frozen variants are their conditions with it at 0
(docs/choices.md, "Expert-bias update under the baselines and anchors")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.dag import job_conditions
from workflow_scripts.modeling.objective import Objective, disables_router_balancing
from workflow_scripts.report.claims import FROZEN_BIAS
from workflow_scripts.train.megatron.settings import router_settings

# What a frozen variant may differ in from its condition, besides settings.
DESCRIPTIVE = {"label", "role"}


def _rates(conditions: dict, rate: float) -> dict[str, tuple[float, float]]:
    """Per condition, the local backend's update rate and Megatron's moe_router_bias_update_rate."""
    out = {}
    for name, condition in conditions.items():
        objective = Objective.from_condition(condition, expert_bias_update_rate=rate)
        out[name] = (
            objective.expert_bias_update_rate,
            router_settings(objective)["moe_router_bias_update_rate"],
        )
    return out


def test_the_default_keeps_the_update_for_every_non_rpb_condition(paper_config):
    """F.6 disables the update for RPB only; every other condition without its own setting reads
    the training rate, the same on both backends."""
    rate = paper_config["training"]["expert_bias_update_rate"]
    assert rate == 1e-3
    conditions = paper_config["conditions"]
    for name, (local, megatron) in _rates(job_conditions(paper_config), rate).items():
        condition = conditions[name]
        if disables_router_balancing(condition["intervention"]):
            expected = 0.0
        else:
            expected = condition.get("settings", {}).get("expert_bias_update_rate", rate)
        assert local == megatron == expected, name


def test_a_zero_training_rate_freezes_the_update_for_every_condition(paper_config):
    conditions = paper_config["conditions"]
    assert set(_rates(job_conditions(paper_config), 0.0).values()) == {(0.0, 0.0)}
    kept = [n for n, c in conditions.items() if not disables_router_balancing(c["intervention"])]
    assert {"sft", "lbl", "lbl_weak", "router_l2", "kl_base", "logit_l2", "zloss"} <= set(kept)


@pytest.mark.parametrize(("kept", "frozen"), FROZEN_BIAS.items())
def test_each_frozen_variant_is_its_condition_with_the_update_frozen(paper_config, kept, frozen):
    conditions = paper_config["conditions"]
    a, b = conditions[kept], conditions[frozen]
    assert b["settings"] == {"expert_bias_update_rate": 0}
    assert {k: v for k, v in a.items() if k not in DESCRIPTIVE | {"settings"}} == {
        k: v for k, v in b.items() if k not in DESCRIPTIVE | {"settings"}
    }
    assert not disables_router_balancing(a["intervention"])  # RPB needs no variant: frozen already
    rate = paper_config["training"]["expert_bias_update_rate"]
    jobs = job_conditions(paper_config)
    on = Objective.from_condition(jobs[kept], expert_bias_update_rate=rate)
    assert on.expert_bias_update_rate == rate
    assert Objective.from_condition(jobs[frozen], expert_bias_update_rate=rate) == replace(
        on, expert_bias_update_rate=0.0
    )


def test_the_frozen_variants_hold_at_toy_scale(toy_config):
    for frozen in FROZEN_BIAS.values():
        objective = Objective.from_condition(job_conditions(toy_config)[frozen], expert_bias_update_rate=1e-3)
        assert objective.expert_bias_update_rate == 0.0, frozen
