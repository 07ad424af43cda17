"""The cluster backend's pure parts: settings from the registry, spans, chat dataset, resume, launch line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.dag import TRAIN_SPEC as SPEC
from tests.dag import job_conditions, toy_rows, toy_tokenizer
from workflow_scripts.errors import UserInputError
from workflow_scripts.modeling.objective import Objective
from workflow_scripts.modeling.tokenizer import answer_span_mask
from workflow_scripts.train.megatron import resume
from workflow_scripts.train.megatron.dataset import TRAINING_FILE, write_chat_dataset
from workflow_scripts.train.megatron.launch import torchrun_command
from workflow_scripts.train.megatron.settings import (
    Parallelism,
    model_settings,
    router_settings,
    run_settings,
)
from workflow_scripts.train.megatron.spans import SpanTable, batch_span_ids, gather_prior, row_ids

RPB_FAMILY = {"rpb", "rpb_hard"}


@pytest.mark.parametrize("model", ["moonlight", "deepseek_v2_lite", "qwen3_30b"])
def test_every_condition_sets_balancing_and_bias_update_explicitly(paper_config, model):
    training = paper_config["training"]
    rate = training["expert_bias_update_rate"]
    jobs = job_conditions(paper_config)
    for name, condition in paper_config["conditions"].items():
        objective = Objective.from_condition(jobs[name], expert_bias_update_rate=rate)
        fields = model_settings(objective, training)
        intervention = condition["intervention"]
        if intervention == "load_balancing":
            assert fields["moe_router_load_balancing_type"] == "aux_loss"
            assert fields["moe_aux_loss_coeff"] == condition["params"]["coefficient"]
        else:
            assert fields["moe_router_load_balancing_type"] == "none" and fields["moe_aux_loss_coeff"] == 0.0
        expected_z = condition["params"]["coefficient"] if intervention == "z_loss" else None
        assert fields["moe_z_loss_coeff"] == expected_z, name
        own_rate = condition.get("settings", {}).get("expert_bias_update_rate", rate)
        assert fields["moe_router_bias_update_rate"] == (0.0 if intervention in RPB_FAMILY else own_rate), (
            name
        )
        assert fields["moe_router_fusion"] is False and fields["calculate_per_token_loss"] is True
        assert fields["tensor_model_parallel_size"] == 2 and fields["expert_model_parallel_size"] == 8
        assert fields["sequence_parallel"] is True and fields["pipeline_model_parallel_size"] == 1
        assert fields["recompute_modules"] == ["layernorm", "moe", "moe_act", "core_attn"]
        assert fields["seq_length"] == 8192


def test_condition_settings_override_the_config_for_that_condition(paper_config):
    conditions = paper_config["conditions"]
    frozen = Objective.from_condition(conditions["sft_frozen_bias"], expert_bias_update_rate=1e-3)
    kept = Objective.from_condition(conditions["sft"], expert_bias_update_rate=1e-3)
    assert (frozen.expert_bias_update_rate, kept.expert_bias_update_rate) == (0.0, 1e-3)
    selection_only = Objective.from_condition(conditions["rpb_selection_only"], bias_in_gate_weights=True)
    assert selection_only.bias_in_gate_weights is False and selection_only.beta == 1.0
    assert Objective.from_condition(conditions["rpb"], bias_in_gate_weights=True).bias_in_gate_weights is True
    with pytest.raises(ValueError, match="freeze the router bias-update rule"):
        Objective.from_condition({**conditions["rpb"], "settings": {"expert_bias_update_rate": 1e-3}})
    with pytest.raises(ValueError, match="soft RPB only"):
        Objective.from_condition({**conditions["rpb_hard"], "settings": {"bias_in_gate_weights": False}})


def test_run_settings_take_every_value_from_the_registry(paper_config):
    training = paper_config["training"]
    sections = run_settings(training, num_rows=20_000, seed=43)
    assert sections["train"] == {"train_iters": 782, "global_batch_size": 128, "micro_batch_size": 1}
    assert sections["optimizer"]["lr"] == 1e-5 and sections["optimizer"]["min_lr"] == 1e-6
    assert (sections["optimizer"]["adam_beta1"], sections["optimizer"]["adam_beta2"]) == (0.9, 0.95)
    assert sections["optimizer"]["weight_decay"] == 0.1 and sections["optimizer"]["clip_grad"] == 1.0
    assert sections["scheduler"] == {
        "lr_decay_style": "cosine",
        "lr_warmup_iters": 40,
        "lr_decay_iters": 782,
        "start_weight_decay": 0.1,  # Megatron's scheduler rewrites the decay from these every step
        "end_weight_decay": 0.1,
        "weight_decay_incr_style": "constant",
    }
    assert sections["checkpoint"]["save_interval"] == 100 and sections["checkpoint"]["async_save"] is False
    assert sections["rng"] == {"seed": 43} and sections["validation"]["eval_iters"] == 0
    training["schedule"]["lr_max"] = 3e-5
    training["epochs"] = 2
    changed = run_settings(training, num_rows=20_000, seed=43)
    assert changed["optimizer"]["lr"] == 3e-5 and changed["train"]["train_iters"] == 313


def test_packing_is_refused(paper_config):
    paper_config["training"]["packing"] = True
    with pytest.raises(UserInputError, match="packing"):
        run_settings(paper_config["training"], 10, 0)


def test_parallel_layout_of_f1_and_its_limits(paper_config):
    layout = Parallelism.from_config(paper_config["training"]["parallelism"])
    assert (layout.world_size, layout.data_parallel) == (128, 64)
    for key, value, message in [
        ("pipeline", 2, "pipeline"),
        ("context", 2, "context"),
        ("sequence_parallel", False, "sequence_parallel"),
        ("expert", 48, "expert"),
    ]:
        block = dict(paper_config["training"]["parallelism"], **{key: value})
        with pytest.raises(UserInputError, match=f"training.parallelism.{message}"):
            Parallelism.from_config(block)


def test_router_settings_of_a_plain_condition():
    assert router_settings(Objective()) == {
        "moe_router_load_balancing_type": "none",
        "moe_aux_loss_coeff": 0.0,
        "moe_z_loss_coeff": None,
        "moe_router_bias_update_rate": 0.0,
        "moe_router_fusion": False,
        "moe_router_dtype": "fp32",
        "moe_expert_capacity_factor": None,
    }


@pytest.fixture(scope="module")
def tokenizer():
    return toy_tokenizer()


def _table(tokenizer, prompts, answers, max_length=64):
    return SpanTable(
        lambda row: answer_span_mask(tokenizer, prompts[row], answers[row], max_length), len(prompts)
    )


def test_batch_spans_are_the_local_backends_spans_of_each_row(tokenizer):
    prompts, answers = toy_rows(6)
    table = _table(tokenizer, prompts, answers)
    rows = np.array([4, 1])
    encoded = [answer_span_mask(tokenizer, prompts[r], answers[r], 64) for r in rows]
    seq = max(len(ids) for ids, _ in encoded) + 3  # Bridge pads past the longest row
    tokens = torch.full((2, seq), tokenizer.eos_token_id)
    for b, (ids, _) in enumerate(encoded):
        tokens[b, : len(ids) - 1] = torch.tensor(ids[:-1])  # tokens = the sequence without its last token
    spans = batch_span_ids(tokens, rows, table)
    for b, (ids, row_spans) in enumerate(encoded):
        assert spans[b, : len(ids) - 1].tolist() == row_spans[:-1]
        assert (spans[b, len(ids) :] == -1).all()
        assert set(row_spans) == {-1, 0, 1}


def test_a_token_mismatch_names_the_row(tokenizer):
    prompts, answers = toy_rows(3)
    table = _table(tokenizer, prompts, answers)
    ids, _ = answer_span_mask(tokenizer, prompts[2], answers[2], 64)
    tokens = torch.tensor([ids[:-1]])
    tokens[0, 5] = (tokens[0, 5] + 1) % 300
    with pytest.raises(ValueError, match="split row 2: the chat dataset's token 5"):
        batch_span_ids(tokens, np.array([2]), table)


def test_row_ids_from_metadata_and_their_errors():
    assert row_ids([{"prior_row": 3}, {"prior_row": 0}], 5).tolist() == [3, 0]
    with pytest.raises(ValueError, match="sample 1 has no 'prior_row'"):
        row_ids([{"prior_row": 3}, {}], 5)
    with pytest.raises(ValueError, match="prior_row 9 outside the split's 5 rows"):
        row_ids([{"prior_row": 9}], 5)


def test_gather_prior_reads_the_rows_of_the_memory_map(tmp_path):
    prior = np.random.default_rng(0).random((6, 2, 3, 4)).astype(np.float32)
    np.save(tmp_path / "prior.npy", prior)
    mapped = np.load(tmp_path / "prior.npy", mmap_mode="r")
    got = gather_prior(mapped, np.array([5, 0, 5]))
    assert got.dtype == torch.float32 and torch.equal(got, torch.from_numpy(prior[[5, 0, 5]]))


def test_chat_dataset_lines_carry_the_row_id(tmp_path):
    prompts, answers = toy_rows(3)
    path = write_chat_dataset(prompts, answers, tmp_path)
    assert path == tmp_path / TRAINING_FILE
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["prior_row"] for line in lines] == [0, 1, 2]
    assert lines[1]["messages"] == [
        {"role": "user", "content": prompts[1]},
        {"role": "assistant", "content": answers[1]},
    ]


def _checkpoint(save, iteration, complete=True):
    folder = resume.iteration_dir(save, iteration)
    folder.mkdir(parents=True)
    (folder / "shard_0.distcp").write_text("w")
    if complete:
        for marker in resume.COMPLETE_MARKERS:
            (folder / marker).write_text("x")
        (folder / "run_config.yaml").write_text(RUN_CONFIG)
        write_digest_list(folder)
    return folder


def write_digest_list(folder):
    """What the ranks' ``on_checkpoint_save`` callback writes (``entry.checkpoint_digests``), here in one."""
    from workflow_scripts.records.sha256sums import digests_of, write_list

    write_list(folder / resume.DIGEST_LIST, digests_of(folder, resume.checkpoint_files(folder)))


