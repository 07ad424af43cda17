"""Every command's expected failures end in one line naming the argument, through the one entry point.

Real bad input on the real commands (``python -m workflow_scripts``): a missing input, a folder
given for a file and a file for a folder, a malformed partition, an existing folder as an output
file, a full disk, a package the environment lacks, a command meant for torchrun run outside it,
the hub out of reach. Each exits non-zero with exactly one line on stderr and writes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workflow_scripts.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(argv: list[str], capsys) -> tuple[int, list[str]]:
    status = main(argv)
    return status, capsys.readouterr().err.strip().splitlines()


@pytest.fixture()
def shuffle_inputs(tmp_path, monkeypatch) -> dict[str, Path]:
    """A prior (N, 2, L, E) = (4, 2, 1, 4) and a partition of its one layer, in a fresh working folder."""
    monkeypatch.chdir(tmp_path)
    prior = np.full((4, 2, 1, 4), 0.25, dtype=np.float32)
    np.save(tmp_path / "prior.npy", prior)
    (tmp_path / "partition.json").write_text(json.dumps({"labels": [[0, 0, 1, 1]]}))
    return {"prior": tmp_path / "prior.npy", "partition": tmp_path / "partition.json"}


def shuffle_argv(prior: Path, partition: Path, within: Path) -> list[str]:
    return [
        "priors", "shuffle", "--prior", str(prior), "--partition", str(partition), "--top-k", "1",
        "--seed", "0", "--validation-seeds", "1", "--rhos", "0.5", "--clip-eps", "0.1", "--clip-c", "2",
        "--within", str(within), "--global", "global.npy", "--validation", "validation.json",
    ]  # fmt: skip


def test_the_shuffle_inputs_are_good(shuffle_inputs, tmp_path, capsys):
    """The bad cases below differ from a command that succeeds by the one thing they break."""
    assert run(shuffle_argv(*shuffle_inputs.values(), tmp_path / "within.npy"), capsys)[0] == 0


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "not a partition file (invalid JSON"),
        ('{"modularity": []}', "not a partition file (no 'labels' list)"),
        ('{"labels": [0, 1]}', "'labels' must be a non-empty (layers, experts) table of integers"),
    ],
)
def test_a_malformed_partition_is_named(shuffle_inputs, tmp_path, capsys, content, says):
    shuffle_inputs["partition"].write_text(content)
    status, err = run(shuffle_argv(*shuffle_inputs.values(), tmp_path / "within.npy"), capsys)
    assert status == 2 and len(err) == 1
    assert err[0].startswith(f"error: --partition {shuffle_inputs['partition']}: ") and says in err[0]
    assert not (tmp_path / "within.npy").exists()


def test_a_missing_input_is_named_before_anything_runs(shuffle_inputs, tmp_path, capsys):
    status, err = run(
        shuffle_argv(shuffle_inputs["prior"], tmp_path / "nope.json", tmp_path / "w.npy"), capsys
    )
    assert (status, err) == (2, [f"error: --partition {tmp_path / 'nope.json'}: no such file or directory"])


def test_a_folder_for_a_file_and_a_file_for_a_folder(shuffle_inputs, tmp_path, capsys):
    status, err = run(["train", "chat-dataset", "--split", str(tmp_path), "--out", "chat"], capsys)
    assert (status, err) == (2, [f"error: --split {tmp_path}: a folder, where a file is expected"])
    argv = ["evaluate", "generate", "--checkpoint", str(shuffle_inputs["prior"]), "--items"]
    argv += [str(shuffle_inputs["prior"]), "--sampling", "{}", "--backend", "hf", "--out", "g.parquet"]
    status, err = run(argv, capsys)
    assert (status, err) == (
        2,
        [f"error: --checkpoint {shuffle_inputs['prior']}: a file, where a folder is expected"],
    )


def test_an_existing_folder_as_an_output_file(shuffle_inputs, tmp_path, capsys):
    (tmp_path / "within.npy").mkdir()
    status, err = run(shuffle_argv(*shuffle_inputs.values(), tmp_path / "within.npy"), capsys)
    assert status == 2 and len(err) == 1
    assert err[0].startswith(f"error: --within {tmp_path / 'within.npy'}") and "is a directory" in err[0]
    assert sorted(p.name for p in (tmp_path / "within.npy").iterdir()) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_full_disk_is_one_line_naming_the_output(shuffle_inputs, tmp_path, capsys, monkeypatch):
    """The kernel's own ENOSPC (``/dev/full``) under the atomic write of the manifest's JSON."""
    real_open = Path.open

    def full_temp_file(self: Path, *args, **kwargs):
        return real_open(Path("/dev/full") if self.suffix == ".tmp" else self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_temp_file)
    argv = ["provenance", "manifest", "--output-id", "table5", "--entry", '{"title": "t"}', "--closure", "{}"]
    argv += ["--config", "{}", "--inputs", str(shuffle_inputs["prior"]), "--out", str(tmp_path / "m.json")]
    status, err = run(argv, capsys)
    assert status == 1 and len(err) == 1
    assert err[0].startswith(f"error: --out {tmp_path / 'm.json'}: no space left on the device")
    assert not (tmp_path / "m.json").exists()


def test_missing_inputs_are_never_vouched_for(shuffle_inputs, tmp_path, capsys):
    """The manifest refuses a missing input, where it recorded it as ``{"missing": true}``."""
    argv = ["provenance", "manifest", "--output-id", "table5", "--entry", '{"title": "t"}', "--closure", "{}"]
    argv += ["--config", "{}", "--inputs", str(shuffle_inputs["prior"]), str(tmp_path / "gone.parquet")]
    argv += ["--out", str(tmp_path / "m.json")]
    status, err = run(argv, capsys)
    assert (status, err) == (2, [f"error: --inputs {tmp_path / 'gone.parquet'}: no such file or directory"])
    assert not (tmp_path / "m.json").exists()


def test_a_megatron_command_without_megatron_names_the_environment(
    training_inputs, tmp_path, capsys, monkeypatch
):
    pytest.importorskip("transformers")
    if any(Path(p, "megatron").is_dir() for p in sys.path if p):
        pytest.skip("this environment has Megatron")
    monkeypatch.chdir(tmp_path)
    status, err = run(
        ["train", "megatron-import", "--hf-base", str(training_inputs["base"]), "--out", "m"], capsys
    )
    assert status == 1 and len(err) == 1
    assert "needs 'megatron'" in err[0] and "envs/megatron.yaml" in err[0]


def test_rendezvous_outside_torchrun_says_how_it_is_started(tmp_path, capsys, monkeypatch):
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    status, err = run(["train", "megatron-rendezvous", "--out", str(tmp_path / "r.txt")], capsys)
    assert status == 2 and len(err) == 1 and "under torchrun (train megatron-launch starts it)" in err[0]


@pytest.mark.parametrize("offline", [True, False])
def test_the_hub_out_of_reach_is_one_line(tmp_path, offline):
    """Offline mode, and a hub endpoint that refuses connections (a closed local port)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_OFFLINE", None)
    env |= {"HF_HUB_OFFLINE": "1"} if offline else {"HF_ENDPOINT": "http://127.0.0.1:9"}
    argv = [sys.executable, "-m", "workflow_scripts", "models", "download", "--repo", "org/model"]
    argv += ["--revision", "0" * 40, "--out", str(tmp_path / "m"), "--manifest", str(tmp_path / "m.json")]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1, done.stderr
    assert err[0].startswith("error: the Hugging Face hub could not serve the request")
    assert not (tmp_path / "m.json").exists()


