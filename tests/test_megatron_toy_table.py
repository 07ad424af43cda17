"""A toy table through the Megatron rules on CPU: import, chat dataset, Bridge's ``finetune()``, export.

Table 8's Moonlight cell on math20k (z-loss, one training) runs with
``training.backend: megatron`` and one process (no TP/EP/SP: one CPU rank), every rule in
its stage's environment through ``--sdm env-modules``: the Megatron rules in the Python 3.12
Megatron env (``.venv-megatron``), the others in the project's ``.venv``. The Megatron jobs
get ``tests/megatron_cpu_shim`` on ``PYTHONPATH``, which applies ``tests.finetune_cpu``'s
adaptations (docs/training.md); nothing else differs from the cluster's rules. The same target
through the local backend is built by ``tests/test_environments.py``.
Run by ``tests/run_megatron_cpu.sh`` (a few minutes on 2 cores); needs Environment Modules.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dag import ROOT, SHORT_BASE, copy_checkout, link_stage_envs, with_overlay

pytestmark = pytest.mark.megatron_table

MEGATRON_ENV = ROOT / ".venv-megatron"
LOCAL_ENV = Path(sys.prefix)
MODULES_INIT = Path("/usr/share/modules/init/bash")
#: ``RPB_VENVS`` of the test: links to the two envs, in the repository's ignored ``.venvs`` and not
#: under /tmp, whose paths the code sandbox of ``evaluate score`` hides (the interpreter path with them).
STAGE_VENVS = ROOT / ".venvs" / "megatron-table-links"
SHIM = ROOT / "tests" / "megatron_cpu_shim"
TARGET = "results/tables/table8.md"
#: Table 8 reduced to its Moonlight cell on one corpus, trained by one CPU process.
OVERLAY = {
    **SHORT_BASE,
    "tables": {
        "table8": {
            "title": "ST-MoE z-loss (twelve-benchmark mean, single seed)",
            "cells": [
                {
                    "models": ["moonlight"],
                    "corpora": ["math20k"],
                    "conditions": ["zloss"],
                    "eval_seeds": [42],
                }
            ],
        }
    },
    "fork_server": False,
}
ONE_PROCESS = {
    "nodes": 1,
    "gpus_per_node": 1,
    "tensor": 1,
    "pipeline": 1,
    "context": 1,
    "expert": 1,
    "expert_tensor": 1,
    "sequence_parallel": False,
    "recompute_modules": [],
}


def _missing() -> str:
    if not (MEGATRON_ENV / "bin" / "python").exists():
        return "no Megatron env (.venv-megatron: tests/run_megatron_cpu.sh builds it)"
    if not MODULES_INIT.exists():
        return "Environment Modules not installed (Debian: environment-modules)"
    return ""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def build(work: Path, overlay: dict, venvs: Path) -> subprocess.CompletedProcess:
    """``snakemake TARGET`` in ``work`` with the toy profile, ``overlay`` and one env per stage."""
    copy_checkout(work)
    snakemake = [
        sys.executable,
        "-m",
        "snakemake",
        TARGET,
        *with_overlay(work, overlay),
        "--sdm",
        "env-modules",
    ]
    script = f"source {MODULES_INIT} && module use {work / 'envs' / 'modules'} && exec {' '.join(snakemake)}"
    # A free port for the one-process groups the import and export open (Bridge's default 12355
    # clashes with any other Bridge process on the machine); torchrun picks its own.
    env = {**os.environ, "RPB_VENVS": str(venvs), "PYTHONPATH": str(SHIM), "MASTER_PORT": str(free_port())}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=3000
    )


@pytest.mark.skipif(bool(_missing()), reason=_missing() or "ready")
def test_table8_moonlight_cell_through_the_megatron_rules(tmp_path, request):
    if "megatron_table" not in (request.config.option.markexpr or ""):
        pytest.skip("a few minutes: run with -m megatron_table (tests/run_megatron_cpu.sh does)")
    stages = {stage: LOCAL_ENV for stage in ("data", "train", "eval", "analysis")}
    venvs = link_stage_envs(STAGE_VENVS, {**stages, "megatron": MEGATRON_ENV})
    megatron = {**OVERLAY, "training": {"backend": "megatron", "parallelism": ONE_PROCESS}}
    done = build(tmp_path / "megatron", megatron, venvs)
    assert done.returncode == 0, done.stderr[-6000:]
    work = tmp_path / "megatron"
    run = "moonlight/math20k/zloss/s42"
    record = json.loads((work / f"results/megatron/trained/{run}.record.json").read_text())
    assert record["steps"] == 32 and record["resumed_from"] == [0]  # 4 epochs x 64 rows / 8
    trained = json.loads((work / f"results/megatron/trained/{run}.provenance.json").read_text())
    assert Path(trained["software"]["prefix"]).resolve() == MEGATRON_ENV.resolve(), "not in the Megatron env"
    assert (work / f"results/checkpoints/{run}/config.json").is_file()
    log = (work / f"logs/megatron/train/{run}.log").read_text()
    assert "iteration       32/      32" in log
    table = (work / TARGET).read_text()
    assert "| math20k | Moonlight-16B-A3B |" in table, table
    print("Megatron backend:\n" + table)