def bridge_checkpoint(save, iteration):
    """A checkpoint folder laid out as Bridge's torch_dist save of two ranks leaves it, with its list."""
    folder = resume.iteration_dir(save, iteration)
    (folder / "tokenizer").mkdir(parents=True)
    for rank in range(2):
        (folder / f"__{rank}_0.distcp").write_bytes(bytes(range(256)) * (64 + rank) + iteration.to_bytes(4))
    for name in (".metadata", "common.pt", "metadata.json", "train_state.pt", "tokenizer/tokenizer.json"):
        (folder / name).write_bytes(f"{name} {iteration}".encode())
    (folder / "run_config.yaml").write_text(RUN_CONFIG)
    write_digest_list(folder)
    return folder


def _flip(path, count=64):
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + count] = bytes(b ^ 0xFF for b in data[middle : middle + count])
    path.write_bytes(bytes(data))


DAMAGES = {
    "flipped bytes": (
        lambda f: _flip(f / "__1_0.distcp"),
        "1 file(s) differ from their recorded sha256 (__1_0.distcp:",
    ),
    "truncated shard": (
        lambda f: (f / "__0_0.distcp").write_bytes((f / "__0_0.distcp").read_bytes()[:1000]),
        "differ from their recorded sha256 (__0_0.distcp:",
    ),
    "missing file": (lambda f: (f / "common.pt").unlink(), "1 listed file(s) are missing (common.pt)"),
    "extra file": (lambda f: (f / "__2_0.distcp").write_bytes(b"x"), "1 file(s) are not in its digest list"),
    "truncated digest list": (
        lambda f: (f / resume.DIGEST_LIST).write_text((f / resume.DIGEST_LIST).read_text()[:100]),
        "its digest list sha256sums.txt is cut short",
    ),
    "malformed digest list": (
        lambda f: (f / resume.DIGEST_LIST).write_text("not a digest\n"),
        "its digest list sha256sums.txt is malformed at line 1",
    ),
}


