"""Sanity gates: whether an experiment's premises hold at this scale before its claims are read.

Two premises the paper's comparisons rest on, each checked here: (a) routing carries the task, so
constraining it (RPB-hard, the shuffled-prior controls) can cost something; (b) fine-tuning
teaches something in domain (the paper's SFT is above the base in domain), so an in-domain
ordering of fine-tuned conditions has a gain to differ in. A premise gate that fails says the
claims resting on it are not testable here (the claims table then prints no verdict for them),
not that they are false. The diagnostics are read, not required: per-token routing beyond a
span's experts, and SFT's out-of-domain change, which the paper does not need to be a loss (its
SFT is above the base out of domain too). Each gate is a paired mean difference over the same
items with its standard error, passing when it exceeds ``spread_factor`` standard errors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from workflow_scripts import layout, registry

#: The corpora whose SFT runs the SFT gates read: the paper's two main training corpora.
GATE_CORPORA = ("math20k", "coding20k")
#: The condition the SFT gates measure against the base.
SFT = "sft"
#: The metric of a likelihood file (evaluate/likelihood.py): mean log-likelihood per gold token.
LOGLIK = "loglik_mean"
GATE_COLUMNS = ("gate", "role", "metric", "model", "corpus", "items", "value", "se", "threshold", "passed")
ROUTING_CARRIES_TASK = "routing_carries_task"
TOKEN_CONDITIONED_ROUTING = "token_conditioned_routing"
IN_DOMAIN_HEADROOM = "in_domain_headroom"
OOD_CHANGE = "ood_change"
PREMISE, DIAGNOSTIC = "premise", "diagnostic"
#: A premise gate that fails makes the claims resting on it untestable here (claim_rules.premises);
#: a diagnostic is read beside the claims and never withholds a verdict.
ROLES = {
    ROUTING_CARRIES_TASK: PREMISE,
    TOKEN_CONDITIONED_ROUTING: DIAGNOSTIC,
    IN_DOMAIN_HEADROOM: PREMISE,
    OOD_CHANGE: DIAGNOSTIC,
}
#: What each gate measures, in the words of the rendered table, with what the paper shows of it.
GATE_MEANINGS = {
    ROUTING_CARRIES_TASK: "own routing minus the global-hard override (every token forced to the "
    "top-k of its span's mean routing, expert ids permuted per layer), base model, all scored items: "
    "a premise of every claim that hard enforcement costs accuracy",
    TOKEN_CONDITIONED_ROUTING: "own routing minus the own-prior hard override (the same top-k, ids "
    "not permuted): what per-token routing adds beyond which experts a span uses (diagnostic)",
    IN_DOMAIN_HEADROOM: "SFT minus base on the in-domain items: whether fine-tuning teaches the "
    "toy anything in domain, a premise of every accuracy claim (ID, Overall@9, Avg) about fine-tuned "
    "conditions; the paper's SFT is above the base in domain (Moonlight-16B-A3B: 29.44 vs 26.85 on "
    "math20k, 28.34 vs 12.21 on coding20k; Table 2, base from Table 16)",
    OOD_CHANGE: "SFT minus base on the out-of-domain items of the training corpus (diagnostic): the "
    "paper's SFT is above the base out of domain (Moonlight-16B-A3B: 15.65 vs 12.56 on math20k, "
    "35.83 vs 19.89 on coding20k; Table 2, base from Table 16), so forgetting is no premise of its "
    "out-of-domain claims, which compare fine-tuned conditions with each other",
}


@dataclass(frozen=True)
class Gate:
    """One gate's verdict: ``value`` (a paired mean difference), its ``se``, and whether it passed
    (``value`` above ``threshold``); ``role`` is premise or diagnostic (:data:`ROLES`)."""

    gate: str
    role: str
    metric: str
    model: str
    corpus: str
    items: int
    value: float
    se: float
    threshold: float
    passed: bool


def paired_difference(
    first: pd.DataFrame, second: pd.DataFrame, metric: str, benchmarks: Sequence[str] | None = None
) -> tuple[float, float, int]:
    """Mean over items of ``first - second`` in ``metric``, its SE (sd ddof 1 / sqrt n) and n.

    Each frame has one row per (``benchmark``, ``item_id``); both must hold the same items (a
    paired design: the item difficulty cancels). ``benchmarks`` keeps only those benchmarks.
    """
    keys = ["benchmark", "item_id"]
    for name, frame in (("first", first), ("second", second)):
        if frame.duplicated(keys).any():
            raise ValueError(f"{name} has more than one row per item")
    if benchmarks is not None:
        first = first[first["benchmark"].isin(benchmarks)]
        second = second[second["benchmark"].isin(benchmarks)]
    joined = first[[*keys, metric]].merge(
        second[[*keys, metric]], on=keys, how="outer", suffixes=("_a", "_b")
    )
    missing = joined[joined[f"{metric}_a"].isna() | joined[f"{metric}_b"].isna()]
    if not missing.empty:
        row = missing.iloc[0]
        raise ValueError(f"item {row['item_id']!r} of {row['benchmark']!r} is scored in one run only")
    if joined.empty:
        raise ValueError("no items to compare")
    delta = (joined[f"{metric}_a"] - joined[f"{metric}_b"]).to_numpy(dtype=np.float64)  # (n,)
    se = float(delta.std(ddof=1) / math.sqrt(delta.size)) if delta.size > 1 else math.nan
    return float(delta.mean()), se, int(delta.size)


def verdict(
    gate: str,
    metric: str,
    model: str,
    corpus: str,
    difference: tuple[float, float, int],
    spread_factor: float,
) -> Gate:
    """A gate passes when its difference exceeds ``spread_factor`` standard errors (a NaN SE fails)."""
    if gate not in ROLES:
        raise ValueError(f"unknown gate {gate!r} (known: {', '.join(ROLES)})")
    value, se, items = difference
    threshold = spread_factor * se
    passed = bool(math.isfinite(threshold) and value > threshold)
    return Gate(gate, ROLES[gate], metric, model, corpus, items, value, se, threshold, passed)


def reading(role: str, value: float, threshold: float, passed: bool) -> str:
    """A premise's pass or FAIL; a diagnostic's sign where it clears the threshold, else within noise."""
    if role == PREMISE:
        return "pass" if passed else "FAIL"
    if passed:
        return "positive"
    return "negative" if math.isfinite(threshold) and value < -threshold else "within noise"


def routing(likelihood: pd.DataFrame, scramble: str) -> pd.DataFrame:
    """The rows of one routing of a likelihood file (one per item)."""
    rows = likelihood[likelihood["routing"] == scramble]
    if rows.empty:
        raise ValueError(f"the likelihood file has no {scramble!r} rows")
    return rows


def item_accuracy(scores: pd.DataFrame) -> pd.DataFrame:
    """Per-item accuracy in percent: the mean score over an item's repeats (avg@k of one item)."""
    frame = scores.groupby(["benchmark", "item_id"], as_index=False)["score"].mean()
    frame["accuracy"] = 100.0 * frame["score"]
    return frame


