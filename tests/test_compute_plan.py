"""The compute plan against hand computations from the shipped config's figures.

Hand figures (config.yaml): 5 epochs, global batch 128, sequence length 8192, 16 nodes of
8 GPUs, a checkpoint every 100 steps; Moonlight 3.0e9 active and 16.0e9 total parameters
(27 layers of 16 heads with 192 + 128 query/key and value dimensions; 26 MoE layers of 64
experts, top-6); 25 % (10-35 %) of 989 TFLOP/s; 2500 (1000-6000) decoded tokens/s per GPU;
5 repeats over the twelve benchmarks' 33,052 items at the expected lengths below, 2 % (0-5 %) of
responses at the 8192-token cap; start-up 300 s (120-900) for Megatron, 240 s (120-600) for vLLM;
1.0 GB/s (0.3-3.0) per node of storage.
"""

from __future__ import annotations

import math

import pytest

from tests.conftest import ROOT
from tests.dag import PAPER, planned_jobs
from workflow_scripts.cli import main
from workflow_scripts.compute_plan import plan, render, target_closure
from workflow_scripts.errors import UserInputError
from workflow_scripts.plan_costs import (
    FORWARD,
    TRAIN,
    Calibration,
    flops_per_token,
    generation_token_bound,
    generation_tokens,
    implied_mfu,
    training_tokens,
)

EFFECTIVE_FLOPS_PER_GPU_SECOND = 0.25 * 989e12
# Per token and layer a forward pass scores and weighs 8192 / 2 positions on average (causal).
MOONLIGHT_ATTENTION_FORWARD = 27 * 2 * 16 * (192 + 128) * 8192 / 2
MOONLIGHT_TRAIN_FLOPS = 6 * 3.0e9 + 3 * MOONLIGHT_ATTENTION_FORWARD
MOONLIGHT_FORWARD_FLOPS = 2 * 3.0e9 + MOONLIGHT_ATTENTION_FORWARD
MOONLIGHT_TRAINING_GPU_HOURS = (
    MOONLIGHT_TRAIN_FLOPS * (782 * 128 * 8192) / EFFECTIVE_FLOPS_PER_GPU_SECOND / 3600
)
MOONLIGHT_PRIOR_GPU_HOURS = MOONLIGHT_FORWARD_FLOPS * (20000 * 8192) / EFFECTIVE_FLOPS_PER_GPU_SECOND / 3600
MOONLIGHT_WEIGHTS_GB = 16.0 * 2  # bf16
MOONLIGHT_STATE_GB = 16.0 * 14  # bf16 weights, fp32 main weights, Adam's two moments
# One Moonlight training's wall seconds beside its FLOPs: start-up and loading its base on 16
# nodes; seven checkpoints with the optimizer state (steps 100..700 of 782) and the final
# weights, each written and read back (digests), all at 16 x 1 GB/s.
MOONLIGHT_TRAINING_EXTRA_SECONDS = (300 + MOONLIGHT_WEIGHTS_GB / 16) + (
    7 * 2 * MOONLIGHT_STATE_GB / 16 + 2 * MOONLIGHT_WEIGHTS_GB / 16
)
MOONLIGHT_TRAINING_WALL_HOURS = MOONLIGHT_TRAINING_GPU_HOURS / 128 + MOONLIGHT_TRAINING_EXTRA_SECONDS / 3600
# The benchmarks: items, and expected prompt and response tokens (compute.benchmark_tokens).
ITEMS = {
    "gsm8k": (1319, 130, 300),
    "math500": (500, 140, 650),
    "livebench_math": (368, 350, 1000),
    "humaneval": (164, 180, 250),
    "mbpp": (500, 130, 200),
    "livebench_coding": (128, 700, 600),
    "mmlu_stem": (3153, 170, 280),
    "mmlu": (14042, 160, 200),
    "mmlu_pro": (12032, 320, 400),
    "gpqa": (448, 280, 500),
    "gpqa_diamond": (198, 300, 550),
    "livebench_reasoning": (200, 600, 900),
}
RESPONSES = sum(items for items, _, _ in ITEMS.values())
TYPICAL_TOKENS = sum(items * response for items, _, response in ITEMS.values())
PROMPT_TOKENS = sum(items * prompt for items, prompt, _ in ITEMS.values())


