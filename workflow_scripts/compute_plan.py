"""The compute plan of a target: its jobs priced, by rule, with its disk and its makespan.

A table or figure (or ``all`` of them, or ``gates``) expands through :func:`registry.closure`
into the jobs of the workflow's rules and the jobs each waits for: trainings with their claims,
imports and exports, priors, probes, generations and their scoring, likelihoods and the CPU
rules between them, each priced by ``plan_costs``. The plan adds them up per rule, prices the
disk the target writes and its makespan on N nodes (``makespan``); ``slurm_profile`` turns each
rule's upper end into its SLURM request. Downloads run on the submit host (``localrules``):
their bytes are counted, not their time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from workflow_scripts import makespan, registry
from workflow_scripts.errors import UserInputError
from workflow_scripts.plan_costs import (
    GB,
    SECONDS_PER_HOUR,
    ZERO,
    Calibration,
    Cost,
    Job,
    Pricer,
    generation_token_bound,
    generation_tokens,
    implied_mfu,
    prior_gb,
    routes_gb,
    state_gb,
    weights_gb,
)
from workflow_scripts.registry import BASE, Closure, Evaluation, Training, own_name

ALL = "all"
GATES = "gates"  # the sanity gates' table: a named target of its own (rules/gates.smk)
# Training rows of corpora whose split keeps every eligible row (train_rows: null), as the
# paper states them: OpenR1-Math-220k, "roughly 94k examples".
PAPER_ROWS = {"openr1math": 94000}
# Rules in the order the plan lists them: GPU rules, then CPU rules.
GPU_RULES = (
    "train_megatron",
    "megatron_import",
    "export_megatron",
    "prior",
    "probe_routes",
    "generate",
    "likelihood",
)
CPU_RULES = (
    "megatron_claim",
    "score",
    "build_corpus",
    "chat_dataset",
    "benchmark_items",
    "benchmark_suite",
    "base_partition",
    "shuffled_priors",
    "retention",
    "table",
    "figure_data",
    "figure",
    "gates",
    "train_local",
)


@dataclass(frozen=True)
class JobClass:
    """The jobs of one rule: how many, what each holds, their summed cost and the longest one.

    ``gpu_hours*`` are billed GPU-hours at the central estimate and the two ends of the range;
    ``job_hours``/``job_hours_high`` the wall time of the rule's longest job at the central
    estimate and at the high end, which is what a SLURM runtime limit must allow.
    """

    name: str
    jobs: int
    gpus_per_job: int
    cpus_per_job: int
    memory_gb: float
    gpu_hours: float
    gpu_hours_low: float
    gpu_hours_high: float
    node_hours: float
    cpu_hours: float
    job_hours: float
    job_hours_high: float


@dataclass(frozen=True)
class Disk:
    """Gigabytes a target writes, by kind (generations as uncompressed text, at the central estimate).

    ``training_work`` is not kept: it is the peak of one running training's work folder (the
    newest resumable checkpoint and, while the next one is written, the one before it).
    """

    base_models: float
    megatron_bases: float
    megatron_checkpoints: float
    hf_checkpoints: float
    generations: float
    generations_bound: float
    routes: float
    priors: float
    training_work: float

    @property
    def kept(self) -> float:
        return (
            self.base_models
            + self.megatron_bases
            + self.megatron_checkpoints
            + self.hf_checkpoints
            + self.generations
            + self.routes
            + self.priors
        )


@dataclass(frozen=True)
class Plan:
    """The priced jobs of a target; ``rows`` are the training-split sizes it was priced with.

    ``generation_bound`` is the generations' billed GPU-seconds with every response at
    ``evaluation.max_new_tokens`` and the slowest decode rate; ``makespan`` its wall seconds on
    ``nodes`` nodes with every job at the central estimate, or all at the low or the high end.
    """

    target: str
    jobs: tuple[Job, ...]
    rows: Mapping[str, int]
    gpus_per_node: int
    disk: Disk
    generation_bound: float
    nodes: int
    makespan: Cost
    source: str
    basis: tuple[str, ...]  # how each class was priced, one line each

    @property
    def classes(self) -> tuple[JobClass, ...]:
        by_rule: dict[str, list[Job]] = {}
        for job in self.jobs:
            by_rule.setdefault(job.rule, []).append(job)
        order = [rule for rule in (*GPU_RULES, *CPU_RULES) if rule in by_rule]
        return tuple(_job_class(rule, by_rule[rule], self.gpus_per_node) for rule in order)

    @property
    def gpu_classes(self) -> tuple[JobClass, ...]:
        return tuple(job_class for job_class in self.classes if job_class.gpus_per_job)

    @property
    def cpu_classes(self) -> tuple[JobClass, ...]:
        return tuple(job_class for job_class in self.classes if not job_class.gpus_per_job)

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


def _job_class(rule: str, jobs: Sequence[Job], gpus_per_node: int) -> JobClass:
    billed = [job.billed_gpus(gpus_per_node) for job in jobs]
    gpu_seconds = sum((job.wall * gpus for job, gpus in zip(jobs, billed, strict=True)), ZERO)
    nodes = [max(job.nodes, 1) for job in jobs]
    return JobClass(
        name=rule,
        jobs=len(jobs),
        gpus_per_job=max(billed),
        cpus_per_job=max(job.cpus for job in jobs),
        memory_gb=max(job.memory_gb for job in jobs),
        gpu_hours=gpu_seconds.central / SECONDS_PER_HOUR,
        gpu_hours_low=gpu_seconds.low / SECONDS_PER_HOUR,
        gpu_hours_high=gpu_seconds.high / SECONDS_PER_HOUR,
        node_hours=gpu_seconds.central / SECONDS_PER_HOUR / gpus_per_node,
        cpu_hours=sum(job.wall.central * job.cpus * n for job, n in zip(jobs, nodes, strict=True))
        / SECONDS_PER_HOUR,
        job_hours=max(job.wall.central for job in jobs) / SECONDS_PER_HOUR,
        job_hours_high=max(job.wall.high for job in jobs) / SECONDS_PER_HOUR,
    )


# ---------------------------------------------------------------- what a target runs


@dataclass(frozen=True)
class Work:
    """A target's closure, and the evaluations whose gold-answer likelihood it reads (the gates)."""

    closure: Closure
    likelihoods: frozenset[Evaluation]
    outputs: tuple[str, ...]  # table and figure ids it renders
    gates: bool  # renders the gates' table