def ood_benchmarks(families: Mapping[str, str], domain: str) -> list[str]:
    """Benchmarks whose family differs from the training corpus' domain (F.4's out of domain)."""
    return [name for name, family in families.items() if family != domain]


def routing_gates(model: str, base: pd.DataFrame, spread_factor: float) -> list[Gate]:
    """Gate (a) and its diagnostic for one base model's likelihood file."""
    own = routing(base, "own")
    return [
        verdict(
            ROUTING_CARRIES_TASK, LOGLIK, model, "-",
            paired_difference(own, routing(base, "global_hard"), LOGLIK), spread_factor,
        ),
        verdict(
            TOKEN_CONDITIONED_ROUTING, LOGLIK, model, "-",
            paired_difference(own, routing(base, "own_prior_hard"), LOGLIK), spread_factor,
        ),
    ]  # fmt: skip


def sft_gates(
    model: str,
    corpus: str,
    domain: str,
    families: Mapping[str, str],
    base: pd.DataFrame,
    sft: pd.DataFrame,
    base_scores: pd.DataFrame | None,
    sft_scores: pd.DataFrame | None,
    spread_factor: float,
) -> list[Gate]:
    """Premise (b), the in-domain headroom, and the out-of-domain change (a diagnostic), SFT minus
    the base, on the likelihood and (given scores) accuracy."""
    ood = ood_benchmarks(families, domain)
    in_domain = [name for name in families if name not in ood]
    pairs = [(LOGLIK, routing(base, "own"), routing(sft, "own"))]
    if base_scores is not None and sft_scores is not None:
        pairs.append(("accuracy", item_accuracy(base_scores), item_accuracy(sft_scores)))
    gates = []
    for metric, before, after in pairs:
        difference = paired_difference(after, before, metric, in_domain)
        gates.append(verdict(IN_DOMAIN_HEADROOM, metric, model, corpus, difference, spread_factor))
        difference = paired_difference(after, before, metric, ood)
        gates.append(verdict(OOD_CHANGE, metric, model, corpus, difference, spread_factor))
    return gates


