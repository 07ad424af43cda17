"""What one job of each rule costs: its wall time, GPUs, CPUs and memory, from the registry's sizes.

The compute plan (``compute_plan``) asks a :class:`Pricer` for the jobs of a target. Every
price rests on the config's ``compute`` section, estimates (the paper reports no throughput)
that each carry a central figure and a range (:class:`Cost`), and on the registry's sizes.

Training costs 6 FLOPs per active parameter and token plus the attention scores and weighted
values over the sequence (counted as in PaLM, Chowdhery et al. 2022, app. B, halved for the
causal mask), a forward pass a third of that, at a model-FLOPs utilisation of
``gpu_peak_tflops``; training sequences count at their full length. Generation is priced by a
decode rate per GPU instead, because sampling is bound by memory, not FLOPs, over each
benchmark's expected response length (``evaluation.max_new_tokens`` for every response is the
bound). Every job also pays its start-up and loading its weights, trainings their checkpoint
saves; an exclusive job holds its whole nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workflow_scripts.errors import UserInputError
from workflow_scripts.registry import BASE, Evaluation, Training, total_steps

FORWARD, TRAIN = 1, 3  # passes over the weights: forward; forward + backward (twice the forward)
SECONDS_PER_HOUR = 3600
GB = 1e9
# Bytes per parameter: bf16 weights (what an HF checkpoint, a Megatron import and a run's final,
# optimizer-free checkpoint hold), and a resumable Megatron checkpoint under the distributed
# optimizer: bf16 weights + fp32 main weights + Adam's two fp32 moments (2 + 4 + 4 + 4).
WEIGHT_BYTES = 2
STATE_BYTES = 14
PRIOR_BYTES = 4  # float32 (N, 2, L, E)
ROUTE_BYTES = 2  # int16 top-k and float16 probabilities per token and layer (probe/routes.py)
# Copies of a model's weights in host memory: the import and export build the Megatron model
# on the CPU beside the HF weights they read or write, with headroom for Bridge's conversion.
MODEL_COPIES = {"megatron_import": 3, "export_megatron": 3}
# Kinds of job start-up (compute.startup_seconds).
STARTUP_KINDS = ("megatron", "vllm", "transformers", "cpu")


@dataclass(frozen=True)
class Cost:
    """A quantity at the central estimate and at the two ends of its range (low: the fast end)."""

    central: float
    low: float
    high: float

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.central + other.central, self.low + other.low, self.high + other.high)

    def __mul__(self, factor: float) -> Cost:
        return Cost(self.central * factor, self.low * factor, self.high * factor)

    @classmethod
    def span(cls, spec: Mapping[str, float]) -> Cost:
        """A ``{low, central, high}`` entry of the compute section."""
        return cls(float(spec["central"]), float(spec["low"]), float(spec["high"]))

    @classmethod
    def fixed(cls, value: float) -> Cost:
        return cls(value, value, value)


ZERO = Cost.fixed(0.0)


def at_rate(amount: float, rate: Cost) -> Cost:
    """Seconds to get through ``amount`` at ``rate`` per second: the low end at the fastest rate."""
    return Cost(amount / rate.central, amount / rate.high, amount / rate.low)


@dataclass(frozen=True)
class Calibration:
    """Measurements that replace estimates: seconds per optimizer step by model, decode tokens/s per GPU."""

    step_seconds: Mapping[str, float] = field(default_factory=dict)
    decode_rate: float | None = None


@dataclass(frozen=True)
class Job:
    """One job of a plan: its rule, its wall time, what it holds, and the jobs whose outputs it reads.

    ``nodes`` > 0: an exclusive job on that many whole nodes, ``gpus``, ``cpus`` and
    ``memory_gb`` per node; else one node's share (``gpus`` 0: a CPU job).
    """

    rule: str
    key: tuple[Any, ...]
    wall: Cost  # seconds
    gpus: int
    nodes: int
    cpus: int
    memory_gb: float
    after: tuple[tuple[Any, ...], ...] = ()

    @property
    def id(self) -> tuple[Any, ...]:
        return (self.rule, *self.key)

    def billed_gpus(self, gpus_per_node: int) -> int:
        """GPUs the job is billed for: an exclusive job's whole nodes."""
        return self.nodes * gpus_per_node if self.nodes else self.gpus


