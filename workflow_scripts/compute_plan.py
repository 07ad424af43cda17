"""The compute plan of a target: GPU-hours and node-hours of every job class, before submission.

A table or figure (or ``all`` of them) expands through :func:`registry.closure` into
trainings, priors, probes and evaluations; each is priced from the registry's sizes and the
throughput figures of the config's ``compute`` section. Those figures are estimates (the
paper reports no throughput) and every sequence is counted at its full length, so a plan is
an upper bound meant for budgeting and SLURM runtimes, not a prediction.

Training costs 6 FLOPs and a forward pass 2 FLOPs per active parameter and token (attention
ignored), at ``model_flops_utilization`` of ``gpu_peak_tflops``; generation is priced by an
assumed decode rate per GPU instead, because sampling is bound by memory, not FLOPs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from workflow_scripts import registry
from workflow_scripts.errors import UserInputError
from workflow_scripts.registry import BASE, Closure, total_steps

ALL = "all"
TRAIN_FLOPS_PER_PARAMETER_TOKEN = 6
FORWARD_FLOPS_PER_PARAMETER_TOKEN = 2
SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class JobClass:
    """One kind of job of a plan: how many, on how many GPUs each, and their summed cost.

    ``longest_job_hours`` is the wall time of the costliest job of the class, which is what
    a SLURM runtime limit must allow.
    """

    name: str
    jobs: int
    gpus_per_job: int
    gpu_hours: float
    node_hours: float
    longest_job_hours: float


@dataclass(frozen=True)
class Plan:
    """The priced closure of a target; ``rows`` are the training-split sizes it was priced with."""

    target: str
    classes: tuple[JobClass, ...]
    rows: Mapping[str, int]
    gpus_per_node: int
    source: str

    @property
    def jobs(self) -> int:
        return sum(job_class.jobs for job_class in self.classes)

    @property
    def gpu_hours(self) -> float:
        return sum(job_class.gpu_hours for job_class in self.classes)

    @property
    def node_hours(self) -> float:
        return self.gpu_hours / self.gpus_per_node


def target_closure(config: Mapping[str, Any], target: str) -> Closure:
    """Units of work of one table or figure, or of every one for ``all``.

    The union of sets counts a unit shared by several outputs (the SFT baseline of most
    tables) once, as Snakemake runs it once.
    """
    entries = registry.outputs(config)
    if target == ALL:
        ids: Sequence[str] = list(entries)
    elif target in entries:
        ids = [target]
    else:
        raise UserInputError(f"unknown target {target!r} (known: {ALL}, {', '.join(sorted(entries))})")
    closures = [registry.closure(config, output_id) for output_id in ids]
    return Closure(
        **{
            field.name: frozenset().union(*(getattr(closure, field.name) for closure in closures))
            for field in fields(Closure)
        }
    )


def training_rows(config: Mapping[str, Any], closure: Closure, rows: Mapping[str, int]) -> dict[str, int]:
    """Training-split rows of every corpus the closure trains on or passes through a frozen base.

    A corpus' ``train_rows`` when it is a count, else the caller's: ``null`` keeps every
    eligible row, a number known only once the corpus is built.
    """
    for corpus in rows:
        if corpus not in config["corpora"]:
            known = ", ".join(sorted(config["corpora"]))
            raise UserInputError(f"rows given for unknown corpus {corpus!r} (known: {known})")
    needed = {t.corpus for t in closure.trainings} | {p.corpus for p in closure.priors if p.kind == BASE}
    counts = {}
    for corpus in sorted(needed):
        count = rows.get(corpus, config["corpora"][corpus]["train_rows"])
        if count is None:
            raise UserInputError(
                f"corpus {corpus!r} has train_rows: null (every eligible row): "
                f"give its training-split row count (--rows {corpus}=N)"
            )
        counts[corpus] = count
    return counts


def flops_gpu_seconds(config: Mapping[str, Any], model: str, tokens: int, flops_per_token: int) -> float:
    """GPU-seconds of ``flops_per_token`` x active parameters x ``tokens`` at the assumed utilisation."""
    compute = config["compute"]
    if model not in compute["active_parameters_billion"]:
        raise UserInputError(f"config key compute.active_parameters_billion: no entry for model {model!r}")
    flops = flops_per_token * compute["active_parameters_billion"][model] * 1e9 * tokens
    return flops / (compute["model_flops_utilization"] * compute["gpu_peak_tflops"] * 1e12)


def training_tokens(config: Mapping[str, Any], rows: int) -> int:
    """Tokens of one run: every optimizer step's global batch at the full sequence length."""
    training = config["training"]
    steps = total_steps(rows, training["global_batch_size"], training["epochs"])
    return steps * training["global_batch_size"] * training["sequence_length"]


