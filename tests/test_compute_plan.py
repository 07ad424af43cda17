"""The compute plan against hand computations from the shipped config's figures.

Hand figures (config.yaml): 5 epochs, global batch 128, sequence length 8192, 16 nodes of
8 GPUs; Moonlight 3.0e9 active parameters, 27 layers of 16 heads with 192 + 128 query/key and
value dimensions; 25 % (10-35 %) of 989 TFLOP/s; 2500 (1000-6000) decoded tokens/s per GPU;
5 repeats of 8192 new tokens over the twelve benchmarks' 33,052 items.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from workflow_scripts.cli import main
from workflow_scripts.compute_plan import (
    FORWARD,
    TRAIN,
    Calibration,
    flops_per_token,
    generation_tokens,
    implied_mfu,
    plan,
    render,
    target_closure,
    training_tokens,
)
from workflow_scripts.errors import UserInputError

EFFECTIVE_FLOPS_PER_GPU_SECOND = 0.25 * 989e12
# Per token and layer a forward pass scores and weighs 8192 / 2 positions on average (causal).
MOONLIGHT_ATTENTION_FORWARD = 27 * 2 * 16 * (192 + 128) * 8192 / 2
MOONLIGHT_TRAIN_FLOPS = 6 * 3.0e9 + 3 * MOONLIGHT_ATTENTION_FORWARD
MOONLIGHT_FORWARD_FLOPS = 2 * 3.0e9 + MOONLIGHT_ATTENTION_FORWARD
MOONLIGHT_TRAINING_GPU_HOURS = (
    MOONLIGHT_TRAIN_FLOPS * (782 * 128 * 8192) / EFFECTIVE_FLOPS_PER_GPU_SECOND / 3600
)
MOONLIGHT_PRIOR_GPU_HOURS = MOONLIGHT_FORWARD_FLOPS * (20000 * 8192) / EFFECTIVE_FLOPS_PER_GPU_SECOND / 3600
GENERATION_GPU_HOURS = 33052 * 5 * 8192 / 2500 / 3600


def by_name(result) -> dict:
    return {job_class.name: job_class for job_class in result.classes}


def test_all_needs_119_trainings(paper_config):
    """The paper's cells; the claims' expert-bias sensitivity (claims.py FROZEN_BIAS) is toy-only."""
    closure = target_closure(paper_config, "all")
    assert len(closure.trainings) == 119
    assert by_name(plan(paper_config, "all", {"openr1math": 94000}))["trainings"].jobs == 119


def test_a_20000_row_corpus_takes_782_steps(paper_config):
    assert training_tokens(paper_config, 20000) == 782 * 128 * 8192


def test_one_moonlight_training_by_hand(paper_config):
    trainings = by_name(plan(paper_config, "figure1"))["trainings"]
    assert MOONLIGHT_TRAINING_GPU_HOURS == pytest.approx(19.711, abs=1e-3)
    assert trainings.jobs == 1
    assert trainings.gpus_per_job == 128
    assert trainings.gpu_hours == pytest.approx(MOONLIGHT_TRAINING_GPU_HOURS)
    assert trainings.node_hours == pytest.approx(MOONLIGHT_TRAINING_GPU_HOURS / 8)
    assert trainings.longest_job_hours == pytest.approx(MOONLIGHT_TRAINING_GPU_HOURS / 128)


def test_table5_by_hand(paper_config):
    result = plan(paper_config, "table5")
    classes = by_name(result)
    # 2 corpora x (rpb x 3 seeds + 3 shuffled-prior conditions x 3 seeds), all Moonlight on 20k rows.
    assert classes["trainings"].gpu_hours == pytest.approx(24 * MOONLIGHT_TRAINING_GPU_HOURS)
    # Two base priors; the four shuffled ones are CPU permutations.
    assert classes["priors"].jobs == 2
    assert classes["priors"].gpu_hours == pytest.approx(2 * MOONLIGHT_PRIOR_GPU_HOURS)
    probe_gpu_hours = MOONLIGHT_FORWARD_FLOPS * 5000 / EFFECTIVE_FLOPS_PER_GPU_SECOND / 3600
    assert classes["probes"].jobs == 20
    assert classes["probes"].gpu_hours == pytest.approx(20 * probe_gpu_hours)
    assert classes["generations"].jobs == 24
    assert classes["generations"].gpus_per_job == 8
    assert classes["generations"].gpu_hours == pytest.approx(24 * GENERATION_GPU_HOURS)
    total = 24 * MOONLIGHT_TRAINING_GPU_HOURS + 2 * MOONLIGHT_PRIOR_GPU_HOURS
    total += 20 * probe_gpu_hours + 24 * GENERATION_GPU_HOURS
    assert result.jobs == 24 + 2 + 20 + 24
    assert result.gpu_hours == pytest.approx(total)
    assert result.node_hours == pytest.approx(total / 8)


def test_attention_at_8k_adds_a_fifth_to_moonlight_and_half_to_qwen3(paper_config):
    """6N alone leaves out the attention scores, which grow with the 8192-token sequences."""
    assert flops_per_token(paper_config, "moonlight", TRAIN) == pytest.approx(MOONLIGHT_TRAIN_FLOPS)
    assert flops_per_token(paper_config, "moonlight", FORWARD) == pytest.approx(MOONLIGHT_FORWARD_FLOPS)
    assert MOONLIGHT_TRAIN_FLOPS / (6 * 3.0e9) == pytest.approx(1.189, abs=1e-3)
    qwen3 = 6 * 3.3e9 + 3 * 48 * 2 * 32 * (128 + 128) * 8192 / 2
    assert flops_per_token(paper_config, "qwen3_30b", TRAIN) == pytest.approx(qwen3)
    assert qwen3 / (6 * 3.3e9) == pytest.approx(1.488, abs=1e-3)


def test_every_class_states_its_range(paper_config):
    """Trainings span 10-35 % MFU around the 25 % estimate, generations 1000-6000 tokens/s per GPU."""
    trainings = by_name(plan(paper_config, "figure1"))["trainings"]
    assert trainings.gpu_hours_low == pytest.approx(MOONLIGHT_TRAINING_GPU_HOURS * 0.25 / 0.35)
    assert trainings.gpu_hours_high == pytest.approx(MOONLIGHT_TRAINING_GPU_HOURS * 0.25 / 0.10)
    generations = by_name(plan(paper_config, "table5"))["generations"]
    assert generations.gpu_hours_low == pytest.approx(24 * GENERATION_GPU_HOURS * 2500 / 6000)
    assert generations.gpu_hours_high == pytest.approx(24 * GENERATION_GPU_HOURS * 2500 / 1000)


def test_a_measured_step_time_prices_the_trainings_of_its_model(paper_config):
    """A first job's seconds per step (Bridge's log) replace the MFU guess: steps x seconds x GPUs."""
    result = plan(paper_config, "table5", calibration=Calibration({"moonlight": 3.5}, decode_rate=4000))
    classes = by_name(result)
    measured = 24 * 782 * 3.5 * 128 / 3600
    assert classes["trainings"].gpu_hours == classes["trainings"].gpu_hours_low == pytest.approx(measured)
    assert classes["trainings"].gpu_hours_high == pytest.approx(measured)
    assert classes["generations"].gpu_hours == pytest.approx(24 * 33052 * 5 * 8192 / 4000 / 3600)
    mfu = MOONLIGHT_TRAIN_FLOPS * 128 * 8192 / (3.5 * 128 * 989e12)
    assert implied_mfu(paper_config, "moonlight", 3.5) == pytest.approx(mfu)
    text = render(result)
    assert f"trainings of moonlight: measured 3.5 s per step (MFU {mfu:.2f})" in text
    assert "generations: measured 4000 decoded tokens/s per GPU" in text
    with pytest.raises(UserInputError, match="'moonlite'"):
        plan(paper_config, "table5", calibration=Calibration({"moonlite": 3.5}))


def test_shared_trainings_count_once(paper_config):
    # figure3 plots exactly table5's runs: together they cost what one of them costs.
    paper_config["tables"] = {"table5": paper_config["tables"]["table5"]}
    paper_config["figures"] = {"figure3": paper_config["figures"]["figure3"]}
    both = plan(paper_config, "all")
    assert by_name(both)["trainings"].jobs == 24
    assert both.classes == plan(paper_config, "table5").classes


def test_items_per_benchmark_caps_generation(toy_config):
    # Toy overlay: 8 items of each of the 12 benchmarks, 2 repeats of 48 tokens.
    assert generation_tokens(toy_config) == 12 * 8 * 2 * 48


def test_missing_rows_name_the_corpus(paper_config):
    with pytest.raises(UserInputError, match="openr1math"):
        plan(paper_config, "all")


def test_rows_of_an_unknown_corpus_are_refused(paper_config):
    with pytest.raises(UserInputError, match="'nope'"):
        plan(paper_config, "table5", {"nope": 10})


def test_unknown_target(paper_config):
    with pytest.raises(UserInputError, match="unknown target 'table99'"):
        plan(paper_config, "table99")


def test_cli_prints_the_plan(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan", "table5"]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out
    trainings = next(line for line in out.splitlines() if line.startswith("trainings "))
    assert trainings.split()[:2] == ["trainings", "24"]
    low, high = trainings.split()[4].split("-")
    assert float(low) < float(trainings.split()[3]) < float(high)
    assert "MFU 0.25 (range 0.10-0.35) of 989 TFLOP/s" in out
    assert "generations: assumed 2500 (range 1000-6000) decoded tokens/s per GPU" in out
    assert "calibrate: --step-seconds MODEL=S" in out
    assert out.rstrip().splitlines()[-1].startswith("source: estimate")
    assert main(["plan", "table5", "--step-seconds", "moonlight=3.5", "--decode-rate", "4000"]) == 0
    assert "trainings of moonlight: measured 3.5 s per step" in capsys.readouterr().out


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