def expected_tokens(share_at_cap: float) -> float:
    return 5 * ((1 - share_at_cap) * TYPICAL_TOKENS + share_at_cap * RESPONSES * 8192)


# One Moonlight generation on 8 GPUs: start-up and its weights, prefill at the forward FLOPs rate,
# decode at 2500 tokens/s per GPU.
MOONLIGHT_GENERATION_WALL_SECONDS = (
    240
    + MOONLIGHT_WEIGHTS_GB / 1.0
    + (
        MOONLIGHT_FORWARD_FLOPS * PROMPT_TOKENS * 5 / EFFECTIVE_FLOPS_PER_GPU_SECOND
        + expected_tokens(0.02) / 2500
    )
    / 8
)


def by_name(result) -> dict:
    return {job_class.name: job_class for job_class in result.classes}


def test_all_needs_119_trainings(paper_config):
    """The paper's cells; the claims' expert-bias sensitivity (claims.py FROZEN_BIAS) is toy-only."""
    closure = target_closure(paper_config, "all")
    assert len(closure.trainings) == 119
    assert by_name(plan(paper_config, "all", {"openr1math": 94000}))["train_megatron"].jobs == 119


@pytest.mark.slow
def test_the_plan_runs_the_jobs_snakemake_runs(paper_config):
    """Job for job per rule, as the paper-scale dry run of `all` plans them (downloads run locally)."""
    planned = {}
    for job in planned_jobs(PAPER):
        planned[job.rule] = planned.get(job.rule, 0) + 1
    local = {"download_dataset", "download_model", "download_benchmark", "provenance_manifest", "all"}
    classes = plan(paper_config, "all", {"openr1math": 94000}).classes
    counts = {job_class.name: job_class.jobs for job_class in classes}
    assert counts == {rule: n for rule, n in planned.items() if rule not in local}


def test_a_20000_row_corpus_takes_782_steps(paper_config):
    assert training_tokens(paper_config, 20000) == 782 * 128 * 8192


def test_one_moonlight_training_by_hand(paper_config):
    """Its FLOPs, then start-up, loading and checkpoint saves, billed for all 16 nodes (exclusive)."""
    trainings = by_name(plan(paper_config, "figure1"))["train_megatron"]
    assert MOONLIGHT_TRAINING_GPU_HOURS == pytest.approx(19.711, abs=1e-3)
    assert MOONLIGHT_TRAINING_EXTRA_SECONDS == 300 + 2 + 7 * 28 + 4
    assert trainings.jobs == 1
    assert trainings.gpus_per_job == 128
    assert trainings.job_hours == pytest.approx(MOONLIGHT_TRAINING_WALL_HOURS)
    assert trainings.gpu_hours == pytest.approx(128 * MOONLIGHT_TRAINING_WALL_HOURS)
    assert trainings.node_hours == pytest.approx(16 * MOONLIGHT_TRAINING_WALL_HOURS)


def test_table5_by_hand(paper_config):
    result = plan(paper_config, "table5")
    classes = by_name(result)
    # 2 corpora x (rpb x 3 seeds + 3 shuffled-prior conditions x 3 seeds), all Moonlight on 20k rows.
    assert classes["train_megatron"].gpu_hours == pytest.approx(24 * 128 * MOONLIGHT_TRAINING_WALL_HOURS)
    # Each training is claimed (CPU) and exported (one GPU); Moonlight is imported once.
    assert (classes["megatron_claim"].jobs, classes["export_megatron"].jobs) == (24, 24)
    assert classes["megatron_import"].jobs == 1
    assert classes["megatron_claim"].gpus_per_job == 0
    # Two base priors (20000 rows at full length, 2500 calls of 8 rows), start-up and loading.
    prior_seconds = MOONLIGHT_PRIOR_GPU_HOURS * 3600 + 2500 * 0.15 + 60 + MOONLIGHT_WEIGHTS_GB / 1.0
    prior_seconds += 20000 * 2 * 26 * 64 * 4 / 1e9 / 1.0  # writing it
    assert classes["prior"].jobs == 2
    assert classes["prior"].gpu_hours == pytest.approx(2 * prior_seconds / 3600)
    assert classes["probe_routes"].jobs == 20
    generations = classes["generate"]
    assert (generations.jobs, generations.gpus_per_job) == (24, 8)
    assert generations.job_hours == pytest.approx(MOONLIGHT_GENERATION_WALL_SECONDS / 3600)
    assert generations.gpu_hours == pytest.approx(24 * 8 * MOONLIGHT_GENERATION_WALL_SECONDS / 3600)
    assert classes["score"].jobs == 24 and classes["score"].cpus_per_job == 16
    assert result.gpu_hours == pytest.approx(sum(c.gpu_hours for c in result.classes))
    assert result.node_hours == pytest.approx(result.gpu_hours / 8)