def _union(closures: Iterable[Closure]) -> Closure:
    closures = list(closures)
    return Closure(
        **{
            part.name: frozenset().union(*(getattr(closure, part.name) for closure in closures))
            for part in fields(Closure)
        }
    )


def target_closure(config: Mapping[str, Any], target: str) -> Closure:
    """Units of work of one table or figure, of every one for ``all``, or of the gates.

    The union of sets counts a unit shared by several outputs (the SFT baseline of most
    tables) once, as Snakemake runs it once.
    """
    return target_work(config, target).closure


def target_work(config: Mapping[str, Any], target: str) -> Work:
    """What ``target`` runs: ``all`` is what ``snakemake`` runs by default (the gates at toy scale only),
    ``rehearsal`` what it runs under the rehearsal overlay (its outputs, and its cells up to their runs)."""
    entries = registry.outputs(config)
    if target == ALL:
        ids: Sequence[str] = list(entries)
        gates = config["scale"] == "toy"
    elif target == GATES:
        ids, gates = [], True
    elif target in entries:
        ids, gates = [target], False
    elif target == registry.REHEARSAL and registry.REHEARSAL in config:
        ids, gates = config[registry.REHEARSAL]["outputs"], False
    else:
        rehearsal = [registry.REHEARSAL] if registry.REHEARSAL in config else []
        known = ", ".join([ALL, GATES, *rehearsal, *sorted(entries)])
        raise UserInputError(f"unknown target {target!r} (known: {known})")
    closure = _union(registry.closure(config, output_id) for output_id in ids)
    if target == registry.REHEARSAL:
        closure = _union([closure, registry.cells_closure(config, config[registry.REHEARSAL]["cells"])])
    likelihoods: frozenset[Evaluation] = frozenset()
    if gates:
        from workflow_scripts.report.gates import gate_runs

        runs = gate_runs(config)
        likelihoods = frozenset(
            [Evaluation(model, None, BASE, None) for model in runs.models] + list(runs.sft)
        )
        trainings = {Training(e.model, e.corpus, e.condition, e.seed) for e in runs.sft}
        gate_closure = Closure(
            corpora=frozenset(e.corpus for e in runs.sft),
            priors=frozenset(),
            prior_validations=frozenset(),
            trainings=frozenset(trainings),
            probes=frozenset(),
            evaluations=likelihoods,
        )
        closure = _union([closure, gate_closure])
    return Work(closure, likelihoods, tuple(ids), gates)


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


