"""What the rules hand their jobs (workflow_scripts/dag_inputs.py), checked without Snakemake."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.dag import ROOT
from workflow_scripts import dag_inputs, registry
from workflow_scripts.cli import build_parser


def test_config_files_in_precedence_order_relative_to_the_workdir(tmp_path):
    overlay = tmp_path / "profiles" / "toy.yaml"
    loaded = [overlay, tmp_path / "config.yaml"]  # Snakemake lists the overlays it loaded first
    assert dag_inputs.config_files(loaded, [overlay], tmp_path) == ["config.yaml", "profiles/toy.yaml"]
    elsewhere = Path("/elsewhere/extra.yaml")
    assert dag_inputs.config_files([tmp_path / "config.yaml", elsewhere], [elsewhere], tmp_path)[-1] == str(
        elsewhere
    )


def test_cache_is_refused_at_paper_scale_for_moving_revisions(paper_config, toy_config):
    assert dag_inputs.cache_refusal(paper_config, None) is None
    assert dag_inputs.cache_refusal(toy_config, []) is None
    every = dag_inputs.cache_refusal(paper_config, [])
    assert "datasets.glm51.hub.revision" in every and "benchmarks.gsm8k.hub.revision" in every
    priors_only = dag_inputs.cache_refusal(paper_config, ["prior"])
    assert "models.moonlight.hub.revision" in priors_only and "benchmarks." not in priors_only
    for section in ("datasets", "models", "benchmarks"):
        for entry in paper_config[section].values():
            entry["hub"]["revision"] = "0" * 40
    assert dag_inputs.cache_refusal(paper_config, []) is None


def test_corpus_spec_is_the_corpus_entry_and_the_pool_settings(toy_config):
    spec = json.loads(dag_inputs.corpus_spec(toy_config, "math20k"))
    corpus, pool = toy_config["corpora"]["math20k"], toy_config["probe_pool"]
    assert spec == {
        "domain": corpus["domain"],
        "filter": corpus["filter"],
        "train_rows": corpus["train_rows"],
        "probe_tokens": corpus["probe_tokens"],
        "chars_per_token": pool["chars_per_token"],
        "probe_seed": pool["seed"],
    }


def test_toy_pretraining_takes_each_models_own_balancing_weight(toy_config):
    deepseek = json.loads(dag_inputs.toy_pretraining(toy_config, "deepseek_v2_lite"))
    moonlight = json.loads(dag_inputs.toy_pretraining(toy_config, "moonlight"))
    by_model = toy_config["toy_base"]["lbl_coefficient_by_model"]
    assert deepseek["lbl_coefficient"] == by_model["deepseek_v2_lite"]
    assert moonlight["lbl_coefficient"] == toy_config["toy_base"]["lbl_coefficient"]
    assert "lbl_coefficient_by_model" not in moonlight


def test_checkpoints_of_probed_and_evaluated_runs(paper_config):
    base = "results/models/moonlight/base"
    assert dag_inputs.checkpoint_of(paper_config, "moonlight", "base") == base
    trained = "results/checkpoints/moonlight/math20k/rpb/s42"
    assert dag_inputs.checkpoint_of(paper_config, "moonlight", "math20k/rpb/s42") == trained
    assert dag_inputs.probed_checkpoint(paper_config, "moonlight", "math20k", "rpb/s42") == trained
    assert dag_inputs.probed_checkpoint(paper_config, "moonlight", "math20k", "base") == base


def test_an_own_checkpoint_is_read_from_its_configured_folder(paper_config):
    paper_config["own_checkpoints"] = {"mine": {"model": "moonlight", "corpus": "coding20k", "path": "/ckpt"}}
    assert dag_inputs.checkpoint_of(paper_config, "moonlight", "own/mine") == "/ckpt"
    assert dag_inputs.probed_checkpoint(paper_config, "moonlight", "math20k", "own/mine") == "/ckpt"
    assert json.loads(dag_inputs.evaluated_identity(paper_config, "moonlight", "own/mine")) == {
        "model": "moonlight", "corpus": "coding20k", "condition": "own/mine", "seed": None
    }  # fmt: skip
    with pytest.raises(
        registry.RegistryError, match=r"own_checkpoints\.mine\.model: 'moonlight', not 'qwen3_30b'"
    ):
        dag_inputs.checkpoint_of(paper_config, "qwen3_30b", "own/mine")
    paper_config["own_checkpoints"]["mine"]["path"] = "results/checkpoints/x"
    with pytest.raises(
        registry.RegistryError, match=r"own_checkpoints\.mine\.path: results/checkpoints/x is under"
    ):
        dag_inputs.checkpoint_of(paper_config, "moonlight", "own/mine")


def test_evaluated_identity(paper_config):
    assert json.loads(dag_inputs.evaluated_identity(paper_config, "moonlight", "base")) == {
        "model": "moonlight", "corpus": None, "condition": "base", "seed": None
    }  # fmt: skip
    assert json.loads(dag_inputs.evaluated_identity(paper_config, "qwen3_30b", "coding20k/lbl/s43")) == {
        "model": "qwen3_30b", "corpus": "coding20k", "condition": "lbl", "seed": 43
    }  # fmt: skip


def test_condition_prior_files(paper_config):
    assert dag_inputs.condition_prior(paper_config, "moonlight", "math20k", "sft") == {}
    base = dag_inputs.condition_prior(paper_config, "moonlight", "math20k", "rpb")
    assert base == {
        "prior": "results/priors/moonlight/math20k/prior.npy",
        "prior_meta": "results/priors/moonlight/math20k/meta.json",
    }
    shuffled = dag_inputs.condition_prior(paper_config, "moonlight", "math20k", "within_hard")
    assert shuffled["prior"] == "results/priors/moonlight/math20k/shuffled-within.npy"
    assert shuffled["shuffle_record"] == "results/priors/moonlight/math20k/prior_validation.json"


def test_prior_arguments_name_each_declared_file_once():
    assert dag_inputs.prior_arguments({}) == ""
    files = {"prior": "p dir/prior.npy", "prior_meta": "meta.json", "shuffle_record": "v.json"}
    assert shlex.split(dag_inputs.prior_arguments(files)) == [
        "--prior", "p dir/prior.npy", "--prior-meta", "meta.json", "--shuffle-record", "v.json"
    ]  # fmt: skip


@pytest.mark.parametrize("condition", ["sft", "within_soft"])
def test_megatron_run_arguments_parse_as_the_claim_and_the_training_read_them(paper_config, condition):
    wildcards = {"model": "moonlight", "corpus": "math20k", "condition": condition, "seed": "42"}
    inputs = {"hf_base": "hf", "megatron_base": "mb", "dataset": "ds", "split": "train.parquet"}
    inputs |= dag_inputs.condition_prior(paper_config, "moonlight", "math20k", condition)
    arguments = shlex.split(dag_inputs.training_arguments(paper_config, wildcards, inputs))
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    claim = train.parse_args(["megatron-claim", *arguments, "--out", "claim.json"])
    assert claim.condition == json.loads(dag_inputs.condition_slice(paper_config, condition))
    assert claim.training["parallelism"] == paper_config["training"]["parallelism"]
    assert claim.seed == 42 and claim.work == "results/megatron/work/moonlight/math20k/" + condition + "/s42"
    assert claim.prior == inputs.get("prior") and claim.shuffle_record == inputs.get("shuffle_record")
    megatron = train.parse_args(["megatron", *arguments, "--moe-layers", "26", "--out", "o", "--record", "r"])
    same = (
        "hf_base",
        "megatron_base",
        "dataset",
        "split",
        "condition",
        "training",
        "seed",
        "prior",
        "prior_meta",
    )
    same += ("shuffle_record", "bias_in_gate_weights", "work")
    assert {key: getattr(megatron, key) for key in same} == {key: getattr(claim, key) for key in same}


def test_report_config_slices_the_registry_to_one_output(paper_config):
    sliced = json.loads(dag_inputs.report_config(paper_config, "table2"))
    assert set(sliced["conditions"]) == {"sft", "lbl", "rpb"}
    assert set(sliced["models"]) == {"moonlight"} and set(sliced["corpora"]) == {"math20k", "coding20k"}
    assert sliced["tables"] == {"table2": paper_config["tables"]["table2"]} and sliced["figures"] == {}
    assert set(sliced["benchmarks"]["gsm8k"]) == set(dag_inputs.REPORT_SLICES["benchmarks"])
    assert "claim_rules" not in sliced
    claims = json.loads(dag_inputs.report_config(paper_config, "claims"))
    assert claims["claim_rules"] == paper_config["claim_rules"]
    table1 = json.loads(dag_inputs.report_config(paper_config, "table1"))
    assert list(table1["conditions"]) == sorted(paper_config["tables"]["table1"]["lists_conditions"])


def test_report_inputs_add_the_papers_values_where_the_checkout_has_them(paper_config):
    table2 = dag_inputs.report_inputs(paper_config, "table2", ROOT)
    assert table2["reference"] == "reference/table2.csv"
    figure = dag_inputs.report_inputs(paper_config, "figure3", ROOT)
    assert set(figure) == {"files"}
    assert shlex.split(dag_inputs.reference_arguments(table2)) == ["--reference", "reference/table2.csv"] + (
        ["--reference-notes", table2["reference_notes"]] if "reference_notes" in table2 else []
    )


def test_closure_inputs_cover_the_report_files_and_each_stage(paper_config):
    files = dag_inputs.closure_inputs(paper_config, "table5")
    assert len(files) == len(set(files))
    assert set(dag_inputs.report_files(paper_config, "table5")) <= set(files)
    assert "results/data/math20k/train.parquet" in files
    assert "results/priors/moonlight/math20k/shuffled-within.npy" in files
    assert "results/graphs/moonlight/math20k/base/partition.json" in files
    assert "results/checkpoints/moonlight/coding20k/within_hard/s43" in files


def test_output_files_and_targets(paper_config):
    assert dag_inputs.output_files(paper_config, "table5") == [
        f"results/tables/table5.{x}" for x in ("csv", "md", "tex")
    ]
    assert dag_inputs.output_files(paper_config, "figure1") == [
        f"results/figures/figure1.{x}" for x in ("csv", "png", "pdf")
    ]
    targets = dag_inputs.all_targets(paper_config)
    assert targets == sorted(f"results/provenance/{o}.json" for o in registry.outputs(paper_config))


def test_generate_options_of_the_configured_backend_only(paper_config, toy_config):
    toy = toy_config["evaluation"]
    assert dag_inputs.generate_options(toy) == (
        f"--batch-size {toy['batch_size']} --shard-prompts {toy['shard_prompts']}"
    )
    words = shlex.split(dag_inputs.generate_options(paper_config["evaluation"]))
    assert words[:2] == ["--data-parallel", str(paper_config["evaluation"]["data_parallel"])]
    assert json.loads(words[words.index("--engine") + 1]) == paper_config["evaluation"]["engine"]
    assert words[words.index("--shard-prompts") + 1] == str(paper_config["evaluation"]["shard_prompts"])


def test_alternatives_of_no_ids_match_nothing():
    import re

    assert re.fullmatch(dag_inputs.alternatives([]), "") is None
    assert dag_inputs.alternatives(["b", "a"]) == "a|b"
