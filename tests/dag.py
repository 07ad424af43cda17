"""Shared test helpers: running Snakemake (dry runs, real runs, a checkout copy) and the toy inputs.

Every test that runs Snakemake, copies the checkout or builds a toy model, tokenizer or rows
takes them from here rather than from another test module (conftest.py included).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import yaml

from workflow_scripts import registry
from workflow_scripts.modeling.toy import ToyModelSpec
from workflow_scripts.registry import RouterTerm

ROOT = Path(__file__).resolve().parents[1]
# The paper profile as users name it (``slurm``, found from the repository root). It deploys
# per-rule conda environments, which Snakemake checks even in a dry run; this machine has no
# conda, so tests take the no-conda method (env-modules), which a dry run does not load.
PAPER = ["--profile", "slurm", "--sdm", "env-modules"]
TOY = ["--profile", "profiles/local"]
# Where a test's subject is not the toy base, a few pretraining steps on a small corpus keep it short.
SHORT_BASE = {
    "toy_base": {"steps": 4, "warmup_steps": 1, "corpus_rows": {"main": 200, "Math": 100}, "report_rows": 10}
}
OVERLAY = "test_overlay.yaml"
# Jobs call ``python``: the interpreter running the tests comes first on their PATH.
JOB_ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
_JOB = re.compile(r"^(?:local)?rule (\w+):\n((?:    .*\n)*)", re.MULTILINE)


def snakemake(
    workdir: Path,
    *args: str,
    env: dict[str, str] = JOB_ENV,
    timeout: float = 1200,
    stderr_into_stdout: bool = False,
) -> subprocess.CompletedProcess:
    """``python -m snakemake *args`` in ``workdir``, output captured; the caller judges the exit status.

    ``stderr_into_stdout``: one interleaved stream in ``stdout``, as a terminal shows it.
    """
    command = [sys.executable, "-m", "snakemake", *args]
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if stderr_into_stdout else {}
    return subprocess.run(
        command, cwd=workdir, env=env, text=True, timeout=timeout, capture_output=not streams, **streams
    )


def snakemake_ok(workdir: Path, *args: str, **options) -> subprocess.CompletedProcess:
    """``snakemake`` that must succeed; a failure shows the end of Snakemake's output."""
    done = snakemake(workdir, *args, **options)
    assert done.returncode == 0, (done.stderr or "")[-4000:] + done.stdout[-3000:]
    return done


