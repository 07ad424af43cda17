"""The compute plan of a target: GPU-hours and node-hours of every job class, before submission.

A table or figure (or ``all`` of them) expands through :func:`registry.closure` into
trainings, priors, probes and evaluations; each is priced from the registry's sizes and the
throughput figures of the config's ``compute`` section. Those figures are estimates (the
paper reports no throughput), so every class gets a central figure and a range, and every
sequence is counted at its full length: a plan is meant for budgeting and SLURM runtimes,
not a prediction. A first job's measured step time or decode rate replaces the estimate.

Training costs 6 FLOPs per active parameter and token plus the attention scores and weighted
values over the sequence (counted as in PaLM, Chowdhery et al. 2022, app. B, halved for the
causal mask), a forward pass a third of that, at a model-FLOPs utilisation of
``gpu_peak_tflops``; generation is priced by a decode rate per GPU instead, because sampling
is bound by memory, not FLOPs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from workflow_scripts import registry
from workflow_scripts.errors import UserInputError
from workflow_scripts.registry import BASE, Closure, total_steps

ALL = "all"
FORWARD, TRAIN = 1, 3  # passes over the weights: forward; forward + backward (twice the forward)
SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class Cost:
    """GPU-seconds at the central estimate and at the two ends of its range."""

    central: float
    low: float
    high: float

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.central + other.central, self.low + other.low, self.high + other.high)


@dataclass(frozen=True)
class Calibration:
    """Measurements that replace estimates: seconds per optimizer step by model, decode tokens/s per GPU."""

    step_seconds: Mapping[str, float] = field(default_factory=dict)
    decode_rate: float | None = None


@dataclass(frozen=True)
class JobClass:
    """One kind of job of a plan: how many, on how many GPUs each, and their summed cost.

    ``longest_job_hours`` is the wall time of the costliest job of the class (at the central
    estimate), which is what a SLURM runtime limit must allow; ``gpu_hours_low``/``_high``
    are the class's GPU-hours at the two ends of the throughput range.
    """

    name: str
    jobs: int
    gpus_per_job: int
    gpu_hours: float
    node_hours: float
    longest_job_hours: float
    gpu_hours_low: float
    gpu_hours_high: float


@dataclass(frozen=True)
class Plan:
    """The priced closure of a target; ``rows`` are the training-split sizes it was priced with."""

    target: str
    classes: tuple[JobClass, ...]
    rows: Mapping[str, int]
    gpus_per_node: int
    source: str
    basis: tuple[str, ...]  # how each class was priced, one line each

    @property
    def jobs(self) -> int:
        return sum(job_class.jobs for job_class in self.classes)

    @property
    def gpu_hours(self) -> float:
        return sum(job_class.gpu_hours for job_class in self.classes)

    @property
    def node_hours(self) -> float:
        return self.gpu_hours / self.gpus_per_node

    @property
    def gpu_hours_range(self) -> tuple[float, float]:
        return (
            sum(job_class.gpu_hours_low for job_class in self.classes),
            sum(job_class.gpu_hours_high for job_class in self.classes),
        )


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
            part.name: frozenset().union(*(getattr(closure, part.name) for closure in closures))
            for part in fields(Closure)
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


def flops_per_token(config: Mapping[str, Any], model: str, passes: int) -> float:
    """FLOPs per token of ``passes`` passes (``FORWARD`` or ``TRAIN``) at the training sequence length.

    ``2 x passes`` per active parameter, plus the attention scores and weighted values: a
    forward pass costs ``2 x heads x (qk + v head dims)`` per layer and attended position, over
    half the sequence on average under the causal mask (shapes: ``compute.attention``).
    """
    compute = config["compute"]
    for key in ("active_parameters_billion", "attention"):
        if model not in compute[key]:
            raise UserInputError(f"config key compute.{key}: no entry for model {model!r}")
    shape = compute["attention"][model]
    attended = config["training"]["sequence_length"] / 2
    attention = 2 * shape["layers"] * shape["heads"] * (shape["qk_head_dim"] + shape["v_head_dim"]) * attended
    return passes * (2 * compute["active_parameters_billion"][model] * 1e9 + attention)


def flops_cost(config: Mapping[str, Any], flops: float) -> Cost:
    """GPU-seconds of ``flops`` at the central, highest and lowest assumed utilisation."""
    compute = config["compute"]
    peak = compute["gpu_peak_tflops"] * 1e12
    worst, best = compute["model_flops_utilization_range"]
    return Cost(
        flops / (compute["model_flops_utilization"] * peak), flops / (best * peak), flops / (worst * peak)
    )


def implied_mfu(config: Mapping[str, Any], model: str, step_seconds: float) -> float:
    """The model-FLOPs utilisation a measured optimizer step time of ``model``'s training implies."""
    training = config["training"]
    tokens = training["global_batch_size"] * training["sequence_length"]
    parallelism = training["parallelism"]
    gpus = parallelism["nodes"] * parallelism["gpus_per_node"]
    peak = config["compute"]["gpu_peak_tflops"] * 1e12
    return flops_per_token(config, model, TRAIN) * tokens / (step_seconds * gpus * peak)


