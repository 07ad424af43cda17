"""docs/layout.md's recipe for a router term, followed in a copy of the suite's toy run: one
function in ``routing/core.py``, its declaration, a condition and a Table 3 cell in the registry.
Nothing else changes, and the workflow trains the term, tables its condition and hands it to
Megatron's routers (whose side the Megatron suite checks with a term added the same way,
``tests/test_routing_megatron.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.dag import JOB_ENV, copy_workdir, snakemake_ok, with_overlay

#: The term's function, appended to the copy's routing/core.py.
TERM_CODE = '''

def collision_probability(layer: RouterLayer) -> Tensor:
    """Mean over routed tokens of sum_e p_e^2 (a throwaway term of tests/test_extending.py)."""
    mask, count = _token_mask(layer.token_mask, layer.probabilities)
    return torch.where(mask, layer.probabilities.pow(2).sum(dim=-1), 0.0).sum() / count


ROUTER_TERM_LOSSES["collision"] = collision_probability
'''
LABEL = "Collision anchor"
#: The registry entries: the term, its condition, and Table 3 narrowed to that condition's cell.
REGISTRY = {
    "router_terms": {"collision": {"layers": "mean"}},
    "conditions": {
        "collision": {
            "label": LABEL,
            "intervention": "collision",
            "params": {"coefficient": 0.1},
            "family": "preserving",
            "role": "router-sharpness anchor",
            "constrained_object": "router collision probability",
            "token_conditioned_routing": "preserved",
        }
    },
    "tables": {
        "table3": {
            "cells": [
                {
                    "models": ["moonlight"],
                    "corpora": ["math20k"],
                    "conditions": ["collision"],
                    "eval_seeds": [42],
                }
            ]
        }
    },
}
TABLE = "results/tables/table3.md"
CHECKPOINT = "results/checkpoints/moonlight/math20k/collision/s42"


@pytest.fixture(scope="module")
def extended(toy_run, tmp_path_factory) -> tuple[Path, str]:
    """The toy run's copy with the term added as docs/layout.md says, and Table 3 built there."""
    workdir = copy_workdir(toy_run, tmp_path_factory.mktemp("extended") / "rpb-repro")
    core = workdir / "workflow_scripts" / "routing" / "core.py"
    core.write_text(core.read_text() + TERM_CODE)
    git = ["git", "-C", str(workdir), "-c", "user.name=toy", "-c", "user.email=toy@localhost"]
    subprocess.run([*git, "commit", "-qam", "a router term"], check=True, capture_output=True)
    done = snakemake_ok(workdir, TABLE, *with_overlay(workdir, REGISTRY))
    return workdir, done.stdout + done.stderr


def test_the_new_term_costs_only_its_own_jobs(extended):
    """The recipe reruns nothing the toy run built: a training, its evaluation and the table."""
    _, log = extended
    ran = set(pd.Series(log.splitlines()).str.extract(r"^(?:local)?rule (\w+):$")[0].dropna())
    assert ran <= {"train_local", "generate", "score", "table"}, ran
    assert "train_local" in ran


def test_the_local_backend_trains_the_term_from_the_registry(extended):
    workdir, _ = extended
    records = [json.loads(line) for line in (workdir / f"{CHECKPOINT}.log.jsonl").read_text().splitlines()]
    steps = [record for record in records if "collision" in record]
    assert steps, "the training log records no collision term"
    # sum_e p_e^2 of a distribution over E experts lies in [1/E, 1].
    assert all(1 / 16 <= step["collision"] <= 1 for step in steps)


def test_table3_shows_the_new_condition_as_a_row(extended):
    workdir, _ = extended
    table = (workdir / TABLE).read_text()
    (row,) = [line for line in table.splitlines() if f"| {LABEL} |" in line]
    assert row.startswith("| math20k |") and row.endswith("| — |")  # no published value beside it
    cells = pd.read_csv(workdir / "results" / "tables" / "table3.csv")
    assert cells.set_index("condition").loc["collision", "status"] == "unpublished"


def test_megatron_settings_leave_the_term_to_the_routers(extended):
    """Megatron-Core's own router losses stay off; the routers get the term (routing.megatron)."""
    workdir, _ = extended
    script = """
import json
from workflow_scripts import registry
from workflow_scripts.modeling.objective import Objective
from workflow_scripts.train.megatron.settings import router_settings
config = registry.load_config([*registry.shipped_config_files(".", toy=True), "test_overlay.yaml"])
objective = Objective.from_condition(registry.job_condition(config, "collision"))
terms = [[term.name, weight] for term, weight in objective.terms]
print(json.dumps({"settings": router_settings(objective), "terms": terms}))
"""
    env = {**JOB_ENV, "PYTHONPATH": str(workdir)}
    printed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    found = json.loads(printed)
    assert found["terms"] == [["collision", 0.1]]
    assert found["settings"]["moe_router_load_balancing_type"] == "none"
    assert found["settings"]["moe_aux_loss_coeff"] == 0.0 and found["settings"]["moe_z_loss_coeff"] is None
