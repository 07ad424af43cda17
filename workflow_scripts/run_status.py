"""Where a run stands: each output complete or the jobs it still needs, SLURM's jobs, GPU-hours.

Pure functions over what :mod:`workflow_scripts.status_cli` gathers: Snakemake's dry run of
the targets in the checkout (its job blocks with their files),
``squeue``'s lines, and the provenance records under ``results/``. One dry run of every
target serves them all: a job counts for each output whose files it reaches, through the
inputs of the jobs still to run. GPUs per job come from the compute plan's job classes, one
per rule (``compute_plan.plan``), so that GPU-hours spent and left are counted as the plan
counts them: billed GPUs (a whole node's for an exclusive training).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The rule of each command that runs on GPUs (a record names its ``command``, not its rule; the
# plan's job classes are rules). tests/test_status.py checks it against the rules' shell commands.
COMMAND_RULE = {
    "train megatron": "train_megatron",
    "train megatron-import": "megatron_import",
    "train megatron-export": "export_megatron",
    "priors compute": "prior",
    "probe routes": "probe_routes",
    "evaluate generate": "generate",
    "evaluate likelihood": "likelihood",
}
# What ``status`` asks ``squeue`` for: id, state, elapsed time, nodes, job name, comment (last:
# the SLURM executor plugin's comment, ``rule_<rule>_wildcards_<values joined by _>``).
SQUEUE_FORMAT = "%i|%T|%M|%D|%j|%k"
_JOB_HEADER = re.compile(r"^(?:local)?rule (\w+):$")
_JOB_FIELD = re.compile(r"^    (\w+): (.*)$")
_PLUGIN_COMMENT = re.compile(r"^rule_(\w+?)(?:_wildcards_(.*))?$")


@dataclass(frozen=True)
class PlannedJob:
    """One job of a dry run: its rule and files."""

    jobid: int
    rule: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class OutputStatus:
    """One table or figure: its files missing now, and the jobs it still needs by rule."""

    output_id: str
    missing_files: tuple[str, ...]
    jobs: Mapping[str, int]  # rule -> jobs still to run in its closure, upstream rules first
    gpu_hours_left: float

    @property
    def state(self) -> str:
        """``complete``; ``outdated`` (files present, jobs would rerun them); ``missing``."""
        if self.missing_files:
            return "missing"
        return "outdated" if self.jobs else "complete"


@dataclass(frozen=True)
class SlurmJob:
    """One line of ``squeue --me``; ``rule`` and ``wildcards`` from the plugin's comment (None: not ours)."""

    job_id: str
    state: str
    elapsed: str
    nodes: str
    name: str
    rule: str | None
    wildcards: str | None


@dataclass(frozen=True)
class GpuHours:
    """GPU-hours of one GPU rule: spent by its finished jobs, left by those still to run."""

    rule: str
    gpus_per_job: int
    spent: float
    spent_jobs: int
    left: float
    left_jobs: int


@dataclass
class Spent:
    """The provenance records read: GPU-hours and jobs by GPU rule, and what could not be counted."""

    gpu_hours: dict[str, float] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    records: int = 0
    under_slurm: int = 0
    unreadable: list[str] = field(default_factory=list)


def planned_jobs(text: str) -> list[PlannedJob]:
    """The jobs of a dry run's output (``snakemake -n``) with their files, upstream rules first."""
    jobs: list[PlannedJob] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is not None:
            jobs.append(PlannedJob(**current))

    for line in text.splitlines():
        if header := _JOB_HEADER.match(line):
            close()
            current = {"jobid": -1, "rule": header.group(1), "inputs": (), "outputs": ()}
        elif current is not None and (entry := _JOB_FIELD.match(line)):
            key, value = entry.groups()
            if key in ("input", "output"):
                current[f"{key}s"] = tuple(os.path.normpath(path) for path in value.split(", "))
            elif key == "jobid":
                current["jobid"] = int(value)
        elif current is not None and line.startswith("Job stats:"):
            close()
            current = None
    close()
    return upstream_first(list({job.jobid: job for job in jobs}.values()))


def upstream_first(jobs: Sequence[PlannedJob]) -> list[PlannedJob]:
    """``jobs`` ordered by their rule's deepest job in the DAG of ``jobs``: upstream rules first."""
    producer = {path: job for job in jobs for path in job.outputs}
    depth: dict[int, int] = {}

    def depth_of(job: PlannedJob) -> int:
        pending = [job]
        while pending:  # iteratively: a paper-scale DAG is deeper than Python's recursion is comfortable with
            current = pending[-1]
            upstream = [producer[path] for path in current.inputs if path in producer]
            unknown = [parent for parent in upstream if parent.jobid not in depth]
            if unknown:
                pending.extend(unknown)
                continue
            depth[current.jobid] = 1 + max((depth[parent.jobid] for parent in upstream), default=0)
            pending.pop()
        return depth[job.jobid]

    rule_depth: dict[str, int] = {}
    for job in jobs:
        rule_depth[job.rule] = max(rule_depth.get(job.rule, 0), depth_of(job))
    return sorted(jobs, key=lambda job: (rule_depth[job.rule], job.rule, job.jobid))