def test_generation_counts_expected_lengths_and_keeps_the_cap_as_its_bound(paper_config):
    """Most items are multiple choice: the expected tokens are a few percent of every response at 8192."""
    tokens = generation_tokens(paper_config)
    assert tokens.central == pytest.approx(expected_tokens(0.02))
    assert tokens.low == pytest.approx(expected_tokens(0.0))
    assert tokens.high == pytest.approx(expected_tokens(0.05))
    assert generation_token_bound(paper_config) == RESPONSES * 5 * 8192 == 33052 * 5 * 8192
    assert tokens.central / generation_token_bound(paper_config) < 0.06
    result = plan(paper_config, "table5")
    # The bound: every response at the cap, at the slowest rate (1000 tokens/s per GPU).
    assert result.generation_bound / 3600 == pytest.approx(24 * 33052 * 5 * 8192 / 1000 / 3600)
    assert "bound: every response at max_new_tokens" in render(result)


def test_the_generations_upper_end_is_expected_lengths_at_the_slowest_rate(paper_config):
    generations = by_name(plan(paper_config, "table5"))["generate"]
    prefill = MOONLIGHT_FORWARD_FLOPS * PROMPT_TOKENS * 5 / (0.10 * 989e12)
    slowest = 600 + MOONLIGHT_WEIGHTS_GB / 0.3 + (prefill + expected_tokens(0.05) / 1000) / 8
    assert generations.job_hours_high == pytest.approx(slowest / 3600)
    assert generations.job_hours_high < 12  # the old profile's runtime; every response at 8192 took 47 h


def test_attention_at_8k_adds_a_fifth_to_moonlight_and_half_to_qwen3(paper_config):
    """6N alone leaves out the attention scores, which grow with the 8192-token sequences."""
    assert flops_per_token(paper_config, "moonlight", TRAIN) == pytest.approx(MOONLIGHT_TRAIN_FLOPS)
    assert flops_per_token(paper_config, "moonlight", FORWARD) == pytest.approx(MOONLIGHT_FORWARD_FLOPS)
    assert MOONLIGHT_TRAIN_FLOPS / (6 * 3.0e9) == pytest.approx(1.189, abs=1e-3)
    qwen3 = 6 * 3.3e9 + 3 * 48 * 2 * 32 * (128 + 128) * 8192 / 2
    assert flops_per_token(paper_config, "qwen3_30b", TRAIN) == pytest.approx(qwen3)
    assert qwen3 / (6 * 3.3e9) == pytest.approx(1.488, abs=1e-3)


def test_every_class_states_its_range(paper_config):
    """A training's low end: 35 % MFU, the shortest start-up, 3 GB/s; its high end: 10 %, 900 s, 0.3 GB/s."""
    trainings = by_name(plan(paper_config, "figure1"))["train_megatron"]

    def wall(mfu: float, startup: float, rate: float) -> float:
        extra = startup + MOONLIGHT_WEIGHTS_GB / (16 * rate)
        extra += 7 * 2 * MOONLIGHT_STATE_GB / (16 * rate) + 2 * MOONLIGHT_WEIGHTS_GB / (16 * rate)
        return MOONLIGHT_TRAINING_GPU_HOURS * 0.25 / mfu / 128 + extra / 3600

    assert trainings.gpu_hours_low == pytest.approx(128 * wall(0.35, 120, 3.0))
    assert trainings.gpu_hours_high == pytest.approx(128 * wall(0.10, 900, 0.3))
    assert trainings.job_hours_high == pytest.approx(wall(0.10, 900, 0.3))


