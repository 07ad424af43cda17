"""The Megatron run's start on a cluster: the launch argv in a job, the claim's one hashing, resume points.

No SLURM and no Megatron here: the scheduler commands are small scripts on ``PATH`` that answer
as ``squeue``/``scontrol`` do and record what ``srun`` was asked; the real cluster runs the same
launch in tests/test_slurm_cluster.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workflow_scripts import cli
from workflow_scripts.commands import recorded_arguments
from workflow_scripts.errors import UserInputError
from workflow_scripts.train.megatron import resume

# ``scontrol show job --oneliner`` of a 2-node job with 96 CPUs per task, as slurm 22.05 prints it.
JOB_RECORD = (
    "JobId=7 JobName=rpb UserId=ci(0) JobState=RUNNING NodeList=n[1-2] BatchHost=n1 NumNodes=2 "
    "NumCPUs=256 NumTasks=2 CPUs/Task=96 ReqB:S:C:T=0:0:*:* TRES=cpu=256,mem=32000M,node=2,gres/gpu=16"
)


def fake_scheduler(folder: Path) -> Path:
    """``squeue``, ``scontrol`` and ``srun`` stand-ins; ``srun`` writes its argv to ``srun.argv``."""
    folder.mkdir()
    scripts = {
        "squeue": 'echo "n[1-2]"',
        "scontrol": (
            'if [ "$2" = hostnames ]; then printf "n1\\nn2\\n"; '
            f"elif [ \"$2\" = job ]; then echo '{JOB_RECORD}'; else exit 2; fi"
        ),
        "srun": f'printf "%s\\n" "$@" > {folder / "srun.argv"}',
    }
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return folder


def test_launch_in_a_job_gives_the_step_the_allocations_cpus_gpus_and_image(tmp_path):
    """The plugin strips SLURM_CPUS_PER_TASK: the CPUs come from the scheduler's record of the job."""
    fake = fake_scheduler(tmp_path / "bin")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "SRUN_"))}
    env.update(SLURM_JOB_ID="7", PATH=f"{fake}{os.pathsep}{env['PATH']}")
    command = [sys.executable, "-m", "workflow_scripts", "train", "megatron-launch", "--nodes", "2"]
    command += ["--gpus-per-node", "8", "--container", "images/megatron.sif"]
    command += ["--", "train", "megatron-rendezvous", "--out", "check.txt"]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (fake / "srun.argv").read_text().splitlines() == [
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=96",
        "--gres=gpu:8",
        "apptainer",
        "exec",
        "--nv",
        "images/megatron.sif",
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=n1:29507",  # 29500 + job 7: jobs sharing a head node listen on their own ports
        "--rdzv-id=7",
        "-m",
        "workflow_scripts",
        "train",
        "megatron-rendezvous",
        "--out",
        "check.txt",
    ]


def test_a_checkpoint_without_its_run_config_is_not_complete(tmp_path):
    """Rank 0 writes run_config.yaml after train_state.pt and the tracker; export reads it."""
    save = tmp_path / "checkpoints"
    for iteration in (100, 200):
        folder = resume.iteration_dir(save, iteration)
        folder.mkdir(parents=True)
        for marker in (".metadata", "train_state.pt", resume.DIGEST_LIST):
            (folder / marker).write_text("x")
        (folder / "run_config.yaml").write_text("model: {num_layers: 2}\nvalidation: {eval_iters: 0}\n")
    killed = resume.iteration_dir(save, 200)
    (killed / "run_config.yaml").unlink()  # killed between train_state.pt and run_config.yaml
    (save / resume.TRACKER).write_text("200\n")
    assert not resume.is_complete(killed)
    assert resume.latest_complete(save) == 100
    with pytest.raises(RuntimeError, match="incomplete"):
        resume.finish(save, tmp_path / "final", 200)


def complete_checkpoint(save: Path, iteration: int) -> Path:
    folder = resume.iteration_dir(save, iteration)
    folder.mkdir(parents=True)
    for marker in (".metadata", "train_state.pt", "__0_0.distcp", resume.DIGEST_LIST):
        (folder / marker).write_text(marker)
    (folder / "run_config.yaml").write_text("model: {num_layers: 2}\nvalidation: {eval_iters: 0}\n")
    return folder