def gates_frame(gates: Sequence[Gate]) -> pd.DataFrame:
    """The gates as a table, ``GATE_COLUMNS`` in order."""
    return pd.DataFrame([asdict(gate) for gate in gates], columns=list(GATE_COLUMNS))


def render_markdown(frame: pd.DataFrame, spread_factor: float, scale: str) -> str:
    """The gates table with its definitions: value, SE, threshold and the reading per row."""
    lines = [
        f"# Sanity gates ({scale} scale)",
        "",
        f"A premise gate passes when its value exceeds {spread_factor:g} standard errors of the paired "
        "item differences; where one fails, the claims table says the claims resting on it are not "
        "testable here instead of giving a verdict. A diagnostic reads positive or negative beyond "
        "that threshold, else within noise, and withholds nothing. loglik_mean: mean log-likelihood "
        "per gold-answer token (nats, teacher-forced); accuracy: avg@k in percent.",
        "",
        "| gate | role | metric | model | corpus | items | value | SE | threshold | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in frame.itertuples(index=False):
        lines.append(
            f"| {row.gate} | {row.role} | {row.metric} | {row.model} | {row.corpus} | {row.items} "
            f"| {row.value:.4f} | {row.se:.4f} | {row.threshold:.4f} "
            f"| {reading(row.role, row.value, row.threshold, row.passed)} |"
        )
    lines += ["", *(f"- {name}: {meaning}" for name, meaning in GATE_MEANINGS.items()), ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class GateRuns:
    """What the gates read: every model's base, and one SFT run per (model, corpus) already in the grid."""

    models: tuple[str, ...]
    sft: tuple[registry.Evaluation, ...]


def gate_runs(config: Mapping[str, object]) -> GateRuns:
    """The base of every model, and the lowest-seed SFT evaluation of each (model, ``GATE_CORPORA``).

    Only SFT runs that some table or figure already evaluates are used, so the gates train
    nothing of their own; a (model, corpus) without one has no SFT gate rows.
    """
    evaluations: set[registry.Evaluation] = set()
    for output in registry.outputs(config):
        evaluations |= registry.closure(config, output).evaluations
    chosen: dict[tuple[str, str], registry.Evaluation] = {}
    for evaluation in evaluations:
        if evaluation.condition != SFT or evaluation.corpus not in GATE_CORPORA:
            continue
        key = (evaluation.model, str(evaluation.corpus))
        if key not in chosen or int(evaluation.seed or 0) < int(chosen[key].seed or 0):
            chosen[key] = evaluation
    return GateRuns(tuple(sorted(config["models"])), tuple(chosen[key] for key in sorted(chosen)))  # type: ignore[arg-type]


def gate_files(runs: GateRuns) -> dict[str, list[str]]:
    """The gates job's inputs (rule paths): likelihood and score files of every base and SFT run."""

    def files(name: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return [layout.rule_path("eval", model=model, evaluated=run, name=name) for model, run in pairs]

    bases = [(model, registry.BASE) for model in runs.models]
    sft = [(e.model, f"{e.corpus}/{e.condition}/s{e.seed}") for e in runs.sft]
    return {
        "base": files(layout.LIKELIHOOD_FILE, bases),
        "base_scores": files(layout.SCORES_FILE, bases),
        "sft": files(layout.LIKELIHOOD_FILE, sft),
        "sft_scores": files(layout.SCORES_FILE, sft),
    }