def test_a_report_input_it_does_not_read_is_named(tmp_path, capsys, monkeypatch):
    """A mistyped ``--inputs`` path was reported as the file the figure then missed, not as itself."""
    from tests.conftest import load_config

    monkeypatch.chdir(tmp_path)
    stray = tmp_path / "results" / "evals" / "typo.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    argv = ["report", "figure-data", "--id", "figure2", "--config", json.dumps(load_config(toy=True))]
    argv += ["--results", "results", "--inputs", str(stray.relative_to(tmp_path)), "--data", "f.csv"]
    status, err = run(argv, capsys)
    assert (status, err) == (
        2,
        ["error: --inputs results/evals/typo.json: not a file figure2 reads under --results results"],
    )
    assert not (tmp_path / "f.csv").exists()


def test_a_file_as_an_environment_prefix_is_named(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    status, err = run(["envs", "venv", "data", "--prefix", str(tmp_path / "afile")], capsys)
    assert (status, err) == (
        2,
        [f"error: --prefix {tmp_path / 'afile'}: a file, where the environment's folder goes"],
    )


def test_a_failing_subprocess_ends_in_one_line_after_its_own_messages(tmp_path, capsys):
    """``envs venv`` with an interpreter that cannot make a venv: its messages, then one line."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'cannot do that' >&2\nexit 3\n")
    fake.chmod(0o755)
    status, err = run(
        ["envs", "venv", "data", "--prefix", str(tmp_path / "v"), "--python", str(fake)], capsys
    )
    assert (
        status == 1
        and err[-1] == f"error: {fake} -m venv {tmp_path / 'v'} exited with status 3 (its messages are above)"
    )


@pytest.mark.slow
def test_a_closed_stdout_ends_quietly(tmp_path):
    """``plan all | head``: the reader goes away; the command stops as a shell tool does, no traceback."""
    command = [sys.executable, "-m", "workflow_scripts", "plan", "all"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    err = process.stderr.read().decode()
    assert (process.wait(timeout=120), err) == (141, "")


def test_auditing_an_unknown_output_names_the_known_ones(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    status, err = run(["provenance", "audit", "table99"], capsys)
    assert status == 2 and len(err) == 1
    assert err[0].startswith("error: 'table99': no such table or figure (known: ") and "table5" in err[0]