def launch_training(work, monkeypatch):
    """``train megatron-launch -- train megatron ... --work WORK`` as the rule runs it, torchrun recorded."""
    import subprocess

    from workflow_scripts.cli import main
    from workflow_scripts.train.megatron import launch

    started = []
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(
        launch.subprocess,
        "run",
        lambda command: started.append(command) or subprocess.CompletedProcess(command, 0),
    )
    entry = ["train", "megatron", "--split", "train.parquet", "--work", str(work), "--moe-layers", "2"]
    assert main(["train", "megatron-launch", "--nodes", "1", "--gpus-per-node", "2", "--", *entry]) == 0
    assert len(started) == 1 and started[0][-len(entry) :] == entry
    return started


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_the_launch_moves_a_damaged_checkpoint_aside_and_the_run_resumes_the_one_before(
    tmp_path, capsys, monkeypatch, kind
):
    """A damaged newest checkpoint is named with the reason, moved out of Bridge's save folder, and
    the ranks resume the previous one (Bridge keeps it until the newest's digest list is written)."""
    damage, reason = DAMAGES[kind]
    work = tmp_path / "work"
    save = work / resume.CHECKPOINTS
    bridge_checkpoint(save, 100)
    newest = bridge_checkpoint(save, 200)
    assert resume.damage(newest) is None and resume.latest_complete(save) == 200
    damage(newest)
    assert reason in resume.damage(newest)
    launch_training(work, monkeypatch)
    stderr = capsys.readouterr().err
    assert f"not resuming from {newest}: " in stderr and reason in stderr
    assert f"moved to {work / resume.DAMAGED / newest.name}" in stderr
    assert f"resuming from {resume.iteration_dir(save, 100)}: its files match their digests" in stderr
    assert not newest.exists() and (work / resume.DAMAGED / newest.name).is_dir()
    assert resume.latest_complete(save) == 100, "what every rank then resumes from"


