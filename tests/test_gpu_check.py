"""The GPU check (tests/gpu/check_bridge_finetune.sh) runs the product's commands as the rules do.

Its GPU run needs a cluster; here its command lines, its training section and, with
``-m megatron_table``, its whole run on CPU with the test adaptations (never reported as a
GPU result) are checked.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import load_config
from tests.dag import ROOT
from tests.gpu import check_bridge_finetune as check
from workflow_scripts.train.megatron.settings import Parallelism, run_settings, run_steps


def _dry_run(*extra: str) -> list[list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.gpu.check_bridge_finetune", "--dry-run", "--work", "/w", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [shlex.split(line) for line in done.stdout.splitlines() if line and not line.startswith("#")]


def _commands(lines: list[list[str]], *words: str) -> list[list[str]]:
    return [argv for argv in lines if " ".join(words) in " ".join(argv)]


def _command(lines: list[list[str]], *words: str) -> list[str]:
    found = _commands(lines, *words)
    assert len(found) == 1, (words, lines)
    return found[0]


@pytest.mark.slow
def test_every_step_is_the_products_command_line():
    lines = _dry_run("--megatron-python", "/env/bin/python")
    imported = _command(lines, "train megatron-import")
    assert imported[:3] == ["/env/bin/python", "-m", "workflow_scripts"]
    launches = _commands(lines, "train megatron-launch")
    claims = _commands(lines, "train megatron-claim")
    # Per condition: the run to kill and resume, and the same run uninterrupted.
    assert len(launches) == len(claims) == 2 * len(check.CONDITIONS)
    for launch, claim in zip(launches, claims, strict=True):
        separator = launch.index("--")
        assert launch[separator - 4 : separator] == ["--nodes", "1", "--gpus-per-node", "1"]
        assert launch[separator + 1 : separator + 3] == ["train", "megatron"]
        assert (
            claim[claim.index("megatron-claim") + 1 :] == launch[separator + 3 : launch.index("--moe-layers")]
        )
    toy = load_config(toy=True)["conditions"]
    trained = {}
    for resumed, uninterrupted in zip(launches[::2], launches[1::2], strict=True):
        differ = [i for i, (a, b) in enumerate(zip(resumed, uninterrupted, strict=True)) if a != b]
        assert [resumed[i - 1] for i in differ] == ["--work", "--out", "--record", "--provenance"]
        condition = json.loads(resumed[resumed.index("--condition") + 1])
        trained[condition["intervention"]] = condition
        assert ("--prior" in resumed) == ("prior" in condition)
    # RPB (the router hook) at the toy's calibrated strength, and Router-L2 (the optimizer hook).
    assert trained == {
        "rpb": {"intervention": "rpb", "params": toy["rpb"]["params"], "prior": "base"},
        "router_l2": {"intervention": "router_l2", "params": toy["router_l2"]["params"]},
    }
    assert len(_commands(lines, "train megatron-export")) == len(check.CONDITIONS)
    _command(lines, "train chat-dataset")
    _command(lines, "priors compute")


@pytest.mark.slow
def test_with_an_image_the_one_process_steps_enter_it_and_the_launch_wraps_torchrun():
    lines = _dry_run("--container", "img.sif")
    image = str(ROOT / "img.sif")
    assert _command(lines, "train megatron-import")[:5] == ["apptainer", "exec", "--nv", image, "python"]
    assert _command(lines, "train chat-dataset")[:4] == ["apptainer", "exec", image, "python"]
    for launch in _commands(lines, "train megatron-launch"):
        assert launch[0] == sys.executable and launch[launch.index("--container") + 1] == image


def test_the_training_section_is_one_gpu_and_killed_before_its_end(paper_config):
    training = check.training_section(paper_config, "bf16")
    assert Parallelism.from_config(training["parallelism"]).world_size == 1
    steps = run_steps(training, check.ROWS)
    assert steps == check.EPOCHS * check.ROWS // check.GLOBAL_BATCH == 24
    assert run_settings(training, check.ROWS, 42)["checkpoint"]["save_interval"] == 8 < steps


@pytest.mark.megatron_table
def test_the_check_passes_on_cpu_with_the_test_adaptations(tmp_path, request):
    """The whole check on CPU (about 10 minutes): ``tests/finetune_cpu.py`` in place of a GPU."""
    if "megatron_table" not in (request.config.option.markexpr or ""):
        pytest.skip("about 10 minutes: run with -m megatron_table (a developer check, not in CI)")
    megatron = ROOT / ".venv-megatron" / "bin" / "python"
    if not megatron.exists():
        pytest.skip("no Megatron env (.venv-megatron: tests/run_megatron_cpu.sh builds it)")
    done = subprocess.run(
        [sys.executable, "-m", "tests.gpu.check_bridge_finetune", "--cpu", "--work", str(tmp_path)]
        + ["--megatron-python", str(megatron)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-4000:]
    assert "NOT a GPU result" in done.stdout