def test_a_measured_step_time_prices_the_trainings_of_its_model(paper_config):
    """A first job's seconds per step (Bridge's log) replace the MFU: steps x seconds, start-up, saves."""
    result = plan(paper_config, "table5", calibration=Calibration({"moonlight": 3.5}, decode_rate=4000))
    classes = by_name(result)
    measured = 24 * 128 * (782 * 3.5 + MOONLIGHT_TRAINING_EXTRA_SECONDS) / 3600
    assert classes["train_megatron"].gpu_hours == pytest.approx(measured)
    decode = expected_tokens(0.02) / 4000 / 8
    assert classes["generate"].job_hours == pytest.approx(
        (MOONLIGHT_GENERATION_WALL_SECONDS - expected_tokens(0.02) / 2500 / 8 + decode) / 3600
    )
    mfu = MOONLIGHT_TRAIN_FLOPS * 128 * 8192 / (3.5 * 128 * 989e12)
    assert implied_mfu(paper_config, "moonlight", 3.5) == pytest.approx(mfu)
    text = render(result)
    assert f"trainings of moonlight: measured 3.5 s per step (MFU {mfu:.2f})" in text
    assert "generations: measured 4000 decoded tokens/s per GPU" in text
    with pytest.raises(UserInputError, match="'moonlite'"):
        plan(paper_config, "table5", calibration=Calibration({"moonlite": 3.5}))


def test_the_gates_price_their_likelihoods(paper_config):
    """The gates read the base of every model (three routings) and each model's SFT runs (one)."""
    classes = by_name(plan(paper_config, "gates"))
    likelihoods = classes["likelihood"]
    assert likelihoods.jobs == 9 and likelihoods.gpus_per_job == 1
    # A Moonlight base: every item's prompt and response teacher-forced under three routings.
    passes = 3 * RESPONSES
    forward = MOONLIGHT_FORWARD_FLOPS * 3 * (PROMPT_TOKENS + TYPICAL_TOKENS) / EFFECTIVE_FLOPS_PER_GPU_SECOND
    moonlight_base = 60 + MOONLIGHT_WEIGHTS_GB / 1.0 + forward + passes * 0.15
    assert likelihoods.job_hours >= moonlight_base / 3600 - 1e-9
    assert "likelihood" not in by_name(plan(paper_config, "all", {"openr1math": 94000}))  # asked by name
    assert classes["gates"].jobs == 1


def test_the_disk_a_target_writes(paper_config):
    """Table 5: F.7's prior shape, two bf16 checkpoints per training, routes and generations."""
    disk = plan(paper_config, "table5").disk
    prior_gb = 20000 * 2 * 26 * 64 * 4 / 1e9  # 20000 x 2 x 26 x 64 float32 (F.7)
    assert disk.priors == pytest.approx(6 * prior_gb)  # two base priors, each with two shuffles
    assert disk.megatron_checkpoints == disk.hf_checkpoints == pytest.approx(24 * MOONLIGHT_WEIGHTS_GB)
    assert disk.megatron_bases == disk.base_models == pytest.approx(MOONLIGHT_WEIGHTS_GB)
    assert disk.routes == pytest.approx(20 * 5000 * 26 * (6 + 64) * 2 / 1e9)
    assert disk.generations == pytest.approx(24 * expected_tokens(0.02) * 4.0 / 1e9)
    assert disk.generations_bound == pytest.approx(24 * RESPONSES * 5 * 8192 * 4.0 / 1e9)
    assert disk.training_work == pytest.approx(2 * MOONLIGHT_STATE_GB)  # a save beside the one before


@pytest.mark.slow
def test_makespan_on_n_nodes(paper_config):
    """Between the billed node-hours spread over every node and running everything one after another."""
    rows = {"openr1math": 94000}
    on_16 = plan(paper_config, "all", rows)
    on_32 = plan(paper_config, "all", rows, nodes=32)
    assert on_16.nodes == 16
    assert on_16.makespan.central >= on_16.node_hours * 3600 / 16
    assert on_32.makespan.central <= on_16.makespan.central
    assert on_16.makespan.low <= on_16.makespan.central <= on_16.makespan.high
    assert on_16.makespan.central <= sum(job.wall.central for job in on_16.jobs)
    with pytest.raises(UserInputError, match="--nodes 8: .* needs 16 node"):
        plan(paper_config, "table5", nodes=8)