def test_with_every_checkpoint_damaged_the_run_starts_from_the_base(tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    save = work / resume.CHECKPOINTS
    for iteration in (100, 200):
        _flip(bridge_checkpoint(save, iteration) / "__0_0.distcp")
    launch_training(work, monkeypatch)
    stderr = capsys.readouterr().err
    assert stderr.count("not resuming from") == 2
    assert f"no intact checkpoint is left in {save}: the run starts from the base" in stderr
    assert resume.latest_complete(save) is None


def test_the_launch_of_an_intact_run_changes_nothing(tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    folder = bridge_checkpoint(work / resume.CHECKPOINTS, 100)
    launch_training(work, monkeypatch)
    assert f"resuming from {folder}: its files match their digests" in capsys.readouterr().err
    assert resume.damage(folder) is None and not (work / resume.DAMAGED).exists()
    launch_training(tmp_path / "new", monkeypatch)  # a first start: nothing to check
    assert capsys.readouterr().err.count("resuming from") == 0


def test_a_checkpoint_killed_before_its_digest_list_is_not_complete(tmp_path):
    """The ranks write the list after Bridge's save; a kill in between leaves the previous checkpoint."""
    save = tmp_path / "checkpoints"
    bridge_checkpoint(save, 100)
    (bridge_checkpoint(save, 200) / resume.DIGEST_LIST).unlink()
    assert resume.latest_complete(save) == 100
    assert "it has no digest list (sha256sums.txt): the save was cut short" in resume.damage(
        resume.iteration_dir(save, 200)
    )


def test_the_ranks_share_the_hashing_by_bytes_and_cover_every_file_once(tmp_path):
    folder = bridge_checkpoint(tmp_path, 100)
    names = resume.checkpoint_files(folder)
    assert resume.DIGEST_LIST not in names and "tokenizer/tokenizer.json" in names
    for world in (1, 2, 3, 16):
        parts = resume.shares(folder, names, world)
        assert len(parts) == world and sorted(n for part in parts for n in part) == names
    first, second = resume.shares(folder, names, 2)
    assert "__1_0.distcp" in first and "__0_0.distcp" in second, "the two largest files on two ranks"


#: The shape of Bridge's run_config.yaml: ``ConfigContainer`` sections sorted by name, ``validation`` last.
RUN_CONFIG = (
    "_target_: megatron.bridge.training.config.ConfigContainer\n"
    "model:\n  num_layers: 2\nvalidation:\n  eval_iters: 0\n"
)


@pytest.mark.parametrize(
    "written",
    ["", RUN_CONFIG[:60], RUN_CONFIG.rsplit("validation", 1)[0], RUN_CONFIG[:-1]],
    ids=["empty", "cut mid-line", "cut before the last section", "no final newline"],
)
def test_a_run_config_that_rank_0_was_still_writing_is_not_complete(tmp_path, written):
    """Bridge writes run_config.yaml in place; a kill mid-write left an empty one, which no restart loads."""
    save = tmp_path / "checkpoints"
    _checkpoint(save, 100)
    killed = _checkpoint(save, 200)
    (killed / "run_config.yaml").write_text(written)
    assert not resume.is_complete(killed)
    assert resume.latest_complete(save) == 100


def test_resume_takes_the_newest_complete_checkpoint_never_a_half_written_one(tmp_path):
    save = tmp_path / "checkpoints"
    assert resume.latest_complete(save) is None
    _checkpoint(save, 100)
    _checkpoint(save, 200)
    _checkpoint(save, 300, complete=False)  # killed mid-save
    (save / resume.TRACKER).write_text("300\n")
    assert resume.latest_complete(save) == 200
    assert resume.record_start(tmp_path, None) == [0]
    assert resume.record_start(tmp_path, 200) == [0, 200]


def test_finish_moves_the_final_checkpoint_with_its_own_tracker(tmp_path):
    save, out = tmp_path / "checkpoints", tmp_path / "final"
    _checkpoint(save, 782)
    moved = resume.finish(save, out, 782)
    assert moved == out / "iter_0000782" and (moved / "train_state.pt").is_file()
    assert (out / resume.TRACKER).read_text() == "782\n"
    _checkpoint(save, 800, complete=False)
    with pytest.raises(RuntimeError, match="incomplete"):
        resume.finish(save, tmp_path / "other", 800)


def test_launch_line_runs_one_torchrun_per_node_with_a_c10d_rendezvous():
    entry = ["train", "megatron", "--seed", "42"]
    command = torchrun_command(16, 8, entry, "srun", head="gpu-a17", port=29500, job_id="991", cpus=96)
    # The step names its CPUs and GPUs: the plugin strips SRUN_CPUS_PER_TASK and the like, and
    # srun's default of one CPU per task would bind all eight ranks to one core.
    assert command[:6] == [
        "srun",
        "--nodes=16",
        "--ntasks=16",
        "--ntasks-per-node=1",
        "--cpus-per-task=96",
        "--gres=gpu:8",
    ]
    assert command[6:12] == [
        "torchrun",
        "--nnodes=16",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=gpu-a17:29500",
        "--rdzv-id=991",
    ]
    assert command[12:] == ["-m", "workflow_scripts", *entry]
    standalone = ["torchrun", "--standalone", "--nproc-per-node=8", "-m", "workflow_scripts", *entry]
    assert torchrun_command(1, 8, entry) == standalone
    # One node in a SLURM job: the executor's own step holds the job's CPUs and GPUs already.
    assert torchrun_command(1, 8, entry, "srun", head="gpu-a17", job_id="991", cpus=96) == standalone
    with pytest.raises(UserInputError, match="SLURM allocation"):
        torchrun_command(2, 8, entry)
    with pytest.raises(UserInputError, match="CPUs per task"):
        torchrun_command(2, 8, entry, head="gpu-a17", job_id="991")


def test_a_container_wraps_each_torchrun_and_leaves_srun_on_the_host():
    """NVIDIA's image has no SLURM: srun starts the step outside it, torchrun runs inside it."""
    entry = ["train", "megatron-rendezvous", "--out", "check.txt"]
    image = "envs/megatron.sif"
    command = torchrun_command(2, 8, entry, head="n1", job_id="7", cpus=96, image=image)
    assert command[0] == "srun" and "srun" not in command[1:]
    container = command.index("apptainer")
    assert command[container : container + 5] == ["apptainer", "exec", "--nv", image, "torchrun"]
    assert all(argument.startswith("--") for argument in command[1:container])
    standalone = torchrun_command(1, 2, entry, image=image)
    assert standalone[:5] == ["apptainer", "exec", "--nv", image, "torchrun"]


@pytest.mark.slow
def test_launch_check_without_slurm_runs_torchrun_standalone_and_reports_every_rank(tmp_path):
    """The launch line end to end on one machine: two ranks join, rank 0 writes who joined."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    out = tmp_path / "launch_check.txt"
    command = [sys.executable, "-m", "workflow_scripts", "train", "megatron-launch", "--nodes", "1"]
    command += ["--gpus-per-node", "2", "--", "train", "megatron-rendezvous", "--out", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = out.read_text().splitlines()
    assert lines[0].startswith("world 2 rendezvous ") and lines[0].endswith(" backend gloo")
    assert [line.split()[:6] for line in lines[1:]] == [
        ["rank", "0", "node_rank", "0", "local_rank", "0"],
        ["rank", "1", "node_rank", "0", "local_rank", "1"],
    ]


def test_claim_keeps_a_work_folder_of_the_same_run_and_discards_another(paper_config, tmp_path, capsys):
    from workflow_scripts.cli import main

    inputs = {name: tmp_path / name for name in ("hf", "megatron", "dataset")}
    for folder in inputs.values():
        folder.mkdir()
        (folder / "weights").write_bytes(b"w")
    split, work = tmp_path / "train.parquet", tmp_path / "work"
    split.write_bytes(b"rows of the first split")
    argv = [
        "train",
        "megatron-claim",
        "--hf-base",
        str(inputs["hf"]),
        "--megatron-base",
        str(inputs["megatron"]),
    ]
    argv += [
        "--dataset",
        str(inputs["dataset"]),
        "--split",
        str(split),
        "--condition",
        '{"intervention": "none"}',
    ]
    argv += ["--training", json.dumps(paper_config["training"]), "--seed", "42", "--work", str(work)]
    assert main(argv) == 0
    checkpoint = resume.iteration_dir(work / "checkpoints", 100)
    checkpoint.mkdir(parents=True)
    assert main(argv) == 0 and checkpoint.is_dir(), "the same run keeps its checkpoints"
    assert "starting fresh" not in capsys.readouterr().err
    split.write_bytes(b"rows of another split")  # e.g. train_rows changed after a kill
    assert main(argv) == 0
    assert not checkpoint.exists() and (work / resume.KEY_FILE).is_file()
    assert f"starting fresh: {work} was written for a different split" in capsys.readouterr().err


def test_claim_refuses_a_folder_it_did_not_make_and_deletes_nothing(paper_config, tmp_path, capsys):
    """``--work results/evals/moonlight`` once deleted every evaluation of the model."""
    from workflow_scripts.cli import main

    evaluations = tmp_path / "results" / "evals" / "moonlight"
    scores = evaluations / "math20k" / "sft" / "s42" / "scores.parquet"
    scores.parent.mkdir(parents=True)
    scores.write_bytes(b"scores")
    for name in ("hf", "megatron", "dataset"):
        (tmp_path / name).mkdir()
    (tmp_path / "train.parquet").write_bytes(b"rows")
    argv = ["train", "megatron-claim", "--hf-base", str(tmp_path / "hf"), "--megatron-base"]
    argv += [str(tmp_path / "megatron"), "--dataset", str(tmp_path / "dataset"), "--split"]
    argv += [str(tmp_path / "train.parquet"), "--condition", '{"intervention": "none"}', "--training"]
    argv += [json.dumps(paper_config["training"]), "--seed", "42", "--work", str(evaluations)]
    assert main(argv) == 2
    assert f"{evaluations} is not empty and holds no {resume.KEY_FILE}" in capsys.readouterr().err
    assert scores.read_bytes() == b"scores" and not (evaluations / resume.KEY_FILE).exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert resume.claim(empty, "{}") is False and (empty / resume.KEY_FILE).read_text() == "{}"


def test_import_refuses_a_tokenizer_larger_than_the_models_vocabulary(tmp_path, capsys):
    """Checked before Megatron-Bridge loads: Bridge itself would stop at training start-up, on every rank."""
    from dataclasses import replace

    from workflow_scripts.cli import main
    from workflow_scripts.modeling.toy import build_toy_model, save_toy_base

    tokenizer = toy_tokenizer()
    base, out = tmp_path / "base", tmp_path / "megatron"
    save_toy_base(
        build_toy_model("qwen3_moe", replace(SPEC, first_dense_layers=0), tokenizer, 0), tokenizer, base
    )
    tokenizer.add_tokens(["<added_after_pretraining>"])
    tokenizer.save_pretrained(base)
    vocab = json.loads((base / "config.json").read_text())["vocab_size"]
    argv = ["train", "megatron-import", "--hf-base", str(base), "--out", str(out)]
    assert main([*argv, "--provenance", str(tmp_path / "p.json")]) == 2 and not out.exists()
    message = f"the tokenizer has {vocab + 1} tokens, the model's vocab_size (config.json) {vocab}"
    assert message in capsys.readouterr().err
