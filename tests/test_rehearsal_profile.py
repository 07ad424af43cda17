"""The rehearsal profile (profiles/rehearsal): what it runs, what it passes the downloads, what it costs.

Its default target must reach every rule kind of ``all`` and every condition kind of the registry,
read from the DAG and the registry rather than from a list here, so that a rule or a condition kind
added later fails this test until the rehearsal reaches it. The real run through SLURM, Megatron and
vLLM is tests/test_rehearsal_run.py.
"""

from __future__ import annotations

import pytest

from tests.dag import ROOT, dry_run, printed_job
from workflow_scripts import compute_plan, dag_inputs, registry
from workflow_scripts.cli import main
from workflow_scripts.train.megatron.settings import rehearsed_preemption

REHEARSAL = ["--profile", "slurm", "--profile", "profiles/rehearsal", "--sdm", "env-modules"]
OVERLAY = ["--configfiles", registry.REHEARSAL_OVERLAY]
#: A training job's inputs, as training_arguments reads them.
INPUTS = {name: f"in/{name}" for name in ("hf_base", "megatron_base", "dataset", "split")}
#: Rules every DAG has that are not work: the default targets themselves.
TARGET_RULES = {"all", registry.REHEARSAL}


@pytest.fixture(scope="module")
def config() -> dict:
    return registry.load_config([ROOT / registry.CONFIG_FILE, ROOT / registry.REHEARSAL_OVERLAY])


@pytest.fixture(scope="module")
def rehearsal_jobs() -> list[tuple[str, dict[str, str]]]:
    return dry_run(REHEARSAL)


@pytest.mark.slow
def test_the_default_target_reaches_every_rule_kind_of_all(rehearsal_jobs):
    everything = {rule for rule, _ in dry_run(REHEARSAL, "all")} - TARGET_RULES
    reached = {rule for rule, _ in rehearsal_jobs}
    assert registry.REHEARSAL in reached and "all" not in reached  # its own default, not all's
    assert everything - reached == set(), "rule kinds of all the rehearsal never runs"
    assert len(rehearsal_jobs) < 150


@pytest.mark.slow
def test_the_default_target_trains_every_condition_kind_on_every_family(rehearsal_jobs, config):
    trained = {wildcards["condition"] for rule, wildcards in rehearsal_jobs if rule == "train_megatron"}
    missed = {
        kind: names
        for kind, names in registry.condition_kinds(config["conditions"]).items()
        if not trained & set(names)
    }
    assert missed == {}, "condition kinds the rehearsal never trains"
    families = {wildcards["model"] for rule, wildcards in rehearsal_jobs if rule == "train_megatron"}
    assert families == set(config["models"])


def test_the_rehearsal_keeps_the_paper_dag_and_changes_sizes_only(config):
    paper = registry.load_config([ROOT / registry.CONFIG_FILE])
    assert config["scale"] == paper["scale"] == "paper"
    assert config["training"]["backend"] == "megatron" and config["evaluation"]["backend"] == "vllm"
    assert set(config["conditions"]) == set(paper["conditions"])
    assert set(registry.outputs(config)) == set(registry.outputs(paper))
    assert registry.REHEARSAL not in paper
    for name, model in config["models"].items():
        assert model["hub"]["repo"] == paper["models"][name]["hub"]["repo"]
        assert model["hub"]["keep_moe_layers"] == model["moe_layers"] == 2


def test_condition_kinds_put_each_condition_under_its_intervention_and_settings(config):
    kinds = registry.condition_kinds(config["conditions"])
    assert kinds[("rpb", False)][0] == "rpb" and kinds[("rpb", True)] == ["within_soft"]
    assert kinds[("rpb_hard", True)] == ["within_hard", "global_hard"]
    assert (
        "sft_frozen_bias" in kinds[("none", None)]
        and "sft_frozen_bias" in kinds[("expert_bias_update_rate",)]
    )
    assert kinds[("bias_in_gate_weights",)] == ["rpb_selection_only"]
    assert sorted(name for names in kinds.values() for name in names if name == "rpb") == ["rpb"]


