"""Each job's params hold only the config values its command reads, so a changed key reruns only its readers.

One small real toy run (a trained run's retention metrics and the base model's evaluation)
records every job's params in ``.snakemake/metadata``; a dry run after changing one key must
then list only the jobs that read it and the jobs downstream of them (Snakemake's params trigger).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_config
from tests.dag import SHORT_BASE, copy_checkout, dry_run, printed_job, snakemake_ok, with_overlay
from workflow_scripts.modeling.objective import Objective
from workflow_scripts.train.cli import train_config
from workflow_scripts.train.megatron import settings

TARGETS = (
    "results/graphs/moonlight/math20k/sft/s42/metrics.json",
    "results/evals/moonlight/base/summary.json",
)
TRAINED_PROBE = {"train_local", "probe_routes", "retention"}
# (dotted key, new value, rules that rerun): readers of the key and the jobs downstream of them.
CHANGES = [
    ("evaluation.temperature", 0.7, {"generate", "score"}),
    ("evaluation.math_timeout_seconds", 7, {"score"}),
    (
        "evaluation.toy_benchmark.seed",
        99,
        {"toy_benchmark", "benchmark_items", "benchmark_suite", "generate", "score"},
    ),
    ("probe.edge_fraction", 0.15, {"base_partition", "retention"}),
    ("probe.null_model.samples", 3, {"retention"}),
    ("training.schedule.lr_max", 2.0e-3, TRAINED_PROBE),
    ("training.sequence_length", 128, {"base_partition", *TRAINED_PROBE}),  # the base is probed again
    ("conditions.sft.settings", {"expert_bias_update_rate": 0}, TRAINED_PROBE),
    # Keys no job of the targets reads: before, whole sections in params reran these jobs.
    ("toy_base.lbl_coefficient_by_model", {"deepseek_v2_lite": 0.1}, set()),  # another model's base
    ("probe.shuffle_seeds", [0, 1], set()),  # shuffled priors only
    ("training.parallelism.nodes", 2, set()),  # the Megatron backend only
    ("training.container", "envs/megatron.sif", set()),  # the Megatron rules' image
    ("conditions.sft.label", "SFT (renamed)", set()),  # tables and figures only
    ("router_terms.kl_base.layers", "sum", set()),  # the trainings of KL-to-base conditions only
    ("benchmarks.gsm8k.name", "GSM-8K", set()),  # items read the template only
    ("evaluation.engine.dtype", "float16", set()),  # vLLM only; the toy scale generates with hf
    ("evaluation.data_parallel", 2, set()),  # vLLM only
]


def merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` merged into ``base`` key by key, as Snakemake merges config files."""
    result = dict(base)
    for key, value in update.items():
        both = isinstance(value, dict) and isinstance(result.get(key), dict)
        result[key] = merged(result[key], value) if both else value
    return result


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """``a.b.c`` = value as ``{"a": {"b": {"c": value}}}``, an overlay Snakemake merges into the config."""
    for key in reversed(dotted.split(".")):
        value = {key: value}
    return value


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    workdir = copy_checkout(tmp_path_factory.mktemp("params") / "rpb-repro")
    snakemake_ok(workdir, *TARGETS, *with_overlay(workdir, SHORT_BASE), timeout=900)
    return workdir


@pytest.mark.slow
def test_an_unchanged_config_reruns_nothing(toy_run):
    assert dry_run(with_overlay(toy_run, SHORT_BASE), *TARGETS, cwd=toy_run) == []


@pytest.mark.slow
@pytest.mark.parametrize(("key", "value", "rules"), CHANGES, ids=[key for key, _, _ in CHANGES])
def test_a_changed_key_reruns_only_the_jobs_that_read_it(toy_run, key, value, rules):
    overlay = merged(SHORT_BASE, nested(key, value))
    jobs = dry_run(with_overlay(toy_run, overlay), *TARGETS, cwd=toy_run)
    assert {rule for rule, _ in jobs} == rules


def _json_option(command: str, option: str) -> dict[str, Any]:
    return json.loads(re.search(rf"{option} '([^']*)'", command).group(1))


@pytest.mark.slow
def test_the_megatron_training_slice_holds_every_key_its_command_reads(paper_config):
    _, command = printed_job("results/megatron/trained/moonlight/math20k/sft/s42", "train_megatron")
    training, condition = _json_option(command, "--training"), _json_option(command, "--condition")
    objective = Objective.from_condition(condition)
    assert settings.run_settings(training, 20000, 42)["train"]["global_batch_size"] == 128
    assert settings.model_settings(objective, training)["seq_length"] == 8192
    assert settings.mixed_precision(training) == "bf16_mixed"
    assert training == {key: value for key, value in paper_config["training"].items() if key in training}


@pytest.mark.slow
def test_the_local_training_slice_leaves_out_the_cluster_settings(toy_run):
    record = toy_run / "results/checkpoints/moonlight/math20k/sft/s42.provenance.json"
    training = json.loads(record.read_text())["arguments"]["training"]
    assert not {"parallelism", "container"} & training.keys()
    assert train_config(training).lr_max == load_config(toy=True)["training"]["schedule"]["lr_max"]


@pytest.mark.slow
def test_paper_generation_passes_the_vllm_options_only(paper_config):
    _, command = printed_job("results/evals/moonlight/base/generations.parquet", "generate")
    assert "--batch-size" not in command
    assert _json_option(command, "--engine") == paper_config["evaluation"]["engine"]