def project_cli(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m workflow_scripts *args`` in ``workdir`` (its own code), output captured."""
    env = {**JOB_ENV, "PYTHONPATH": str(workdir)}
    command = [sys.executable, "-m", "workflow_scripts", *args]
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)


class PlannedJob(NamedTuple):
    rule: str
    wildcards: dict[str, str]
    inputs: list[str]
    outputs: list[str]


def planned_jobs(profile: list[str], *targets: str, cwd: Path = ROOT) -> list[PlannedJob]:
    """Jobs of ``snakemake -n`` for ``targets`` (all when none) under ``profile``, with their files."""
    done = snakemake_ok(cwd, *targets, "--dry-run", *profile, timeout=300)

    def listed(field: str, body: str) -> list[str]:
        found = re.search(rf"^    {field}: (.*)$", body, re.MULTILINE)
        return found.group(1).split(", ") if found else []

    return [
        PlannedJob(rule, dict(pair.split("=", 1) for pair in listed("wildcards", body)),
                   listed("input", body), listed("output", body))
        for rule, body in _JOB.findall(done.stdout)
    ]  # fmt: skip


def dry_run(profile: list[str], *targets: str, cwd: Path = ROOT) -> list[tuple[str, dict[str, str]]]:
    """(rule, wildcards) of each job of ``snakemake -n`` for ``targets`` (all when none) under ``profile``."""
    return [(job.rule, job.wildcards) for job in planned_jobs(profile, *targets, cwd=cwd)]


def printed_job(target: str, rule: str, *extra: str) -> tuple[str, str]:
    """The paper-scale dry run of ``target`` with commands printed: ``rule``'s resources and shell command.

    ``extra``: more Snakemake arguments, e.g. ``--configfiles`` with an overlay.
    """
    done = snakemake_ok(ROOT, target, "-n", "-p", *PAPER, *extra, timeout=300)
    job = done.stdout[done.stdout.index(f"rule {rule}:") :]
    return re.search(r"resources: (.*)", job).group(1), job[job.index("Shell command:") :].splitlines()[0]


def wildcard_values(jobs: list[tuple[str, dict[str, str]]], rule: str, key: str) -> list[str]:
    return sorted(wildcards[key] for name, wildcards in jobs if name == rule)


def copy_checkout(destination: Path) -> Path:
    """The checkout as git sees it (tracked and untracked-but-not-ignored files), without results."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in sorted({os.fsdecode(entry) for entry in listed.split(b"\0") if entry}):
        source = ROOT / name
        if not (source.exists() or source.is_symlink()):
            continue  # deleted in the working tree, not yet in the index
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    return destination


# The real toy run the suite builds once (tests/conftest.py's ``toy_run``): every corpus, Tables 1,
# 6 and 13 and Figure 2 with their manifests, and one checkpoint trained on a shuffled prior.
TOY_RUN_OUTPUTS = ("table1", "table6", "table13", "figure2")
# About 15 minutes on two idle cores; twice that and more where the cores are shared.
TOY_RUN_TIMEOUT = 3600


def toy_run_targets() -> list[str]:
    """The Snakemake targets of the suite's toy run."""
    from workflow_scripts import registry

    config = registry.load_config(registry.shipped_config_files(ROOT, toy=True))
    data = [f"results/data/{corpus}/train.parquet" for corpus in config["corpora"]]
    outputs = [f"results/provenance/{output}.json" for output in TOY_RUN_OUTPUTS]
    return [*data, *outputs, "results/checkpoints/moonlight/math20k/within_soft/s42"]


def build_toy_run(workdir: Path) -> Path:
    """A git copy of the checkout at ``workdir`` (records carry its commit) with the toy run built in it."""
    copy_checkout(workdir)
    git = ["git", "-C", str(workdir), "-c", "user.name=toy", "-c", "user.email=toy@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "toy run"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    snakemake_ok(workdir, *toy_run_targets(), *TOY, timeout=TOY_RUN_TIMEOUT)
    return workdir


def link_stage_envs(folder: Path, envs: dict[str, Path]) -> Path:
    """``RPB_VENVS`` for envs/modules in ``folder``: a link per stage to its environment, kept outside
    /tmp by the callers (the scoring sandbox empties /tmp, and an interpreter reached through it)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stage, env in envs.items():
        link = folder / stage
        if link.is_symlink() and link.resolve() != env.resolve():
            link.unlink()
        if not link.is_symlink():
            link.symlink_to(env)
    return folder


def copy_workdir(source: Path, destination: Path) -> Path:
    """A copy of a working directory made by ``copy_checkout`` (a snapshot, or a finished run with
    its results and Snakemake's metadata), links kept as links."""
    return Path(shutil.copytree(source, destination, symlinks=True))


def overlay_configfiles(workdir: Path, overlay: dict) -> list[str]:
    """``--configfiles``: the toy overlay, then ``overlay`` written as a last config file in ``workdir``."""
    (workdir / OVERLAY).write_text(yaml.safe_dump(overlay))
    return ["--configfiles", "profiles/local/toy.yaml", OVERLAY]


def with_overlay(workdir: Path, overlay: dict) -> list[str]:
    """The toy profile plus ``overlay`` as a last config file in ``workdir``."""
    return [*TOY, *overlay_configfiles(workdir, overlay)]


def router_terms() -> dict[str, RouterTerm]:
    """The router terms of config.yaml (``router_terms``), by name (a fresh dict of frozen terms)."""
    return dict(_shipped_router_terms())


@functools.cache
def _shipped_router_terms() -> dict[str, RouterTerm]:
    """Read once per process: test modules call ``router_terms`` while they are collected."""
    return registry.router_terms(yaml.safe_load((ROOT / "config.yaml").read_text()))


def job_conditions(config: dict) -> dict[str, dict]:
    """Every condition of ``config`` as a training job reads it (``registry.job_condition``)."""
    return {name: registry.job_condition(config, name) for name in config["conditions"]}


def job_condition(intervention: str, prior: str | None = None, **params: float) -> dict:
    """A training job's condition of ``intervention`` as the rules pass it (``registry.job_condition``):
    with ``params``, a ``prior`` where given, and the router term's declaration from config.yaml."""
    condition: dict = {"intervention": intervention, "params": params}
    if prior is not None:
        condition["prior"] = prior
    if intervention in (terms := router_terms()):
        condition["term"] = terms[intervention].declaration()
    return condition


# The toy MoE checkpoints unit tests build; each variant of TINY_SPEC states only what differs.
# The smallest (3 layers, the first dense; 8 experts, top-2), as ToyModelSpec keywords.
TINY_SPEC = dict(
    hidden_size=32,
    num_layers=3,
    num_experts=8,
    top_k=2,
    intermediate_size=48,
    moe_intermediate_size=16,
    num_heads=2,
    kv_lora_rank=16,
    qk_rope_head_dim=4,
    max_position_embeddings=128,
)
# The training tests' model: a wider dense MLP and four heads.
TRAIN_SPEC = ToyModelSpec(**{**TINY_SPEC, "intermediate_size": 64, "num_heads": 4})
# A model with more layers and experts than TINY_SPEC, and top-4, for the probe's routes.
PROBE_SPEC = ToyModelSpec(
    **{
        **TINY_SPEC,
        "hidden_size": 64,
        "num_layers": 4,
        "num_experts": 16,
        "top_k": 4,
        "intermediate_size": 64,
        "num_heads": 4,
        "max_position_embeddings": 64,
    }
)


def registry_toy_spec(arch: str) -> ToyModelSpec:
    """The toy registry's sizes (profiles/local/toy.yaml); Qwen3-MoE as the paper's, MoE in every layer."""
    experts = 24 if arch == "qwen3_moe" else 16
    return ToyModelSpec(
        hidden_size=64,
        num_layers=4,
        num_experts=experts,
        top_k=2,
        first_dense_layers=0 if arch == "qwen3_moe" else 1,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_heads=4,
    )


TOY_ROWS = 24


def toy_rows(rows: int = TOY_ROWS) -> tuple[list[str], list[str]]:
    """Deterministic (prompt, answer) pairs."""
    rng = np.random.default_rng(0)
    words = "add the sum of two numbers print a list sort loop value function return answer is".split()
    prompts = [" ".join(rng.choice(words, 8)) + f" {i}?" for i in range(rows)]
    answers = [" ".join(rng.choice(words, 12)) + f" = {i * 7}" for i in range(rows)]
    return prompts, answers


def toy_tokenizer():
    """A byte-level BPE tokenizer (300 tokens) trained on ``toy_rows``."""
    from workflow_scripts.modeling.tokenizer import train_tokenizer

    prompts, answers = toy_rows()
    return train_tokenizer(prompts + answers, 300, min_frequency=1)