def _jobs(config: Mapping[str, Any], work: Work, pricer: Pricer) -> list[Job]:
    """Every job of ``work`` with the jobs it waits for (downloads aside: they run first, locally)."""
    closure = work.closure
    megatron = config["training"]["backend"] == "megatron"
    jobs: list[Job] = [pricer.cpu_job("build_corpus", (corpus,), []) for corpus in sorted(closure.corpora)]
    trained_models = sorted({t.model for t in closure.trainings})
    if megatron:
        jobs += [pricer.megatron_import(model) for model in trained_models]
        jobs += [
            pricer.cpu_job("chat_dataset", (corpus,), [("build_corpus", corpus)])
            for corpus in sorted({t.corpus for t in closure.trainings})
        ]
    for prior in sorted(closure.priors, key=repr):
        if prior.kind == BASE:
            jobs.append(pricer.prior(prior.model, prior.corpus))
    shuffles = {(p.model, p.corpus) for p in closure.priors if p.kind != BASE}
    shuffles |= set(closure.prior_validations)
    for model, corpus in sorted(shuffles):
        after = [("prior", model, corpus), ("base_partition", model, corpus)]
        jobs.append(pricer.cpu_job("shuffled_priors", (model, corpus), after))
    trained: dict[Training, tuple] = {}  # the id of the job that writes each training's HF checkpoint
    for run in sorted(closure.trainings, key=repr):
        kind = config["conditions"][run.condition].get("prior")
        prior = (
            None if kind is None else ("prior" if kind == BASE else "shuffled_priors", run.model, run.corpus)
        )
        run_jobs = pricer.training(run, prior)
        jobs += run_jobs
        trained[run] = run_jobs[-1].id
    for probe in sorted(closure.probes, key=repr):
        if probe.condition == BASE:
            jobs.append(pricer.probe(probe.model, probe.corpus, (BASE,), [("build_corpus", probe.corpus)]))
            after = [("probe_routes", probe.model, probe.corpus, BASE)]
            jobs.append(pricer.cpu_job("base_partition", (probe.model, probe.corpus), after))
            continue
        run = (probe.condition, probe.seed)
        checkpoint = _checkpoint_jobs(
            trained, Training(probe.model, probe.corpus, probe.condition, probe.seed)
        )
        jobs.append(
            pricer.probe(probe.model, probe.corpus, run, [*checkpoint, ("build_corpus", probe.corpus)])
        )
        after = [
            ("probe_routes", probe.model, probe.corpus, *run),
            ("probe_routes", probe.model, probe.corpus, BASE),
            ("base_partition", probe.model, probe.corpus),
        ]
        jobs.append(pricer.cpu_job("retention", (probe.model, probe.corpus, *run), after))
    if closure.evaluations:
        benchmarks = sorted(config["benchmarks"])
        jobs += [pricer.cpu_job("benchmark_items", (name,), []) for name in benchmarks]
        jobs.append(pricer.cpu_job("benchmark_suite", (), [("benchmark_items", name) for name in benchmarks]))
    for evaluation in sorted(closure.evaluations, key=repr):
        after = [("benchmark_suite",)]
        if evaluation.condition != BASE:
            after += _checkpoint_jobs(
                trained, Training(evaluation.model, evaluation.corpus, evaluation.condition, evaluation.seed)
            )
        jobs.append(pricer.generate(evaluation, after))
        jobs.append(pricer.score(evaluation))
        if evaluation in work.likelihoods:
            jobs.append(pricer.likelihood(evaluation, after))
    jobs += _report_jobs(config, work, pricer, jobs)
    return jobs


def _checkpoint_jobs(trained: Mapping[Training, tuple], run: Training) -> list[tuple]:
    """The job that writes a probed or evaluated run's checkpoint; none for an own checkpoint (given)."""
    return [] if own_name(run.condition) is not None else [trained[run]]


def _report_jobs(config: Mapping[str, Any], work: Work, pricer: Pricer, jobs: Sequence[Job]) -> list[Job]:
    """Tables, figures and the gates' table, after every result job of their target (an upper bound)."""
    results = [job.id for job in jobs if job.rule in ("score", "retention", "shuffled_priors", "likelihood")]
    report: list[Job] = []
    for output_id in work.outputs:
        if output_id in config["tables"]:
            report.append(pricer.cpu_job("table", (output_id,), results))
        else:
            data = pricer.cpu_job("figure_data", (output_id,), results)
            report += [data, pricer.cpu_job("figure", (output_id,), [data.id])]
    if work.gates:
        report.append(pricer.cpu_job("gates", (), results))
    return report