def jobs_of(files: Sequence[str], jobs: Sequence[PlannedJob]) -> list[PlannedJob]:
    """The jobs still to run that ``files`` need: their producers and, through their inputs, all upstream."""
    producer = {path: job for job in jobs for path in job.outputs}
    found: dict[int, PlannedJob] = {}
    pending = [os.path.normpath(path) for path in files]
    while pending:
        job = producer.get(pending.pop())
        if job is not None and job.jobid not in found:
            found[job.jobid] = job
            pending.extend(job.inputs)
    order = {job.jobid: index for index, job in enumerate(jobs)}
    return sorted(found.values(), key=lambda job: order[job.jobid])


def rule_counts(jobs: Iterable[PlannedJob]) -> dict[str, int]:
    """Jobs per rule, rules in the order the dry run first lists them."""
    return dict(Counter(job.rule for job in jobs))


def hours_left(jobs: Iterable[PlannedJob], mean_gpu_hours: Mapping[str, float]) -> float:
    """GPU-hours of ``jobs``: each at its rule's mean GPU-hours per job in the plan (0 for CPU rules)."""
    return sum(mean_gpu_hours.get(job.rule, 0.0) for job in jobs)


def mean_gpu_hours(classes: Iterable[Any]) -> dict[str, float]:
    """Mean GPU-hours per job of each of a plan's job classes (``compute_plan.JobClass``, one per rule)."""
    return {c.name: c.gpu_hours / c.jobs for c in classes if c.jobs}


def output_status(
    output_id: str,
    files: Sequence[str],
    missing: Sequence[str],
    jobs: Sequence[PlannedJob],
    mean_hours: Mapping[str, float],
) -> OutputStatus:
    """The state of one output from its files (those ``missing`` now) and the dry run's ``jobs``."""
    needed = jobs_of(files, jobs)
    return OutputStatus(output_id, tuple(missing), rule_counts(needed), hours_left(needed, mean_hours))


def spent_hours(records: Iterable[tuple[str, Any]], gpus_per_job: Mapping[str, int]) -> Spent:
    """GPU-hours finished jobs spent: each record's ``wall_seconds`` x its rule's GPUs per job.

    ``records``: (path, parsed record, or the reason it could not be read); ``gpus_per_job`` by
    rule. A record of a CPU job is counted among the records only.
    """
    spent = Spent()
    for path, record in records:
        if not isinstance(record, Mapping):
            spent.unreadable.append(f"{path}: {record}")
            continue
        if "command" not in record or "wall_seconds" not in record:
            continue  # not a job's record
        spent.records += 1
        spent.under_slurm += bool(record.get("slurm_job_id"))
        name = COMMAND_RULE.get(str(record["command"]))
        if name is not None and gpus_per_job.get(name, 0):
            hours = float(record["wall_seconds"]) * gpus_per_job.get(name, 0) / 3600
            spent.gpu_hours[name] = spent.gpu_hours.get(name, 0.0) + hours
            spent.jobs[name] = spent.jobs.get(name, 0) + 1
    return spent


def gpu_hours(
    classes: Iterable[Any], spent: Spent, needed: Iterable[PlannedJob], mean_hours: Mapping[str, float]
) -> list[GpuHours]:
    """Spent and left GPU-hours of each GPU rule among the plan's job classes."""
    left = Counter(job.rule for job in needed)
    return [
        GpuHours(
            rule=c.name,
            gpus_per_job=c.gpus_per_job,
            spent=spent.gpu_hours.get(c.name, 0.0),
            spent_jobs=spent.jobs.get(c.name, 0),
            left=left[c.name] * mean_hours.get(c.name, 0.0),
            left_jobs=left[c.name],
        )
        for c in classes
        if c.gpus_per_job
    ]