def test_finish_killed_half_way_is_finished_by_the_rerun_from_the_kept_checkpoint(tmp_path):
    """A kill between finish's two renames once left the only final checkpoint in ``<out>.staging``."""
    save, out = tmp_path / "work" / "checkpoints", tmp_path / "trained"
    final = complete_checkpoint(save, 200)
    staging = out.with_name(out.name + ".staging")
    (staging / final.name).mkdir(parents=True)  # a kill after part of the first finish
    (staging / final.name / "__0_0.distcp").write_text("cut")
    assert resume.latest_complete(save) == 200, "the rerun finds the final checkpoint where training left it"
    moved = resume.finish(save, out, 200)
    assert moved == out / final.name and not staging.exists()
    assert (moved / "__0_0.distcp").read_text() == "__0_0.distcp"
    assert (out / resume.TRACKER).read_text() == "200\n"
    assert resume.is_complete(final), "the checkpoint stays until the work folder is removed"
    assert resume.finish(save, out, 200) == moved, "finishing again replaces the output"


def megatron_argv(inputs: dict[str, Path], work: Path, command: str, split: Path | None = None) -> list[str]:
    """``train megatron-claim`` or ``train megatron`` of one RPB run on the toy inputs."""
    argv = ["train", command, "--hf-base", str(inputs["base"]), "--megatron-base", str(inputs["base"])]
    argv += ["--dataset", str(inputs["base"]), "--split", str(split or inputs["split"])]
    argv += ["--condition", json.dumps({"intervention": "rpb", "params": {"beta": 1.0}, "prior": "base"})]
    argv += ["--training", json.dumps({"expert_bias_update_rate": 0.0}), "--seed", "42"]
    argv += ["--prior", str(inputs["prior"]), "--prior-meta", str(inputs["meta"]), "--work", str(work)]
    if command == "megatron":
        argv += [
            "--moe-layers",
            "2",
            "--out",
            str(work.parent / "out"),
            "--record",
            str(work.parent / "r.json"),
        ]
    return argv


def test_the_claim_hashes_each_input_once_and_the_ranks_hash_nothing(training_inputs, tmp_path, monkeypatch):
    """Rank 0 once hashed every input (tens of GB) before joining a process group with a 10-minute timeout."""
    from workflow_scripts import records as provenance
    from workflow_scripts.records import verify

    hashed: list[str] = []

    def counting(path):
        hashed.append(str(path))
        return original(path)

    original = provenance.path_digest
    monkeypatch.setattr(provenance, "path_digest", counting)
    monkeypatch.setattr(verify, "path_digest", counting)
    work = tmp_path / "work"
    assert cli.main(megatron_argv(training_inputs, work, "megatron-claim")) == 0
    # hf_base, megatron_base and dataset all name the toy base here: each input is hashed once,
    # and the prior's check reuses the digests of the base and the split.
    assert sorted(hashed) == sorted(
        str(training_inputs[name]) for name in ("base", "base", "base", "split", "prior", "meta")
    )
    claimed = json.loads((work / resume.DIGESTS_FILE).read_text())
    assert claimed["hf_base"]["sha256"] == original(training_inputs["base"])["sha256"]

    def no_hashing(path):
        raise AssertionError(f"a rank hashed {path}")

    monkeypatch.setattr(provenance, "path_digest", no_hashing)
    monkeypatch.setattr(verify, "path_digest", no_hashing)
    args = cli.build_parser().parse_args(megatron_argv(training_inputs, work, "megatron"))
    assert cli._verified_inputs(args) == claimed
    assert "claimed_digests" not in recorded_arguments(args)
    with pytest.raises(UserInputError, match="megatron-claim"):
        cli._verified_inputs(
            cli.build_parser().parse_args(megatron_argv(training_inputs, tmp_path / "w2", "megatron"))
        )
    other = megatron_argv(training_inputs, work, "megatron", split=tmp_path / "other.parquet")
    with pytest.raises(UserInputError, match="was claimed for the inputs"):
        cli._verified_inputs(cli.build_parser().parse_args(other))


def test_the_claim_refuses_a_prior_of_another_split_before_any_rank_starts(training_inputs, tmp_path, capsys):
    import pandas as pd

    other = tmp_path / "other.parquet"
    pd.read_parquet(training_inputs["split"]).iloc[::-1].to_parquet(other)
    work = tmp_path / "work"
    assert cli.main(megatron_argv(training_inputs, work, "megatron-claim", split=other)) == 2
    assert "does not belong to this run: split" in capsys.readouterr().err
    assert not (work / resume.DIGESTS_FILE).exists()


def test_the_claim_refuses_a_missing_input_and_claims_nothing(training_inputs, tmp_path, capsys):
    """The one input check before a multi-node launch refuses a missing input, and claims no folder."""
    work = tmp_path / "work"
    argv = megatron_argv(training_inputs, work, "megatron-claim")
    argv[argv.index("--prior") + 1] = str(tmp_path / "gone.npy")
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == f"error: --prior {tmp_path / 'gone.npy'}: no such file or directory\n"
    assert not work.exists()