# ---------------------------------------------------------------- the plan


def _disk(config: Mapping[str, Any], work: Work, counts: Mapping[str, int]) -> Disk:
    closure = work.closure
    megatron = config["training"]["backend"] == "megatron"
    models = (
        {t.model for t in closure.trainings}
        | {p.model for p in closure.priors}
        | {p.model for p in closure.probes}
        | {e.model for e in closure.evaluations}
    )
    trained_models = {t.model for t in closure.trainings}
    chars_per_token = config["probe_pool"]["chars_per_token"]
    trainings = [t.model for t in closure.trainings]
    base_priors = [p for p in closure.priors if p.kind == BASE]
    shuffled = [p for p in closure.priors if p.kind != BASE]
    return Disk(
        base_models=sum(weights_gb(config, model) for model in models),
        megatron_bases=sum(weights_gb(config, model) for model in trained_models) if megatron else 0.0,
        megatron_checkpoints=sum(weights_gb(config, model) for model in trainings) if megatron else 0.0,
        hf_checkpoints=sum(weights_gb(config, model) for model in trainings),
        generations=len(closure.evaluations) * generation_tokens(config).central * chars_per_token / GB,
        generations_bound=len(closure.evaluations) * generation_token_bound(config) * chars_per_token / GB,
        routes=sum(
            routes_gb(config, p.model, config["corpora"][p.corpus]["probe_tokens"]) for p in closure.probes
        ),
        priors=sum(prior_gb(config, p.model, counts[p.corpus]) for p in (*base_priors, *shuffled)),
        training_work=max((2 * state_gb(config, model) for model in trainings), default=0.0)
        if megatron
        else 0.0,
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
    at_cap = compute["responses_at_cap"]
    lines.append(
        f"generations: {rate} decoded tokens/s per GPU over compute.benchmark_tokens' response lengths, "
        f"{at_cap['central']:.0%} of responses (range {at_cap['low']:.0%}-{at_cap['high']:.0%}) "
        f"at max_new_tokens {config['evaluation']['max_new_tokens']}"
    )
    storage = compute["storage_gb_per_second"]
    lines.append(
        f"every job: start-up (compute.startup_seconds) and weights at {storage['central']:g} GB/s per node "
        f"(range {storage['low']:g}-{storage['high']:g}); trainings: a checkpoint every "
        f"{config['training']['checkpoint_every_steps']} steps, written and read back for its digests"
    )
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
    nodes: int | None = None,
) -> Plan:
    """Price ``target`` of a validated config; ``rows`` adds or overrides training-split sizes.

    ``calibration``: a measured step time prices a model's trainings exactly (steps x
    seconds, plus start-up and saves), a measured decode rate the generations. ``nodes``: the
    GPU nodes of the makespan (default: one training's, ``training.parallelism.nodes``).
    """
    calibration = calibration or Calibration()
    unknown = sorted(set(calibration.step_seconds) - set(config["models"]))
    if unknown:
        raise UserInputError(
            f"--step-seconds for unknown model {unknown[0]!r} (known: {', '.join(config['models'])})"
        )
    work = target_work(config, target)
    counts = training_rows(config, work.closure, rows or {})
    pricer = Pricer(config, calibration, counts)
    jobs = _jobs(config, work, pricer)
    per_node = pricer.per_node
    nodes = pricer.training_nodes if nodes is None else nodes
    generations = [job for job in jobs if job.rule == "generate"]
    bound = 0.0
    if generations:
        slowest = pricer.estimates.decode.low
        bound = len(generations) * generation_token_bound(config) / slowest
    return Plan(
        target=target,
        jobs=tuple(jobs),
        rows=counts,
        gpus_per_node=per_node,
        disk=_disk(config, work, counts),
        generation_bound=bound,
        nodes=nodes,
        makespan=_makespan(jobs, nodes, per_node),
        source=config["compute"]["source"],
        basis=_basis(config, calibration),
    )