def test_the_targets_are_the_outputs_manifests_then_the_cells_results(config):
    targets = dag_inputs.rehearsal_targets(config)
    assert targets[:2] == ["results/provenance/figure2.json", "results/provenance/table13.json"]
    assert sum(path.endswith("/metrics.json") for path in targets) == 10
    assert [path for path in targets if path.endswith("/summary.json")] == [
        "results/evals/moonlight/math20k/rpb_selection_only/s42/summary.json"
    ]


def test_an_unknown_rehearsal_output_is_refused_naming_the_key(config):
    broken = {**config, registry.REHEARSAL: {"outputs": ["table99"], "cells": []}}
    with pytest.raises(
        registry.RegistryError, match=r"rehearsal\.outputs: unknown table or figure 'table99'"
    ):
        registry.check_references(broken)
    cell = {"models": ["moonlight"], "corpora": ["math20k"], "conditions": ["nope"], "probe_seeds": [42]}
    broken = {**config, registry.REHEARSAL: {"outputs": [], "cells": [cell]}}
    with pytest.raises(registry.RegistryError, match=r"rehearsal\.cells\[0\]\.conditions: unknown condition"):
        registry.check_references(broken)


@pytest.mark.slow
def test_the_downloads_read_the_first_rows_and_cut_the_bases():
    _, dataset = printed_job("results/raw/glm51/Math.parquet", "download_dataset", *OVERLAY)
    assert "--first-rows 1500" in dataset
    _, model = printed_job("results/models/qwen3_30b/manifest.json", "download_model", *OVERLAY)
    assert "--moe-layers 2" in model
    _, paper = printed_job("results/raw/glm51/Math.parquet", "download_dataset")
    assert "--first-rows" not in paper


def test_the_plan_prices_the_rehearsal_on_one_node(config, capsys):
    work = compute_plan.target_work(config, registry.REHEARSAL)
    assert len(work.closure.trainings) == 10 and len(work.closure.evaluations) == 1
    argv = ["plan", registry.REHEARSAL, "--overlay", str(ROOT / registry.REHEARSAL_OVERLAY)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "compute plan: rehearsal" in printed and "makespan on 1 nodes" in printed
    with pytest.raises(compute_plan.UserInputError, match="unknown target 'rehearsal'"):
        compute_plan.target_work(registry.load_config([ROOT / registry.CONFIG_FILE]), registry.REHEARSAL)


def test_only_the_preempted_conditions_runs_are_told_to_stop(config):
    wildcards = {"model": "moonlight", "corpus": "math20k", "seed": "42"}
    preempted = dag_inputs.training_arguments(config, {**wildcards, "condition": "router_l2"}, INPUTS)
    assert '"preempt_after_steps": 4' in preempted
    plain = dag_inputs.training_arguments(config, {**wildcards, "condition": "rpb_hard"}, INPUTS)
    assert "preempt" not in plain
    paper = registry.load_config([ROOT / registry.CONFIG_FILE])
    assert "preempt" not in dag_inputs.run_training(paper["training"], "router_l2")
    broken = {
        **config,
        "training": {**config["training"], "preempt": {"after_steps": 4, "conditions": ["x"]}},
    }
    with pytest.raises(registry.RegistryError, match=r"training\.preempt\.conditions: unknown condition 'x'"):
        registry.check_references(broken)


def test_a_fresh_training_stops_at_the_rehearsed_preemption_and_its_resume_runs_on():
    training = {"preempt_after_steps": 4}
    assert rehearsed_preemption(training, 8, None) == 4
    assert rehearsed_preemption(training, 8, 4) is None  # the retry resumes from step 4
    assert rehearsed_preemption({}, 8, None) is None  # paper scale: no rehearsed preemption
    with pytest.raises(registry.UserInputError, match="preempt.after_steps 8: .* before the run's last"):
        rehearsed_preemption({"preempt_after_steps": 8}, 8, None)
