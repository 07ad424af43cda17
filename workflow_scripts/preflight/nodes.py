"""The checks that run on compute nodes under ``srun``: the GPU software, and whether a node reaches the hub.

Each submits one short job with the account, partition and QOS the profiles give the rule it
stands for (``megatron_import`` for the Megatron software, ``generate`` for vLLM, the
profile's first CPU-only rule for the hub) and runs ``node_probe.py`` there. They wait in the queue like
any job, so they run only when asked (``--gpu``, ``--nodes-reach-hub``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workflow_scripts.preflight.checklist import FAIL, OK, SKIPPED, Check
from workflow_scripts.preflight.profiles import Resources
from workflow_scripts.preflight.slurm import PLACEHOLDER

PROBE = Path(__file__).resolve().with_name("node_probe.py")
ROOT = PROBE.parents[2]
#: What each environment must import on a GPU node, and the rule whose request its job copies.
MEGATRON_MODULES = ("megatron.bridge", "transformer_engine")
EVAL_MODULES = ("vllm",)
HOW_TO_RUN = (
    "python -m workflow_scripts preflight --gpu (one short one-GPU srun job per environment; "
    "--megatron-python/--eval-python name the interpreters, default .venvs/<env>/bin/python, "
    "and training.container the Megatron image)"
)


@dataclass(frozen=True)
class Software:
    """An environment under test: its Python on a node, what it must import, whose request its job copies."""

    name: str
    rule: str
    modules: tuple[str, ...]
    python: tuple[str, ...] | None  # the command that starts its interpreter; None: not given
    missing: str = ""  # why ``python`` is None


def stage_python(env: str, environ: Mapping[str, str]) -> Path | None:
    """``envs venv``'s interpreter of stage ``env`` (``$RPB_VENVS/<env>``, else ``.venvs/<env>``) if built."""
    venvs = Path(environ.get("RPB_VENVS") or ROOT / ".venvs")
    python = venvs / env / "bin" / "python"
    return python if python.exists() else None


def software(
    container: str | None, megatron_python: str | None, eval_python: str | None, environ: Mapping[str, str]
) -> list[Software]:
    """The Megatron software (the image, an interpreter, or the built venv) and the evaluation's."""
    if megatron_python:
        megatron: tuple[str, ...] | None = (megatron_python,)
    elif container:
        megatron = ("apptainer", "exec", "--nv", container, "python")
    else:
        found = stage_python("megatron", environ)
        megatron = (str(found),) if found else None
    found = stage_python("eval", environ)
    evaluation = (eval_python,) if eval_python else (str(found),) if found else None
    return [
        Software(
            "Megatron",
            "megatron_import",
            MEGATRON_MODULES,
            megatron,
            "give --megatron-python, set training.container, or build .venvs/megatron",
        ),
        Software(
            "evaluation", "generate", EVAL_MODULES, evaluation, "give --eval-python, or build .venvs/eval"
        ),
    ]


def srun(
    resources: Resources, rule: str | None, name: str, gres: str | None, minutes: int
) -> list[str] | str:
    """``srun`` with ``rule``'s account, partition and QOS, or why it cannot be submitted."""
    command = ["srun"]
    for key, option in (("slurm_account", "--account"), ("slurm_partition", "--partition"), ("qos", "--qos")):
        setting = resources.value(rule, key)
        if setting is not None:
            if PLACEHOLDER.fullmatch(str(setting.value)):
                return f"{key} is still a placeholder ({setting.where})"
            command.append(f"{option}={setting.value}")
    if gres:
        command.append(f"--gres={gres}")
    command += [
        "--ntasks=1",
        "--cpus-per-task=2",
        "--mem=16G",
        f"--time={minutes}",
        f"--job-name=rpb-preflight-{name}",
    ]
    return command


def _probe(command: Sequence[str], env: Mapping[str, str]) -> dict | str:
    """The probe's JSON report, or what went wrong with the job."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, env=dict(env), timeout=3600)
    except subprocess.TimeoutExpired:
        return "the job did not finish within an hour (queued?)"
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    lines = [line for line in (done.stderr + done.stdout).strip().splitlines() if line.strip()]
    return f"srun exited with status {done.returncode}: {lines[-1].strip() if lines else 'no message'}"


def _where(report: dict) -> str:
    return f"on node {report['host']} (job {report['slurm_job_id']})"


def gpu_checks(resources: Resources, softwares: Sequence[Software], env: Mapping[str, str]) -> list[Check]:
    """One one-GPU job per environment: its modules import and torch sees a CUDA device."""
    found = []
    for item in softwares:
        name = f"GPU software ({item.name})"
        if item.python is None:
            found.append(Check(name, SKIPPED, item.missing))
            continue
        if shutil.which("srun", path=env.get("PATH", "")) is None:
            found.append(Check(name, FAIL, "srun is not on PATH: run preflight on the cluster's login node"))
            continue
        model = resources.value(item.rule, "gpu_model")
        command = srun(resources, item.rule, "gpu", f"gpu:{model.value}:1" if model else "gpu:1", 15)
        if isinstance(command, str):
            found.append(Check(name, SKIPPED, f"cannot submit: {command}"))
            continue
        report = _probe([*command, *item.python, str(PROBE), "imports", *item.modules], env)
        if isinstance(report, str):
            found.append(Check(name, FAIL, report))
            continue
        broken = [
            f"{module} not importable ({result['error']})"
            for module, result in report["imports"].items()
            if not result["ok"]
        ]
        if not report["cuda_devices"]:
            broken.append(
                f"no CUDA device ({report['cuda_error']}; driver {report['driver'] or 'not found'})"
            )
        if broken:
            found.append(Check(name, FAIL, f"{'; '.join(broken)} {_where(report)}"))
            continue
        versions = ", ".join(f"{module} {result['version']}" for module, result in report["imports"].items())
        device = (
            f"{report['cuda_devices']} x {report['device']}, CUDA {report['cuda']}, driver {report['driver']}"
        )
        found.append(Check(name, OK, f"{versions}; {device} {_where(report)}"))
    return found


def hub_reach_check(resources: Resources, url: str, env: Mapping[str, str]) -> Check:
    """One short job on the CPU partition (the profile's first CPU-only rule's) asks ``url`` from a node."""
    name = "compute nodes reach the hub"
    if shutil.which("srun", path=env.get("PATH", "")) is None:
        return Check(name, FAIL, "srun is not on PATH: run preflight on the cluster's login node")
    rule = resources.cpu_rule()
    command = srun(resources, rule, "hub", None, 5)
    if isinstance(command, str):
        return Check(name, SKIPPED, f"cannot submit: {command}")
    report = _probe([*command, sys.executable, str(PROBE), "url", url], env)
    partition = resources.value(rule, "slurm_partition")
    place = f"partition {partition.value if partition else '(the default)'}" + (
        f" of rule {rule}" if rule else ""
    )
    if isinstance(report, str):
        return Check(name, FAIL, f"{report} ({place})")
    if report["reached"]:
        return Check(name, OK, f"{url} answered HTTP {report['status']} {_where(report)}, {place}")
    return Check(
        name,
        FAIL,
        f"{url} is unreachable {_where(report)} ({report['error']}), {place}: a job "
        "there cannot download; run the downloads on the submit host (localrules), where the hub "
        "answers, and let the nodes read what they wrote",
    )