def _makespan(jobs: Sequence[Job], nodes: int, gpus_per_node: int) -> Cost:
    """Wall seconds of ``jobs`` on ``nodes`` nodes at the central, low and high estimates (``makespan``)."""

    def at(end: str) -> float:
        tasks = [
            makespan.Task(
                job.id,
                getattr(job.wall, end),
                job.gpus if not job.nodes else gpus_per_node,
                job.nodes,
                job.after,
            )
            for job in jobs
        ]
        try:
            return makespan.makespan(tasks, nodes, gpus_per_node)
        except ValueError as error:
            raise UserInputError(f"--nodes {nodes}: {error}") from None

    if nodes < 1:
        raise UserInputError(f"--nodes {nodes}: expected at least one node")
    return Cost(at("central"), at("low"), at("high"))


# ---------------------------------------------------------------- rendering


def _size(gb: float) -> str:
    return f"{gb / 1000:.1f} TB" if gb >= 1000 else f"{gb:.1f} GB" if gb >= 1 else f"{gb * 1000:.0f} MB"


def render(plan: Plan) -> str:
    """The plan as fixed-width tables (GPU rules, CPU rules), its disk, its makespan and its basis."""
    row = "{:<17}{:>6}{:>10}{:>12}{:>20}{:>12}{:>8}{:>9}"
    lines = [
        f"compute plan: {plan.target}",
        row.format(
            "GPU rule", "jobs", "GPUs/job", "GPU-hours", "GPU-hours range", "node-hours", "job h", "job h hi"
        ),
    ]
    for job in plan.gpu_classes:
        lines.append(
            row.format(
                job.name,
                job.jobs,
                job.gpus_per_job,
                f"{job.gpu_hours:.1f}",
                f"{job.gpu_hours_low:.1f}-{job.gpu_hours_high:.1f}",
                f"{job.node_hours:.1f}",
                f"{job.job_hours:.2f}",
                f"{job.job_hours_high:.2f}",
            )
        )
    low, high = plan.gpu_hours_range
    total = row.format(
        "total",
        sum(c.jobs for c in plan.gpu_classes),
        "",
        f"{plan.gpu_hours:.1f}",
        f"{low:.1f}-{high:.1f}",
        f"{plan.node_hours:.1f}",
        "",
        "",
    )
    lines.append(total.rstrip())
    if plan.generation_bound:
        lines.append(
            f"bound: every response at max_new_tokens, at the slowest decode rate: generate "
            f"{plan.generation_bound / SECONDS_PER_HOUR:.1f} GPU-hours "
            "(a job past its runtime resumes from its shards)"
        )
    cpu_row = "{:<17}{:>6}{:>10}{:>12}{:>8}{:>9}"
    lines.append(cpu_row.format("CPU rule", "jobs", "CPUs/job", "CPU-hours", "job h", "job h hi"))
    for job in plan.cpu_classes:
        lines.append(
            cpu_row.format(
                job.name,
                job.jobs,
                job.cpus_per_job,
                f"{job.cpu_hours:.1f}",
                f"{job.job_hours:.2f}",
                f"{job.job_hours_high:.2f}",
            )
        )
    disk = plan.disk
    lines.append(
        f"disk: {_size(disk.kept)} kept: base models {_size(disk.base_models)}, Megatron bases "
        f"{_size(disk.megatron_bases)}, checkpoints {_size(disk.megatron_checkpoints + disk.hf_checkpoints)} "
        f"(Megatron {_size(disk.megatron_checkpoints)}, HF {_size(disk.hf_checkpoints)}), generations "
        f"{_size(disk.generations)} (bound {_size(disk.generations_bound)}), routes {_size(disk.routes)}, "
        f"priors {_size(disk.priors)}; while training, {_size(disk.training_work)} "
        "per running training's work folder"
    )
    span = plan.makespan
    lines.append(
        f"makespan on {plan.nodes} nodes: {span.central / SECONDS_PER_HOUR:.1f} h "
        f"(range {span.low / SECONDS_PER_HOUR:.1f}-{span.high / SECONDS_PER_HOUR:.1f} h): "
        "critical path first, EASY backfill, no queue wait or failure, CPU jobs never wait, downloads done"
    )
    rows = ", ".join(f"{corpus}={count}" for corpus, count in plan.rows.items()) or "none"
    lines.append(f"node: {plan.gpus_per_node} GPUs; training-split rows: {rows}")
    lines.extend(plan.basis)
    lines.append("trainings at full sequence length; exclusive trainings billed for their whole nodes")
    lines.append(f"source: {plan.source}")
    return "\n".join(lines)