# ---------------------------------------------------------------- FLOPs and tokens


def flops_per_token(config: Mapping[str, Any], model: str, passes: int) -> float:
    """FLOPs per token of ``passes`` passes (``FORWARD`` or ``TRAIN``) at the training sequence length.

    ``2 x passes`` per active parameter, plus the attention scores and weighted values: a
    forward pass costs ``2 x heads x (qk + v head dims)`` per layer and attended position, over
    half the sequence on average under the causal mask (shapes: ``compute.attention``).
    """
    compute = config["compute"]
    for key in ("active_parameters_billion", "attention", "total_parameters_billion"):
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


def benchmark_items(config: Mapping[str, Any]) -> dict[str, int]:
    """Items of each benchmark one evaluation runs (``evaluation.items_per_benchmark`` caps them)."""
    cap = config["evaluation"]["items_per_benchmark"]
    return {
        name: benchmark["rows"] if cap is None else min(benchmark["rows"], cap)
        for name, benchmark in config["benchmarks"].items()
    }


def _benchmark_tokens(config: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Expected (prompt, response) tokens of one item of each benchmark (``compute.benchmark_tokens``)."""
    tokens = config["compute"]["benchmark_tokens"]
    missing = sorted(set(config["benchmarks"]) - set(tokens))
    if missing:
        raise UserInputError(f"config key compute.benchmark_tokens: no entry for benchmark {missing[0]!r}")
    return {name: (spec["prompt"], spec["response"]) for name, spec in tokens.items()}


def generation_tokens(config: Mapping[str, Any]) -> Cost:
    """Tokens one evaluated checkpoint generates: every item, every repeat, at the expected lengths.

    A response stops at its benchmark's expected length, or runs to ``max_new_tokens`` with
    the share ``compute.responses_at_cap`` (central, low, high).
    """
    evaluation = config["evaluation"]
    tokens, cap = _benchmark_tokens(config), evaluation["max_new_tokens"]
    at_cap = Cost.span(config["compute"]["responses_at_cap"])
    typical = sum(items * min(tokens[name][1], cap) for name, items in benchmark_items(config).items())
    responses = sum(benchmark_items(config).values())

    def expected(share: float) -> float:
        return evaluation["repeats"] * ((1 - share) * typical + share * responses * cap)

    return Cost(expected(at_cap.central), expected(at_cap.low), expected(at_cap.high))


def generation_token_bound(config: Mapping[str, Any]) -> int:
    """Tokens one evaluated checkpoint generates with every response at ``max_new_tokens``."""
    evaluation = config["evaluation"]
    return sum(benchmark_items(config).values()) * evaluation["repeats"] * evaluation["max_new_tokens"]


def prompt_tokens(config: Mapping[str, Any]) -> int:
    """Prompt tokens of one pass over the evaluation suite (prefilled once per repeat)."""
    tokens = _benchmark_tokens(config)
    return sum(items * tokens[name][0] for name, items in benchmark_items(config).items())


# ---------------------------------------------------------------- sizes


def weights_gb(config: Mapping[str, Any], model: str) -> float:
    return config["compute"]["total_parameters_billion"][model] * WEIGHT_BYTES


def state_gb(config: Mapping[str, Any], model: str) -> float:
    return config["compute"]["total_parameters_billion"][model] * STATE_BYTES


def prior_gb(config: Mapping[str, Any], model: str, rows: int) -> float:
    """One prior tensor, ``(N, 2, L, E)`` float32 over the MoE layers (F.7: 20000 x 2 x 26 x 64)."""
    spec = config["models"][model]
    return rows * 2 * spec["moe_layers"] * spec["experts"] * PRIOR_BYTES / GB


def routes_gb(config: Mapping[str, Any], model: str, tokens: int) -> float:
    """One probe's routes: top-k ids (L, N, k) and router probabilities (L, N, E) at 2 bytes."""
    spec = config["models"][model]
    return tokens * spec["moe_layers"] * (spec["top_k"] + spec["experts"]) * ROUTE_BYTES / GB


# ---------------------------------------------------------------- pricing


@dataclass(frozen=True)
class _Estimates:
    """The compute section's ranges, checked once (low <= central <= high)."""

    startup: Mapping[str, Cost]
    forward_call: Cost
    storage: Cost  # GB/s per node
    sha256: Cost  # GB/s
    decode: Cost  # tokens/s per GPU

    @classmethod
    def from_config(cls, config: Mapping[str, Any], calibration: Calibration) -> _Estimates:
        compute = config["compute"]
        spans = {
            "responses_at_cap": compute["responses_at_cap"],
            "forward_call_seconds": compute["forward_call_seconds"],
            "storage_gb_per_second": compute["storage_gb_per_second"],
            "sha256_gb_per_second": compute["sha256_gb_per_second"],
            **{f"startup_seconds.{kind}": compute["startup_seconds"][kind] for kind in STARTUP_KINDS},
        }
        for key, spec in spans.items():
            if not spec["low"] <= spec["central"] <= spec["high"]:
                raise UserInputError(
                    f"config key compute.{key}: expected low <= central <= high, got {dict(spec)}"
                )
        for key in ("storage_gb_per_second", "sha256_gb_per_second"):
            if compute[key]["low"] <= 0:
                raise UserInputError(
                    f"config key compute.{key}: a rate must be positive, got {dict(compute[key])}"
                )
        slow, fast = compute["generation_tokens_per_gpu_second_range"]
        decode = Cost(compute["generation_tokens_per_gpu_second"], slow, fast)
        if calibration.decode_rate is not None:
            decode = Cost.fixed(calibration.decode_rate)
        return cls(
            startup={kind: Cost.span(compute["startup_seconds"][kind]) for kind in STARTUP_KINDS},
            forward_call=Cost.span(compute["forward_call_seconds"]),
            storage=Cost.span(compute["storage_gb_per_second"]),
            sha256=Cost.span(compute["sha256_gb_per_second"]),
            decode=decode,
        )


def _cpu_job(config: Mapping[str, Any], rule: str) -> Mapping[str, Any]:
    jobs = config["compute"]["cpu_jobs"]
    if rule not in jobs:
        raise UserInputError(f"config key compute.cpu_jobs: no entry for rule {rule!r}")
    return jobs[rule]


def _cpu_minutes(config: Mapping[str, Any], rule: str) -> Cost:
    spec = _cpu_job(config, rule)
    if "minutes" not in spec:
        raise UserInputError(f"config key compute.cpu_jobs.{rule}: no minutes (the plan does not price it)")
    return Cost.fixed(spec["minutes"] * 60.0)


class Pricer:
    """Prices the jobs of one config: each method returns one job of its rule."""

    def __init__(self, config: Mapping[str, Any], calibration: Calibration, counts: Mapping[str, int]):
        self.config = config
        self.calibration = calibration
        self.counts = counts
        self.estimates = _Estimates.from_config(config, calibration)
        compute, parallelism = config["compute"], config["training"]["parallelism"]
        self.per_node = parallelism["gpus_per_node"]
        self.training_nodes = parallelism["nodes"]
        self.cpus_per_gpu = compute["cpus_per_gpu"]
        self.process_gb = compute["process_memory_gb"]

    def startup(self, kind: str) -> Cost:
        return self.estimates.startup[kind]

    def read(self, gb: float, nodes: int = 1) -> Cost:
        """Seconds to read or write ``gb`` from ``nodes`` nodes at once."""
        return at_rate(gb, self.estimates.storage * nodes)

    def forward(self, model: str, tokens: float, calls: float) -> Cost:
        """One GPU's seconds for forward passes over ``tokens`` in ``calls`` transformers calls."""
        flops = flops_cost(self.config, flops_per_token(self.config, model, FORWARD) * tokens)
        return flops + self.estimates.forward_call * calls

    def gpu_job(self, rule: str, key: tuple, wall: Cost, gpus: int, memory_gb: float, after: Sequence) -> Job:
        return Job(rule, key, wall, gpus, 0, gpus * self.cpus_per_gpu, memory_gb, tuple(after))

    def cpu_job(self, rule: str, key: tuple, after: Sequence, wall: Cost | None = None) -> Job:
        spec = _cpu_job(self.config, rule)
        wall = wall if wall is not None else _cpu_minutes(self.config, rule)
        return Job(rule, key, wall, 0, 0, spec["cpus"], spec["memory_gb"], tuple(after))

    # ------------------------------------------------------------ trainings

    def training(self, run: Training, prior: tuple | None) -> list[Job]:
        """A training's jobs: megatron's claim, training and export, or one local training."""
        key = (run.model, run.corpus, run.condition, run.seed)
        data = [("build_corpus", run.corpus)] + ([prior] if prior else [])
        if self.config["training"]["backend"] != "megatron":
            return [self.cpu_job("train_local", key, data)]
        model, rows = run.model, self.counts[run.corpus]
        nodes, gpus = self.training_nodes, self.training_nodes * self.per_node
        steps = training_steps(self.config, rows)
        if model in self.calibration.step_seconds:
            compute = Cost.fixed(steps * self.calibration.step_seconds[model])
        else:
            total = flops_cost(
                self.config, flops_per_token(self.config, model, TRAIN) * training_tokens(self.config, rows)
            )
            compute = total * (1 / gpus)
        # Saves at every checkpoint_every_steps before the last step hold the optimizer state, the
        # last one the weights only; each is written, then read back for its digest list.
        full_saves = (steps - 1) // self.config["training"]["checkpoint_every_steps"]
        saves = self.read(2 * state_gb(self.config, model), nodes) * full_saves
        saves += self.read(2 * weights_gb(self.config, model), nodes)
        startup = self.startup("megatron") + self.read(weights_gb(self.config, model), nodes)
        prior_size = prior_gb(self.config, model, rows) if prior else 0.0
        # Per node: its ranks, the memory-mapped prior once, its share of a save's state.
        memory = self.per_node * self.process_gb + prior_size + state_gb(self.config, model) / nodes
        claim_bytes = 2 * weights_gb(self.config, model) + prior_size + 2 * self._split_gb(rows)
        claim_wall = self.startup("cpu") + at_rate(
            claim_bytes, _slower(self.estimates.sha256, self.estimates.storage)
        )
        claim_after = [("megatron_import", model), ("chat_dataset", run.corpus), *data]
        train = Job(
            "train_megatron",
            key,
            compute + startup + saves,
            self.per_node,
            nodes,
            self.per_node * self.cpus_per_gpu,
            memory,
            (("megatron_claim", *key),),
        )
        export_wall = self.startup("megatron") + self.read(2 * weights_gb(self.config, model))
        export_memory = MODEL_COPIES["export_megatron"] * weights_gb(self.config, model) + self.process_gb
        return [
            self.cpu_job("megatron_claim", key, claim_after, claim_wall),
            train,
            self.gpu_job("export_megatron", key, export_wall, 1, export_memory, [train.id]),
        ]

    def _split_gb(self, rows: int) -> float:
        """A training split's bytes at most, every row at the scorer's limit (its chat dataset: as many)."""
        return rows * self.config["scoring"]["max_total_chars"] / GB

    def launch_check(self) -> Job:
        """The training's allocation with a rendezvous report instead of training: its start-up."""
        per_node = self.per_node
        wall = self.startup("megatron")
        return Job(
            "megatron_launch_check", (), wall, per_node, self.training_nodes,
            per_node * self.cpus_per_gpu, per_node * self.process_gb,
        )  # fmt: skip

    def megatron_import(self, model: str) -> Job:
        wall = self.startup("megatron") + self.read(2 * weights_gb(self.config, model))
        memory = MODEL_COPIES["megatron_import"] * weights_gb(self.config, model) + self.process_gb
        return self.gpu_job("megatron_import", (model,), wall, 1, memory, [])

    # ------------------------------------------------------------ forward passes of one GPU

    def loaded(self, model: str) -> Cost:
        return self.startup("transformers") + self.read(weights_gb(self.config, model))

    def prior(self, model: str, corpus: str) -> Job:
        rows = self.counts[corpus]
        sequence = self.config["training"]["sequence_length"]
        calls = math.ceil(rows / self.config["prior"]["batch_size"])
        size = prior_gb(self.config, model, rows)
        wall = self.loaded(model) + self.forward(model, rows * sequence, calls) + self.read(size)
        memory = weights_gb(self.config, model) + size + self.process_gb
        return self.gpu_job("prior", (model, corpus), wall, 1, memory, [("build_corpus", corpus)])

    def probe(self, model: str, corpus: str, run: tuple, after: Sequence) -> Job:
        tokens = self.config["corpora"][corpus]["probe_tokens"]
        calls = math.ceil(tokens / self.config["training"]["sequence_length"])
        wall = self.loaded(model) + self.forward(model, tokens, calls)
        memory = weights_gb(self.config, model) + self.process_gb
        return self.gpu_job("probe_routes", (model, corpus, *run), wall, 1, memory, after)

    def likelihood(self, evaluation: Evaluation, after: Sequence) -> Job:
        """Teacher-forced prompt + gold answer per item, once per routing (three for a base)."""
        routings = 3 if evaluation.condition == BASE else 1
        items = benchmark_items(self.config)
        tokens = _benchmark_tokens(self.config)
        per_pass = sum(n * sum(tokens[b]) for b, n in items.items())
        passes = sum(items.values()) * routings
        wall = self.loaded(evaluation.model) + self.forward(evaluation.model, per_pass * routings, passes)
        memory = weights_gb(self.config, evaluation.model) + self.process_gb
        return self.gpu_job("likelihood", evaluation_key(evaluation), wall, 1, memory, after)

    # ------------------------------------------------------------ generation and scoring

    def generate(self, evaluation: Evaluation, after: Sequence) -> Job:
        """Data-parallel vLLM engines on one node: prefill at the FLOPs rate, decode at the decode rate."""
        evaluation_config = self.config["evaluation"]
        gpus = evaluation_config["data_parallel"]
        model = evaluation.model
        prefill = flops_cost(
            self.config,
            flops_per_token(self.config, model, FORWARD)
            * prompt_tokens(self.config)
            * evaluation_config["repeats"],
        )
        decode = _divide(generation_tokens(self.config), self.estimates.decode)
        startup = self.startup("vllm") + self.read(weights_gb(self.config, model))
        wall = startup + (prefill + decode) * (1 / gpus)
        memory = weights_gb(self.config, model) + gpus * self.process_gb
        return self.gpu_job("generate", evaluation_key(evaluation), wall, gpus, memory, after)

    def score(self, evaluation: Evaluation) -> Job:
        """Grading on ``grading_workers`` processes; at the high end each math and code response times out."""
        evaluation_config = self.config["evaluation"]
        grading = self.config["compute"]["grading_seconds"]
        seconds = {family: grading[family] for family in ("math", "code", "multi_domain")}
        timeouts = {
            "math": evaluation_config["math_timeout_seconds"],
            "code": evaluation_config["code_timeout_seconds"],
        }
        central = high = 0.0
        for name, items in benchmark_items(self.config).items():
            family = self.config["benchmarks"][name]["family"]
            responses = items * evaluation_config["repeats"]
            central += responses * seconds[family]
            high += responses * max(seconds[family], timeouts.get(family, 0.0))
        workers = evaluation_config["grading_workers"]
        wall = self.startup("cpu") + Cost(central, central, high) * (1 / workers)
        sandbox_gb = evaluation_config["sandbox"]["memory_mb"] / 1000
        memory = workers * sandbox_gb + self.process_gb
        key = evaluation_key(evaluation)
        return Job("score", key, wall, 0, 0, workers, memory, (("generate", *key),))


def _slower(first: Cost, second: Cost) -> Cost:
    """The slower of two rates at each end (hashing while reading)."""
    return Cost(min(first.central, second.central), min(first.low, second.low), min(first.high, second.high))


def _divide(amount: Cost, rate: Cost) -> Cost:
    """``amount`` (central, low, high) at ``rate``: the low end is the least at the fastest."""
    return Cost(amount.central / rate.central, amount.low / rate.high, amount.high / rate.low)


def evaluation_key(evaluation: Evaluation) -> tuple:
    if evaluation.condition == BASE:
        return (evaluation.model, BASE)
    return (evaluation.model, evaluation.corpus, evaluation.condition, evaluation.seed)