def test_shared_trainings_count_once(paper_config):
    # figure3 plots exactly table5's runs: together they cost what one of them costs, plus one figure.
    paper_config["tables"] = {"table5": paper_config["tables"]["table5"]}
    paper_config["figures"] = {"figure3": paper_config["figures"]["figure3"]}
    both = by_name(plan(paper_config, "all"))
    alone = by_name(plan(paper_config, "table5"))
    assert both["train_megatron"].jobs == 24
    assert {name: c for name, c in both.items() if name not in ("figure_data", "figure")} == alone


def test_items_per_benchmark_caps_generation(toy_config):
    # Toy overlay: 8 items of each of the 12 benchmarks, 2 repeats of 48 tokens.
    assert generation_token_bound(toy_config) == 12 * 8 * 2 * 48
    assert generation_tokens(toy_config).high <= generation_token_bound(toy_config)  # none past the cap


def test_missing_rows_name_the_corpus(paper_config):
    with pytest.raises(UserInputError, match="openr1math"):
        plan(paper_config, "all")


def test_rows_of_an_unknown_corpus_are_refused(paper_config):
    with pytest.raises(UserInputError, match="'nope'"):
        plan(paper_config, "table5", {"nope": 10})


def test_unknown_target(paper_config):
    with pytest.raises(UserInputError, match="unknown target 'table99'"):
        plan(paper_config, "table99")


def test_an_estimate_out_of_order_is_refused(paper_config):
    paper_config["compute"]["storage_gb_per_second"] = {"low": 3.0, "central": 1.0, "high": 0.3}
    with pytest.raises(UserInputError, match="storage_gb_per_second: expected low <= central <= high"):
        plan(paper_config, "table5")


def test_cli_prints_the_plan(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "table5"]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out
    trainings = next(line for line in out.splitlines() if line.startswith("train_megatron "))
    assert trainings.split()[:3] == ["train_megatron", "24", "128"]
    low, high = trainings.split()[4].split("-")
    assert float(low) < float(trainings.split()[3]) < float(high)
    assert any(line.startswith("CPU rule ") for line in out.splitlines())
    assert next(line for line in out.splitlines() if line.startswith("disk: "))
    assert "makespan on 16 nodes: " in out
    assert "MFU 0.25 (range 0.10-0.35) of 989 TFLOP/s" in out
    assert "generations: assumed 2500 (range 1000-6000) decoded tokens/s per GPU" in out
    assert "calibrate: --step-seconds MODEL=S" in out
    assert out.rstrip().splitlines()[-1].startswith("source: estimate")
    assert main(["plan", "table5", "--step-seconds", "moonlight=3.5", "--decode-rate", "4000"]) == 0
    assert "trainings of moonlight: measured 3.5 s per step" in capsys.readouterr().out
    assert main(["plan", "table5", "--nodes", "32"]) == 0
    assert "makespan on 32 nodes: " in capsys.readouterr().out


@pytest.mark.slow
def test_cli_defaults_openr1math_to_the_papers_count(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "all"]) == 0
    out = capsys.readouterr().out
    assert "note: openr1math: 94000" in out
    assert "openr1math=94000" in out
    assert main(["plan", "all", "--rows", "openr1math=90000"]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out
    assert "openr1math=90000" in out


def test_cli_unknown_target_is_one_line(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "table99"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown target 'table99'")
    with pytest.raises(SystemExit):
        main(["plan", "table5", "--nodes", "0"])
    assert "expected a whole number of nodes" in capsys.readouterr().err


def test_hand_figures_are_the_configs(paper_config):
    """The figures this file computes by hand are the shipped config's (else the hand sums drift)."""
    tokens = paper_config["compute"]["benchmark_tokens"]
    assert {name: (spec["rows"], tokens[name]["prompt"], tokens[name]["response"])
            for name, spec in paper_config["benchmarks"].items()} == ITEMS  # fmt: skip
    assert paper_config["compute"]["total_parameters_billion"]["moonlight"] == 16.0
    assert math.isclose(paper_config["compute"]["responses_at_cap"]["central"], 0.02)