def training_steps(config: Mapping[str, Any], rows: int) -> int:
    training = config["training"]
    return total_steps(rows, training["global_batch_size"], training["epochs"])


def training_tokens(config: Mapping[str, Any], rows: int) -> int:
    """Tokens of one run: every optimizer step's global batch at the full sequence length."""
    training = config["training"]
    return training_steps(config, rows) * training["global_batch_size"] * training["sequence_length"]


def generation_tokens(config: Mapping[str, Any]) -> int:
    """Tokens one evaluated checkpoint generates: every item, every repeat, at ``max_new_tokens``."""
    evaluation = config["evaluation"]
    cap = evaluation["items_per_benchmark"]
    items = sum(
        benchmark["rows"] if cap is None else min(benchmark["rows"], cap)
        for benchmark in config["benchmarks"].values()
    )
    return items * evaluation["repeats"] * evaluation["max_new_tokens"]


def _job_class(name: str, costs: Sequence[Cost], gpus_per_job: int, gpus_per_node: int) -> JobClass:
    total = sum(costs, Cost(0.0, 0.0, 0.0))
    gpu_hours = total.central / SECONDS_PER_HOUR
    return JobClass(
        name=name,
        jobs=len(costs),
        gpus_per_job=gpus_per_job,
        gpu_hours=gpu_hours,
        node_hours=gpu_hours / gpus_per_node,
        longest_job_hours=max((c.central for c in costs), default=0.0) / SECONDS_PER_HOUR / gpus_per_job,
        gpu_hours_low=total.low / SECONDS_PER_HOUR,
        gpu_hours_high=total.high / SECONDS_PER_HOUR,
    )


def _basis(config: Mapping[str, Any], calibration: Calibration) -> tuple[str, ...]:
    """One line per way of pricing: the FLOPs model and its utilisation, the decode rate, measurements."""
    compute = config["compute"]
    worst, best = compute["model_flops_utilization_range"]
    mfu = compute["model_flops_utilization"]
    lines = [
        f"trainings, priors, probes: 6N (forward 2N) + attention at {config['training']['sequence_length']} "
        f"tokens FLOPs per token, MFU {mfu:.2f} (range {worst:.2f}-{best:.2f}) "
        f"of {compute['gpu_peak_tflops']} TFLOP/s"
    ]
    for model, seconds in sorted(calibration.step_seconds.items()):
        mfu = implied_mfu(config, model, seconds)
        lines.append(f"trainings of {model}: measured {seconds:g} s per step (MFU {mfu:.2f})")
    if calibration.decode_rate is None:
        slow, fast = compute["generation_tokens_per_gpu_second_range"]
        rate = f"assumed {compute['generation_tokens_per_gpu_second']:g} (range {slow:g}-{fast:g})"
    else:
        rate = f"measured {calibration.decode_rate:g}"
    lines.append(f"generations: {rate} decoded tokens/s per GPU")
    lines.append(
        "calibrate: --step-seconds MODEL=S from a first training's log (Bridge's 'elapsed time per "
        "iteration'), --decode-rate R from a first generation (vLLM's output tokens/s over its GPUs)"
    )
    return tuple(lines)


