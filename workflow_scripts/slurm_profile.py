"""profiles/slurm/config.yaml from the compute plan: every rule's SLURM request (``plan profile``).

The profile is written by this module, not by hand. A rule's ``runtime`` is the plan's upper
estimate of its longest job (the high end of every range, over ``all`` and the gates, openr1math
at the paper's 94k rows) times ``compute.profile_margin.runtime_factor`` plus
``runtime_minutes``; its memory is the plan's need times ``memory_factor``; its CPUs and GPUs
what its jobs hold. GPU rules run on ``default-resources``' ``slurm_partition``, CPU-only rules
on a CPU partition named once, on the first of them (a YAML anchor the others refer to): three
site values, which a regeneration keeps. Downloads and provenance records are ``localrules``
(the submit host has the internet and ``HF_TOKEN``) and get no request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.compute_plan import ALL, CPU_RULES, GATES, GPU_RULES, PAPER_ROWS, plan
from workflow_scripts.errors import UserInputError
from workflow_scripts.plan_costs import SECONDS_PER_HOUR, Calibration, Job, Pricer

PROFILE = Path("profiles/slurm/config.yaml")
#: Rules that run on the submit host (``localrules`` in rules/data.smk, models.smk, evaluate.smk
#: and provenance.smk): no SLURM request.
LOCAL_RULES = (
    "download_dataset",
    "download_model",
    "download_benchmark",
    "provenance_manifest",
    "provenance_audit",
)
#: Rules whose nodes, tasks and GPUs come from the rule (rules/common.smk MEGATRON_ALLOCATION).
ALLOCATION_RULES = ("train_megatron", "megatron_launch_check")
ROUND_MINUTES = 5
CPU_ANCHOR = "cpu_partition"


@dataclass(frozen=True)
class Site:
    """The three values a user sets once: the account, the GPU partition and the CPU partition."""

    account: str = "your_account"
    gpu_partition: str = "your_partition"
    cpu_partition: str = "your_cpu_partition"


@dataclass(frozen=True)
class Request:
    """One rule's SLURM request, and the plan's upper estimate of its longest job that ``runtime`` covers."""

    rule: str
    gpus: int  # per job (0: a CPU rule); per node for an allocation rule, which the rule asks itself
    cpus: int  # per task (one task per node for an allocation rule)
    mem_mb: int  # per node
    runtime: int  # minutes
    upper_minutes: float
    jobs: int  # of the rule in `all` and the gates (0: toy scale or a named target only)
    basis: str  # one line: where the figures come from

    @property
    def partition(self) -> str:
        return "gpu" if self.gpus else "cpu"


def _runtime(config: Mapping[str, Any], upper_seconds: float) -> int:
    margin = config["compute"]["profile_margin"]
    minutes = upper_seconds / 60 * margin["runtime_factor"] + margin["runtime_minutes"]
    return ROUND_MINUTES * math.ceil(minutes / ROUND_MINUTES)


def _mem_mb(config: Mapping[str, Any], memory_gb: float) -> int:
    return 1000 * math.ceil(memory_gb * config["compute"]["profile_margin"]["memory_factor"])


def _request(config: Mapping[str, Any], rule: str, jobs: Sequence[Job], basis: str) -> Request:
    longest = max(job.wall.high for job in jobs)
    return Request(
        rule=rule,
        gpus=max(job.gpus for job in jobs),
        cpus=max(job.cpus for job in jobs),
        mem_mb=_mem_mb(config, max(job.memory_gb for job in jobs)),
        runtime=_runtime(config, longest),
        upper_minutes=longest / 60,
        jobs=len(jobs),
        basis=basis,
    )


def requests(config: Mapping[str, Any], calibration: Calibration | None = None) -> list[Request]:
    """Every rule's request from the plans of ``all`` and of the gates; rules neither runs from ``cpu_jobs``.

    Raises if a rule the plans price has no place in the plan's rule lists (a new rule must be
    listed there, and so in the profile).
    """
    corpora = config["corpora"]
    rows = {
        corpus: n
        for corpus, n in PAPER_ROWS.items()
        if corpus in corpora and corpora[corpus]["train_rows"] is None
    }
    by_rule: dict[str, dict[tuple, Job]] = {}
    for target in (ALL, GATES):
        for job in plan(config, target, rows, calibration).jobs:
            by_rule.setdefault(job.rule, {})[job.id] = job
    by_rule["megatron_launch_check"] = {(): Pricer(config, Calibration(), {}).launch_check()}
    unknown = sorted(set(by_rule) - set(GPU_RULES) - set(CPU_RULES) - {"megatron_launch_check"})
    if unknown:
        raise UserInputError(f"the plan prices rule {unknown[0]!r}, which compute_plan's rule lists lack")
    found = []
    others = [rule for rule in config["compute"]["cpu_jobs"] if rule not in CPU_RULES]
    for rule in (*GPU_RULES, "megatron_launch_check", *CPU_RULES, *others):
        if rule in by_rule:
            jobs = list(by_rule[rule].values())
            high = max(job.wall.high for job in jobs) / SECONDS_PER_HOUR
            basis = f"{len(jobs)} job(s) in all + gates; the longest {high:.2f} h at the plan's high end"
            if rule == "megatron_launch_check":
                basis = "by name only: a training's start-up at the plan's high end"
            found.append(_request(config, rule, jobs, basis))
        elif rule in config["compute"]["cpu_jobs"]:
            spec = config["compute"]["cpu_jobs"][rule]
            if "minutes" not in spec:
                raise UserInputError(f"config key compute.cpu_jobs.{rule}: no minutes, and no plan prices it")
            memory, runtime = _mem_mb(config, spec["memory_gb"]), _runtime(config, spec["minutes"] * 60)
            basis = "not in all at this scale: compute.cpu_jobs"
            found.append(Request(rule, 0, spec["cpus"], memory, runtime, spec["minutes"], 0, basis))
    return found


# ---------------------------------------------------------------- the file


def read_site(path: Path) -> Site:
    """The site values of an existing profile (the placeholders where it has none)."""
    if not Path(path).is_file():
        return Site()
    try:
        content = yaml.safe_load(Path(path).read_text()) or {}
    except yaml.YAMLError as error:
        raise UserInputError(f"{path}: not valid YAML ({error})") from None
    default = content.get("default-resources") or {}
    placeholders = Site()
    cpu = [
        resources["slurm_partition"]
        for resources in (content.get("set-resources") or {}).values()
        if isinstance(resources, Mapping) and "slurm_partition" in resources
    ]
    return Site(
        account=str(default.get("slurm_account", placeholders.account)),
        gpu_partition=str(default.get("slurm_partition", placeholders.gpu_partition)),
        cpu_partition=str(cpu[0]) if cpu else placeholders.cpu_partition,
    )


HEADER = """\
# Paper scale on an H200 cluster through the SLURM executor plugin.
# WRITTEN BY `python -m workflow_scripts plan profile` from config.yaml (the compute plan's upper
# estimates, compute.profile_margin): do not edit by hand. Set three values once, below: the
# account and the GPU partition (default-resources), the CPU partition (the first CPU-only rule,
# which the others refer to); `plan profile` keeps them when it rewrites the file after a change
# of config.yaml. Anything else: layer a profile of your own after this one (docs/paper-scale.md).
executor: slurm
jobs: 64
# Downloads and provenance records run on the submit host (localrules): at most this many at once.
local-cores: 4
# A failed job is resubmitted once by Snakemake (a preempted or timed-out training resumes from its
# last checkpoint, a generation from its shards); SLURM's own requeue stays the site's default and
# keeps the job's id, which the executor keeps following. A job that still fails stops only its own
# downstream: keep-going schedules everything independent of it, and its log is printed at the end.
retries: 1
keep-going: true
show-failed-logs: true
rerun-incomplete: true
latency-wait: 60
software-deployment-method: conda
# With training.container, rules run in the image see the node's GPUs (ignored without one).
apptainer-args: "--nv"
slurm-init-seconds-before-status-checks: 40
"""


def _quoted(text: str) -> str:
    return json.dumps(text)  # a YAML double-quoted scalar


def render(config: Mapping[str, Any], found: Sequence[Request], site: Site) -> str:
    """The profile's text: the fixed options, then default-resources and one block per rule."""
    margin = config["compute"]["profile_margin"]
    lines = [
        HEADER.rstrip("\n"),
        "",
        "default-resources:",
        f"  slurm_account: {_quoted(site.account)}  # <- set once: `sacctmgr show assoc user=$USER`",
        f"  slurm_partition: {_quoted(site.gpu_partition)}  # <- set once: the H200 partition (GPU rules)",
        "  # Every rule has its own block below; these are for a rule added without one.",
        "  runtime: 60",
        "  mem_mb: 16000",
        "  cpus_per_task: 2",
        "  # Plain numbers, never expressions: Snakemake's built-in default",
        "  # `disk_mb=max(2*input.size_mb, 1000)` stats every job's inputs, which made",
        "  # a dry run of `all` 1.3 s slower. Resources are constants for the same reason.",
        "  disk_mb: 50000",
        "",
        f"# runtime: the plan's upper estimate x {margin['runtime_factor']:g} + "
        f"{margin['runtime_minutes']:g} min, rounded up to {ROUND_MINUTES} min; mem_mb: its need x "
        f"{margin['memory_factor']:g}.",
        "set-resources:",
    ]
    sections = (
        ("CPU-only rules, on the CPU partition named once on the first of them", "cpu"),
        (
            "GPU rules, on default-resources' slurm_partition. All but the Megatron allocations\n"
            "  # (which ask for their own nodes) run on one node: the executor asks for a job's GPUs\n"
            "  # in all (--gpus), which SLURM may spread over nodes where no node has them all free,\n"
            "  # and the job's one task then cannot start its step (seen on the CI cluster)",
            "gpu",
        ),
    )
    for heading, partition in sections:
        group = [request for request in found if request.partition == partition]
        lines += [f"  # {heading}"] if group else []
        for index, request in enumerate(group):
            lines += [f"  # {request.basis}", f"  {request.rule}:"]
            if partition == "cpu" and index == 0:
                lines.append(
                    f"    slurm_partition: &{CPU_ANCHOR} {_quoted(site.cpu_partition)}  "
                    "# <- set once: a CPU-only partition (every CPU rule below refers to it)"
                )
            elif partition == "cpu":
                lines.append(f"    slurm_partition: *{CPU_ANCHOR}")
            lines += [
                f"    runtime: {request.runtime}",
                f"    mem_mb: {request.mem_mb}",
                f"    cpus_per_task: {request.cpus}",
            ]
            if request.gpus and request.rule not in ALLOCATION_RULES:
                lines += [f"    gpu: {request.gpus}", "    nodes: 1"]
    return "\n".join(lines) + "\n"


def short_runtimes(profile: Mapping[str, Any], found: Sequence[Request]) -> list[str]:
    """Rules whose runtime in ``profile`` (its resolved content) is below the plan's upper estimate."""
    default = profile.get("default-resources") or {}
    per_rule = profile.get("set-resources") or {}
    short = []
    for request in found:
        runtime = {**default, **per_rule.get(request.rule, {})}.get("runtime")
        if runtime is None or float(runtime) < request.upper_minutes:
            upper = f"{request.upper_minutes:.0f}"
            short.append(f"{request.rule}: runtime {runtime} min, the plan's upper estimate {upper} min")
    return short