def slurm_jobs(text: str) -> list[SlurmJob]:
    """``squeue --format=SQUEUE_FORMAT`` lines, each mapped to its rule where the plugin named it."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        job_id, state, elapsed, nodes, name, comment = (line.split("|", 5) + [""] * 6)[:6]
        rule, wildcards = plugin_comment(comment.strip())
        jobs.append(
            SlurmJob(
                job_id.strip(), state.strip(), elapsed.strip(), nodes.strip(), name.strip(), rule, wildcards
            )
        )
    return jobs


def plugin_comment(comment: str) -> tuple[str | None, str | None]:
    """(rule, wildcard values) of the SLURM executor plugin's job comment; (None, None) for another job's.

    The plugin writes ``rule_<rule>`` or ``rule_<rule>_wildcards_<values joined by _>``, slashes
    in values as ``_``; rule names hold ``_`` too, so the rule ends at the first ``_wildcards_``.
    """
    found = _PLUGIN_COMMENT.match(comment)
    return (found.group(1), found.group(2)) if found else (None, None)


@dataclass(frozen=True)
class Status:
    """Everything ``status`` reports, for text (:func:`render`) or JSON."""

    profiles: tuple[str, ...]
    config_files: tuple[str, ...]
    outputs: tuple[OutputStatus, ...]
    needed: Mapping[str, int]  # rule -> jobs still to run for all the outputs together
    slurm: tuple[SlurmJob, ...] | None  # None: squeue could not say (``slurm_note`` says why)
    slurm_note: str
    gpu: tuple[GpuHours, ...]
    spent: Spent


GPU_SOURCE = "billed GPUs per job from the compute plan's job classes (python -m workflow_scripts plan)"
SPENT_BASIS = (
    "spent: each finished job's wall time from its provenance record under results/ x its rule's GPUs "
    "(failed, preempted and running attempts leave no record: sacct has them)"
)
LEFT_BASIS = (
    "left: the jobs still to run x the mean GPU-hours per job of their rule in `plan all` "
    "(per output: in `plan <output>`); `plan` gives the ranges and takes measured rates"
)


def _rules_text(jobs: Mapping[str, int]) -> str:
    return ", ".join(f"{rule} {count}" for rule, count in jobs.items())


def render(status: Status) -> str:
    """The status as text: one line per output, SLURM's jobs, GPU-hours by job class."""
    profile = ", ".join(status.profiles)
    config = ", ".join(status.config_files)
    lines = [f"status under profile {profile} (config files: {config})"]
    width = max([len(output.output_id) for output in status.outputs] + [len("output")])
    row = f"{{:<{width}}}  {{:<9}}{{:>6}}{{:>12}}  {{}}"
    lines.append(row.format("output", "state", "jobs", "GPU-h left", "jobs by rule"))
    for output in status.outputs:
        count = sum(output.jobs.values())
        left = f"{output.gpu_hours_left:.1f}" if count else ""
        lines.append(row.format(output.output_id, output.state, count or "", left, _rules_text(output.jobs)))
    complete = sum(output.state == "complete" for output in status.outputs)
    total = sum(status.needed.values())
    lines.append(
        f"{complete} of {len(status.outputs)} complete; {total} jobs still to run for them together "
        "(a job several outputs need counts once)" + (f": {_rules_text(status.needed)}" if total else "")
    )
    lines.append("")
    if status.slurm is None:
        lines.append(f"running now: {status.slurm_note}")
    else:
        count = len(status.slurm)
        lines.append(f"running now: {count} SLURM job{'' if count == 1 else 's'} of yours (squeue --me)")
        for job in status.slurm:
            what = (
                f"{job.rule} {job.wildcards or ''}".rstrip()
                if job.rule
                else f"{job.name} (not a Snakemake job)"
            )
            lines.append(f"  {job.job_id:<10} {job.state:<11} {job.elapsed:>11} {job.nodes:>4} nodes  {what}")
    lines.append("")
    lines.append(f"GPU-hours, {GPU_SOURCE}:")
    gpu_row = "{:<17}{:>9}{:>12}{:>8}{:>12}{:>8}"
    lines.append(gpu_row.format("GPU rule", "GPUs/job", "spent", "jobs", "left", "jobs"))
    for entry in status.gpu:
        lines.append(
            gpu_row.format(
                entry.rule,
                entry.gpus_per_job,
                f"{entry.spent:.1f}",
                entry.spent_jobs,
                f"{entry.left:.1f}",
                entry.left_jobs,
            )  # fmt: skip
        )
    spent = sum(entry.spent for entry in status.gpu)
    left = sum(entry.left for entry in status.gpu)
    lines.append(gpu_row.format("total", "", f"{spent:.1f}", "", f"{left:.1f}", "").rstrip())
    records = status.spent
    lines.append(f"records read: {records.records} ({records.under_slurm} from SLURM jobs)")
    lines += [f"  unreadable: {reason}" for reason in records.unreadable]
    lines += [SPENT_BASIS, LEFT_BASIS]
    return "\n".join(lines)