def plan(
    config: Mapping[str, Any],
    target: str,
    rows: Mapping[str, int] | None = None,
    calibration: Calibration | None = None,
) -> Plan:
    """Price ``target`` of a validated config; ``rows`` adds or overrides training-split sizes.

    Only base priors need the GPU (a forward pass of the frozen base over the training
    split); shuffled priors are CPU permutations of them and are not priced. ``calibration``:
    a measured step time prices a model's trainings exactly (steps x seconds x GPUs), a
    measured decode rate the generations.
    """
    calibration = calibration or Calibration()
    unknown = sorted(set(calibration.step_seconds) - set(config["models"]))
    if unknown:
        raise UserInputError(
            f"--step-seconds for unknown model {unknown[0]!r} (known: {', '.join(config['models'])})"
        )
    closure = target_closure(config, target)
    counts = training_rows(config, closure, rows or {})
    parallelism = config["training"]["parallelism"]
    per_node = parallelism["gpus_per_node"]
    gpus_per_training = parallelism["nodes"] * per_node
    sequence_length = config["training"]["sequence_length"]

    def training(model: str, rows: int) -> Cost:
        if model in calibration.step_seconds:
            measured = training_steps(config, rows) * calibration.step_seconds[model] * gpus_per_training
            return Cost(measured, measured, measured)
        return flops_cost(config, flops_per_token(config, model, TRAIN) * training_tokens(config, rows))

    def forward(model: str, tokens: int) -> Cost:
        return flops_cost(config, flops_per_token(config, model, FORWARD) * tokens)

    trainings = [training(t.model, counts[t.corpus]) for t in sorted(closure.trainings, key=repr)]
    priors = [
        forward(p.model, counts[p.corpus] * sequence_length)
        for p in sorted(closure.priors, key=repr)
        if p.kind == BASE
    ]
    probes = [
        forward(p.model, config["corpora"][p.corpus]["probe_tokens"])
        for p in sorted(closure.probes, key=repr)
    ]
    compute = config["compute"]
    slow, fast = compute["generation_tokens_per_gpu_second_range"]
    central = compute["generation_tokens_per_gpu_second"]
    if calibration.decode_rate is not None:
        central = slow = fast = calibration.decode_rate
    tokens = generation_tokens(config)
    generations = [Cost(tokens / central, tokens / fast, tokens / slow)] * len(closure.evaluations)
    classes = (
        _job_class("trainings", trainings, gpus_per_training, per_node),
        _job_class("priors", priors, 1, per_node),
        _job_class("probes", probes, 1, per_node),
        _job_class("generations", generations, config["evaluation"]["data_parallel"], per_node),
    )
    return Plan(target, classes, counts, per_node, compute["source"], _basis(config, calibration))


def render(plan: Plan) -> str:
    """The plan as a fixed-width table, ending with where its throughput figures come from."""
    row = "{:<12}{:>6}{:>10}{:>12}{:>20}{:>12}{:>16}"
    lines = [
        f"compute plan: {plan.target}",
        row.format(
            "job class", "jobs", "GPUs/job", "GPU-hours", "GPU-hours range", "node-hours", "longest job h"
        ),
    ]
    for job in plan.classes:
        lines.append(
            row.format(
                job.name,
                job.jobs,
                job.gpus_per_job,
                f"{job.gpu_hours:.1f}",
                f"{job.gpu_hours_low:.1f}-{job.gpu_hours_high:.1f}",
                f"{job.node_hours:.1f}",
                f"{job.longest_job_hours:.2f}",
            )
        )
    low, high = plan.gpu_hours_range
    total = row.format(
        "total", plan.jobs, "", f"{plan.gpu_hours:.1f}", f"{low:.1f}-{high:.1f}", f"{plan.node_hours:.1f}", ""
    )
    lines.append(total.rstrip())
    rows = ", ".join(f"{corpus}={count}" for corpus, count in plan.rows.items()) or "none"
    lines.append(f"node: {plan.gpus_per_node} GPUs; training-split rows: {rows}")
    lines.extend(plan.basis)
    lines.append("every sequence at full length; shuffled priors run on CPU (not priced)")
    lines.append(f"source: {plan.source}")
    return "\n".join(lines)