def generation_tokens(config: Mapping[str, Any]) -> int:
    """Tokens one evaluated checkpoint generates: every item, every repeat, at ``max_new_tokens``."""
    evaluation = config["evaluation"]
    cap = evaluation["items_per_benchmark"]
    items = sum(
        benchmark["rows"] if cap is None else min(benchmark["rows"], cap)
        for benchmark in config["benchmarks"].values()
    )
    return items * evaluation["repeats"] * evaluation["max_new_tokens"]


def _job_class(name: str, gpu_seconds: Sequence[float], gpus_per_job: int, gpus_per_node: int) -> JobClass:
    gpu_hours = sum(gpu_seconds) / SECONDS_PER_HOUR
    return JobClass(
        name=name,
        jobs=len(gpu_seconds),
        gpus_per_job=gpus_per_job,
        gpu_hours=gpu_hours,
        node_hours=gpu_hours / gpus_per_node,
        longest_job_hours=max(gpu_seconds, default=0.0) / SECONDS_PER_HOUR / gpus_per_job,
    )


def plan(config: Mapping[str, Any], target: str, rows: Mapping[str, int] | None = None) -> Plan:
    """Price ``target`` of a validated config; ``rows`` adds or overrides training-split sizes.

    Only base priors need the GPU (a forward pass of the frozen base over the training
    split); shuffled priors are CPU permutations of them and are not priced.
    """
    closure = target_closure(config, target)
    counts = training_rows(config, closure, rows or {})
    parallelism = config["training"]["parallelism"]
    per_node = parallelism["gpus_per_node"]
    sequence_length = config["training"]["sequence_length"]
    train, forward = TRAIN_FLOPS_PER_PARAMETER_TOKEN, FORWARD_FLOPS_PER_PARAMETER_TOKEN
    trainings = [
        flops_gpu_seconds(config, t.model, training_tokens(config, counts[t.corpus]), train)
        for t in sorted(closure.trainings, key=repr)
    ]
    priors = [
        flops_gpu_seconds(config, p.model, counts[p.corpus] * sequence_length, forward)
        for p in sorted(closure.priors, key=repr)
        if p.kind == BASE
    ]
    probes = [
        flops_gpu_seconds(config, p.model, config["corpora"][p.corpus]["probe_tokens"], forward)
        for p in sorted(closure.probes, key=repr)
    ]
    generation = generation_tokens(config) / config["compute"]["generation_tokens_per_gpu_second"]
    generations = [generation] * len(closure.evaluations)
    classes = (
        _job_class("trainings", trainings, parallelism["nodes"] * per_node, per_node),
        _job_class("priors", priors, 1, per_node),
        _job_class("probes", probes, 1, per_node),
        _job_class("generations", generations, config["evaluation"]["data_parallel"], per_node),
    )
    return Plan(target, classes, counts, per_node, config["compute"]["source"])


def render(plan: Plan) -> str:
    """The plan as a fixed-width table, ending with where its throughput figures come from."""
    row = "{:<12}{:>6}{:>10}{:>12}{:>12}{:>16}"
    lines = [
        f"compute plan: {plan.target}",
        row.format("job class", "jobs", "GPUs/job", "GPU-hours", "node-hours", "longest job h"),
    ]
    for job in plan.classes:
        lines.append(
            row.format(
                job.name,
                job.jobs,
                job.gpus_per_job,
                f"{job.gpu_hours:.1f}",
                f"{job.node_hours:.1f}",
                f"{job.longest_job_hours:.2f}",
            )
        )
    total = row.format("total", plan.jobs, "", f"{plan.gpu_hours:.1f}", f"{plan.node_hours:.1f}", "")
    lines.append(total.rstrip())
    rows = ", ".join(f"{corpus}={count}" for corpus, count in plan.rows.items()) or "none"
    lines.append(f"node: {plan.gpus_per_node} GPUs; training-split rows: {rows}")
    lines.append("upper bound: every sequence at full length; shuffled priors run on CPU (not priced)")
    lines.append(f"source: {plan.source}")
    return "\n".join(lines)
