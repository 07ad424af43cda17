"""The claims table (``results/tables/claims.*``): each claim of :mod:`paper_claims` checked
against our results and against the paper's numbers, by the rules of :mod:`claim_rules`.

Our side of a cell is the mean and sample sd over training seeds of the per-seed values the other
tables read; the paper's side is ``reference/claims.csv``. This module reads both and renders one
row per claim: its words, the compared cells, each check's numbers with its reading (direction,
tolerance or margin), and both verdicts. Where the run builds the sanity gates (toy scale), a check
whose premise gate failed is not testable here and gets no verdict of ours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import pandas as pd

from workflow_scripts import layout
from workflow_scripts.registry import BASE
from workflow_scripts.report.claim_rules import (
    CONTRADICTED,
    DIGITS,
    HARD_CONDITIONS,
    METRIC_LABELS,
    METRICS,
    MISSING,
    MISSING_ESTIMATE,
    NOT_TESTABLE,
    POWER,
    RELATION_TEXT,
    RELATIONS,
    REPRODUCED,
    SPLITS,
    UNRESOLVED,
    VERDICT_MARK,
    Cell,
    Check,
    Claim,
    Estimate,
    Inexpressible,
    Outcome,
    Premise,
    Rules,
    Side,
    check_verdict,
    claim_verdict,
    evaluate,
    pooled_sds,
    side_value,
    with_spread,
)
from workflow_scripts.report.frames import aggregate_frame, performance_frame
from workflow_scripts.report.paper_claims import (
    CLAIMS,
    FROZEN_BIAS,
    FROZEN_BIAS_CLAIMS,
    FROZEN_BIAS_PAPER,
    FROZEN_BIAS_SUFFIX,
    INEXPRESSIBLE,
    NOT_IN_PAPER,
    SCOPE_MODEL,
    SCOPE_REFERENCE,
    SEEDS,
    SENSITIVITY,
    TESTED,
    needed_cells,
)
from workflow_scripts.report.render import fixed
from workflow_scripts.report.routing_frames import retention_frame, span_frame
from workflow_scripts.report.routing_tables import d2_domains, d2_statistics, without_seeds
from workflow_scripts.report.scope_premise import DIFFUSE_BASE_ROUTING, failed_diffuse
from workflow_scripts.report.scope_premise import STATISTICS as SCOPE_STATISTICS
from workflow_scripts.report.table import ReportInputs, Table

__all__ = [
    "CLAIMS", "CONTRADICTED", "FROZEN_BIAS", "FROZEN_BIAS_CLAIMS", "FROZEN_BIAS_PAPER", "HARD_CONDITIONS",
    "INEXPRESSIBLE", "INEXPRESSIBLE_VERDICT", "METRICS", "MISSING", "NOT_IN_PAPER", "NOT_TESTABLE", "POWER",
    "Premise", "RELATIONS",
    "REPRODUCED", "SEEDS", "SENSITIVITY", "TABLES", "TESTED", "UNRESOLVED", "Cell", "Check", "Claim",
    "Estimate", "Inexpressible", "Rules", "Side", "check_verdict", "claim_rows", "claim_verdict",
    "failed_premises", "needed_cells", "our_estimates", "paper_estimates", "pooled_sds", "with_spread",
]  # fmt: skip

TABLE_ID = "claims"
INEXPRESSIBLE_VERDICT = "inexpressible"
COLUMNS = ("statement", "compared", "ours", "paper", "verdict", "paper_check")
COLUMN_LABELS = {
    "claim": "Claim",
    "statement": "Claim in words (where the paper makes it)",
    "compared": "Compared cells (inexpressible: why)",
    "ours": "Ours: mean ± sd over training seeds, Δ, t·SE, verdict per check",
    "paper": "Paper",
    "verdict": "Our results",
    "paper_check": "Rules on the paper's numbers",
}


def our_estimates(seeds: pd.DataFrame, cells: Iterable[Cell]) -> dict[Cell, Estimate]:
    """Mean, sample sd and count over the seeds of each cell that has any.

    ``seeds`` is long: model, corpus, condition, seed, metric, value (one row per seed and metric);
    a cell with a seed takes that seed's row only.
    """
    if seeds.empty:
        return {}
    groups = {key: group for key, group in seeds.groupby(["model", "corpus", "condition", "metric"])}
    values = {}
    for cell in cells:
        group = groups.get((cell.model, cell.corpus, cell.condition, cell.metric))
        if group is None:
            continue
        if cell.seed is not None:
            group = group[group["seed"] == cell.seed]
        if group.empty:
            continue
        column = group["value"].astype(float)
        values[cell] = Estimate(float(column.mean()), float(column.std(ddof=1)), len(column))
    return values


def paper_estimates(reference: pd.DataFrame | None) -> dict[tuple[str, Cell], Estimate]:
    """The paper's numbers per (claim, cell) from ``reference/claims.csv``.

    ``seed`` names a single-seed run (empty: a seed mean); ``n`` is how many training seeds the
    printed value covers (F.5, each table's caption), whether or not the paper prints its sd.
    """
    if reference is None:
        return {}
    values = {}
    for _, row in reference.iterrows():
        seed = int(row["seed"]) if str(row["seed"]).strip() else None
        key = (row["claim"], Cell(row["model"], row["corpus"], row["condition"], row["column"], seed))
        if key in values:
            raise ValueError(f"reference: {key} appears more than once")
        values[key] = Estimate(float(row["value"]), float(row["sd"]), int(row["n"]))
    return values


def claim_values(paper: Mapping[tuple[str, Cell], Estimate], claim: Claim) -> dict[Cell, Estimate]:
    """The paper's values of one claim."""
    return {cell: v for (claim_id, cell), v in paper.items() if claim_id == claim.claim_id}


def _model_label(cell: Cell, label: Callable[[str], str], with_model: bool) -> str:
    return f"{label(cell.model)} " if with_model else ""


def _cell_label(cell: Cell, label: Callable[[str], str]) -> str:
    return label(cell.condition) + (f" s{cell.seed}" if cell.seed is not None else "")


def side_label(side: Side | None, label: Callable[[str], str], with_model: bool) -> str:
    """``[model ]condition[ sSEED][ − other]`` of one side; ``0`` for a zero reference."""
    if side is None:
        return "0"
    text = _model_label(side.cell, label, with_model) + _cell_label(side.cell, label)
    return text if side.less is None else f"{text} − {_cell_label(side.less, label)}"


def estimate_text(estimate: Estimate, digits: int, seeds: int) -> str:
    """``mean ± sd``, the count where below ``seeds`` (0: never), a borrowed sd marked with where it
    came from; ``missing``."""
    if estimate.missing:
        return MISSING
    text = fixed(estimate.mean, digits)
    if math.isnan(estimate.sd):
        return text + (f" (n={estimate.n})" if estimate.n < seeds else "")
    if estimate.borrowed:
        scope = f" from {estimate.scope}" if estimate.scope else ""
        return text + f" (n={estimate.n}, sd {fixed(estimate.sd, digits)} borrowed{scope})"
    text += f" ± {fixed(estimate.sd, digits)}"
    return text + (f" (n={estimate.n})" if estimate.n < seeds else "")


def _side_text(side: Side | None, values: Mapping[Cell, Estimate], digits: int, seeds: int) -> str:
    if side is None:
        return ""
    if side.less is None:
        return " " + estimate_text(values.get(side.cell, MISSING_ESTIMATE), digits, seeds)
    value, _ = side_value(side, values)
    if math.isnan(value):
        return " " + MISSING
    parts = [estimate_text(values[cell], digits, seeds) for cell in side.cells()]
    return f" {fixed(value, digits, sign=True)} [{' − '.join(parts)}]"


def reading_text(check: Check, rules: Rules) -> str:
    """What the check reads: the direction, or the tolerance or margin it allows."""
    if check.reading == "direction":
        return "direction"
    digits = DIGITS[check.metric]
    name = "tol" if check.reading == "tolerance" else "margin"
    return f"{name} {fixed(rules.tolerance(check.metric, check.relation), digits)}"


def outcome_text(
    outcome: Outcome,
    values: Mapping[Cell, Estimate],
    rules: Rules,
    label: Callable[[str], str],
    seeds: int,
    with_model: bool = False,
) -> str:
    """``corpus metric: A a vs B b (reading, Δ d, t·SE m (df f)[, MDE e]: ✓)`` for one check; the model
    named on each side where ``with_model`` (a row comparing several models). The MDE is printed
    for a direction check only, where it is the gap its rule resolves with 80 % power."""
    check, digits = outcome.check, DIGITS[outcome.check.metric]
    a = side_label(check.side, label, with_model) + _side_text(check.side, values, digits, seeds)
    b = side_label(check.reference, label, with_model) + _side_text(check.reference, values, digits, seeds)
    text = f"{label(check.corpus)} {METRIC_LABELS[check.metric]}: {a} vs {b}"
    difference = fixed(outcome.difference, digits, sign=True)
    if outcome.verdict == NOT_TESTABLE:
        failed = ", ".join(premise_text(p, label) for p in outcome.failed)
        return f"{text} ({NOT_TESTABLE}: {failed} failed; Δ {difference})"
    if outcome.verdict == MISSING:
        return f"{text} (missing)"
    reading = reading_text(check, rules)
    if math.isnan(outcome.bound):
        return f"{text} ({reading}, Δ {difference}, no spread: {VERDICT_MARK[UNRESOLVED]})"
    bound = f"t·SE {fixed(outcome.bound, digits)} (df {outcome.dof:.0f})"
    if check.reading == "direction":
        bound += f", MDE {fixed(rules.mde(outcome.se, outcome.dof), digits)}"
    return f"{text} ({reading}, Δ {difference}, {bound}: {VERDICT_MARK[outcome.verdict]})"


def premise_text(premise: Premise, label: Callable[[str], str]) -> str:
    """``gate (metric, model[ corpus])`` of one premise gate."""
    where = label(premise.model) + ("" if premise.corpus == "-" else f" {label(premise.corpus)}")
    return f"{premise.gate} ({premise.metric}, {where})"


def failed_premises(gates: pd.DataFrame | None) -> frozenset[Premise]:
    """The premise gates that failed, from the gates table (``report/gates.py``'s CSV); none without one."""
    if gates is None:
        return frozenset()
    failed = gates[(gates["role"] == "premise") & ~gates["passed"].astype(bool)]
    return frozenset(
        Premise(str(row.gate), str(row.metric), str(row.model), str(row.corpus))
        for row in failed.itertuples(index=False)
    )


def verdict_text(outcomes: Sequence[Outcome]) -> str:
    """The claim's verdict; where not testable, the gates that failed."""
    verdict = claim_verdict(o.verdict for o in outcomes)
    if verdict != NOT_TESTABLE:
        return verdict
    gates = dict.fromkeys(p.gate for o in outcomes for p in o.failed)
    return f"{NOT_TESTABLE}: {', '.join(gates)} failed"


def compared_text(claim: Claim, label: Callable[[str], str]) -> str:
    """Each distinct check as ``[model, ]metric: side relation reference (corpora)``."""
    groups: dict[str, list[str]] = {}
    for check in claim.checks:
        two = len(check.models()) > 1
        prefix = "" if two else f"{label(check.side.cell.model)}, "
        text = (
            f"{prefix}{METRIC_LABELS[check.metric]}: {side_label(check.side, label, two)} "
            f"{RELATION_TEXT[check.relation]} {side_label(check.reference, label, two)}"
        )
        corpora = groups.setdefault(text, [])
        if label(check.corpus) not in corpora:
            corpora.append(label(check.corpus))
    return "; ".join(f"{text} ({', '.join(corpora)})" for text, corpora in groups.items())


def claim_rows(
    claims: Sequence[Claim],
    ours: Mapping[Cell, Estimate],
    paper: Mapping[tuple[str, Cell], Estimate],
    rules: Rules,
    label: Callable[[str], str] = str,
    seeds: int = 3,
    inexpressible: Sequence[Inexpressible] = (),
    sensitivity: Sequence[Claim] = (),
    failed: frozenset[Premise] = frozenset(),
) -> pd.DataFrame:
    """One row per claim: its words, what it compares, our and the paper's numbers, both verdicts.

    A cell without its own sd borrows its metric's pooled sd from the same source (ours over our
    cells, the paper's over every cell of the reference). ``sensitivity`` claims follow, ours only
    (the paper has no numbers for them, :data:`FROZEN_BIAS_PAPER`); then ``inexpressible`` claims,
    each with its reason under ``compared``. A check of ours resting on a premise in ``failed`` (the
    gates of this run) is not testable here; the paper's checks rest on the paper's scale.
    """
    ours = with_spread(ours, pooled_sds(ours.items()))
    unique_paper = {cell: value for (_, cell), value in paper.items()}
    paper_pool = pooled_sds(unique_paper.items())
    rows = []
    for claim in claims:
        paper_values = with_spread(claim_values(paper, claim), paper_pool)
        many = len(claim.models()) > 1
        ours_outcomes = evaluate(claim, ours, rules, failed)
        paper_outcomes = evaluate(claim, paper_values, rules)
        rows.append(
            {
                "claim": claim.claim_id,
                "statement": f"{claim.statement} ({claim.sources})",
                "compared": compared_text(claim, label),
                "ours": "; ".join(outcome_text(o, ours, rules, label, seeds, many) for o in ours_outcomes),
                "paper": "; ".join(
                    outcome_text(o, paper_values, rules, label, 0, many) for o in paper_outcomes
                ),
                "verdict": verdict_text(ours_outcomes),
                "paper_check": claim_verdict(o.verdict for o in paper_outcomes),
            }
        )
    for claim in sensitivity:
        ours_outcomes = evaluate(claim, ours, rules, failed)
        many = len(claim.models()) > 1
        rows.append(
            {
                "claim": claim.claim_id,
                "statement": f"{claim.statement} ({claim.sources})",
                "compared": compared_text(claim, label),
                "ours": "; ".join(outcome_text(o, ours, rules, label, seeds, many) for o in ours_outcomes),
                "paper": FROZEN_BIAS_PAPER,
                "verdict": verdict_text(ours_outcomes),
                "paper_check": NOT_IN_PAPER,
            }
        )
    for claim in inexpressible:
        rows.append(
            {
                "claim": claim.claim_id,
                "statement": f"{claim.statement} ({claim.sources})",
                "compared": claim.reason,
                "ours": "—",
                "paper": claim.paper,
                "verdict": INEXPRESSIBLE_VERDICT,
                "paper_check": INEXPRESSIBLE_VERDICT,
            }
        )
    return pd.DataFrame(rows, columns=["claim", *COLUMNS])


def seed_frame(inputs: ReportInputs) -> pd.DataFrame:
    """Per-seed community NMI (probed seeds), Overall@9 / ID / OOD and the twelve-benchmark Avg
    (trained seeds), long: model, corpus, condition, seed, metric, value.

    Read through the frames every other table reads, from exactly the closure's files.
    """
    keys = ["model", "corpus", "condition", "seed"]
    closure = inputs.closure
    nmi = retention_frame(inputs.results, closure.probes)[[*keys, "nmi"]]
    trained = [e for e in closure.evaluations if e.condition != BASE]
    performance = performance_frame(inputs.results, trained)
    nine = aggregate_frame(performance, inputs.config, "overall9")
    twelve = aggregate_frame(performance, inputs.config, "all12")
    parts = [
        nmi.melt(id_vars=keys, value_vars=["nmi"], var_name="metric"),
        nine.melt(id_vars=keys, value_vars=["overall9", "id", "ood"], var_name="metric"),
        twelve.melt(id_vars=keys, value_vars=["avg12"], var_name="metric"),
    ]
    parts = [part for part in parts if not part.empty]
    if not parts:
        return pd.DataFrame(columns=[*keys, "metric", "value"])
    return pd.concat(parts, ignore_index=True).astype({"seed": "Int64", "value": float})


def _rules_notes(rules: Rules) -> list[str]:
    level = f"{100 * rules.confidence:g} %"
    return [
        "Each check compares two cells (or, for DeepSeek-V2-Lite, the gap between two cells with the "
        "same gap on Moonlight-16B-A3B, or with zero): Δ is the first minus the second, SE = √(Σ sd²/n) "
        "over the cells (the seed means taken as independent), and t the one-sided "
        f"{level} quantile of Student's t at the Welch-Satterthwaite degrees of freedom (df; a borrowed "
        "sd brings its pool's): each rule is a one-sided test at that level (close: two, TOST).",
        "Each check says how it reads the paper's words. direction (the paper states an ordering: "
        "above, below): reproduced when Δ clears zero by t·SE on the claimed side, contradicted when "
        "it does on the other. tol (the paper states a magnitude: close; "
        f"{rules.nmi_points:g} NMI or {rules.accuracy_points:g} points): reproduced when |Δ| + t·SE ≤ "
        "tol, contradicted when |Δ| − t·SE > tol. margin (at or above; "
        f"{rules.at_least_nmi_points:g} NMI or {rules.at_least_accuracy_points:g} points): reproduced "
        "when Δ − t·SE ≥ −margin, contradicted when Δ + t·SE < −margin. Otherwise unresolved at "
        "this power (config claim_rules).",
        f"MDE (minimal detectable effect, direction checks only) = (t + t₈₀)·SE: the true gap a "
        f"direction check resolves from zero with {100 * POWER:g} % power. A tol or margin check can "
        "resolve only where t·SE is below its tol or margin.",
        "A cell without an sd of its own (one seed, a mean printed without spread, or an sd of zero) "
        "borrows the pooled seed sd of its model, corpus, condition family (hard top-k enforcement: "
        f"{', '.join(sorted(HARD_CONDITIONS))}; or soft) and metric, shown as 'sd … borrowed'; where "
        "that pool is empty, from the same family on other corpora, then other models, then other "
        "families, the text says which ('borrowed from other models'). Ours pool over our multi-seed "
        "cells, the paper's over every cell of reference/claims.csv that prints an sd. An sd is never "
        "below half a printed unit. A seed-matched cell (s42) is that seed's run alone.",
        "A claim is contradicted when any check is; else not testable here when a check's premise "
        "gate failed; else missing when a compared cell has no result; else unresolved when any check "
        "is; else reproduced. ✓ reproduced, ✗ contradicted, ? unresolved.",
        "Inexpressible rows are claims the paper makes that the rules cannot test (not resolved on the "
        "paper's own numbers, or on a metric or cell the table does not have): listed with the reason.",
    ]


def _frozen_bias_note(label: Callable[[str], str]) -> str:
    replaced = ", ".join(f"{label(a)} by {label(b)}" for a, b in FROZEN_BIAS.items())
    return (
        f"Expert-bias sensitivity (rows …{FROZEN_BIAS_SUFFIX}): the claim named without the suffix, read "
        f"again with {replaced}: those conditions trained with the routers' expert-bias update frozen "
        "(their settings: expert_bias_update_rate 0), as RPB trains (F.6), where the claim's own row "
        "trains them at training.expert_bias_update_rate. The paper never says which setting its "
        "baselines and anchors used (docs/choices.md)."
    )


def _premises_note() -> str:
    return (
        "Premises (results/tables/gates.md): an accuracy check reading in-domain items (ID, Overall@9, "
        "Avg (12)) rests on SFT learning in domain (in_domain_headroom on accuracy, per model and "
        "corpus), and an accuracy check of a hard-enforced condition on routing carrying the task "
        "(routing_carries_task, per model). Where such a gate failed, the check is 'not testable "
        "here' with the gate named, and gets no ✓ or ✗: the toy cannot show the effect, whatever it "
        "is. A gate not measured (a corpus without an SFT gate run) withholds nothing."
    )


def base_statistics(inputs: ReportInputs) -> dict[str, dict[str, float]]:
    """Appendix D.2's statistics of the scope claim's two frozen bases (:data:`SCOPE_MODEL`,
    :data:`SCOPE_REFERENCE`), from the base probes the claims' NMI already reads; a model not
    probed on both corpora of :data:`SPLITS` is left out (its premise is then not measured)."""
    models = (SCOPE_MODEL, SCOPE_REFERENCE)
    probes = [
        p for p in inputs.closure.probes if p.condition == BASE and p.model in models and p.corpus in SPLITS
    ]
    pairs = {(p.model, p.corpus) for p in probes}
    measured = [model for model in models if all((model, corpus) in pairs for corpus in SPLITS)]
    if not measured:
        return {}
    spans = span_frame(inputs.results, probes)
    domains = d2_domains(inputs.config, SPLITS, inputs.output_id)
    return {model: d2_statistics(spans, model, domains) for model in measured}


def _scope_note(
    statistics: Mapping[str, Mapping[str, float]], ratio: float, label: Callable[[str], str]
) -> str:
    model, reference = label(SCOPE_MODEL), label(SCOPE_REFERENCE)
    measured = "; ".join(
        f"{name} {fixed(statistics[SCOPE_MODEL][name], 4)} vs {fixed(statistics[SCOPE_REFERENCE][name], 4)}"
        for name in SCOPE_STATISTICS
        if SCOPE_MODEL in statistics and SCOPE_REFERENCE in statistics
    )
    return (
        f"Scope premise ({DIFFUSE_BASE_ROUTING}, Appendix D.2): deepseek_scope_condition's NMI checks rest "
        f"on {model}'s frozen base routing being diffuse and domain-invariant against {reference}'s, each "
        f"of ||p - U||_1 (math, sharpness_math) and ||p_math - p_code||_1 (cross_domain) at most "
        f"{ratio:g} times {reference}'s (the paper: 0.1399 vs 0.5445, 0.0724 vs 0.3735). "
        + (f"Here: {measured}." if measured else "Not measured here: withholds nothing.")
    )


def read_gates(inputs: ReportInputs) -> pd.DataFrame | None:
    """The gates table where this scale builds it (``layout.GATES_SCALES``), else None."""
    if inputs.config["scale"] not in layout.GATES_SCALES:
        return None
    path = inputs.results.path(layout.gates_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no sanity gates table (rule gates)")
    return pd.read_csv(path)


def claims_table(inputs: ReportInputs) -> Table:
    """The claims table: a row per claim of :data:`CLAIMS`, :data:`SENSITIVITY`, :data:`INEXPRESSIBLE`."""
    config = inputs.config
    rules = Rules.from_config(config["claim_rules"])
    labels = {name: spec["name"] for key in ("models", "corpora") for name, spec in config[key].items()}
    labels |= {name: spec["label"] for name, spec in config["conditions"].items()}

    def label(name: str) -> str:
        return labels.get(name, name)

    seeds = max((len(cell.get("eval_seeds", [])) for cell in inputs.cells), default=1)
    cells = {cell for claim in TESTED for cell in claim.cells()}
    # The sensitivity rows where their frozen variants are declared (toy scale: config.yaml's scales).
    declared = {condition for cell in inputs.cells for condition in cell.get("conditions", [])}
    sensitivity = SENSITIVITY if declared & set(FROZEN_BIAS.values()) else ()
    gates = read_gates(inputs)
    ratio = float(config["claim_rules"]["diffuse_ratio"])
    statistics = base_statistics(inputs)
    failed = failed_premises(gates) | failed_diffuse(statistics, SCOPE_MODEL, SCOPE_REFERENCE, ratio)
    rows = claim_rows(
        CLAIMS,
        our_estimates(seed_frame(inputs), cells),
        paper_estimates(inputs.reference),
        rules,
        label,
        seeds,
        INEXPRESSIBLE,
        sensitivity,
        failed,
    )
    notes = [
        "Ours: mean ± sample sd over training seeds (community NMI over probed seeds, bias-free); "
        "each accuracy seed score is an avg over the evaluation repeats, aggregated per Appendix F.4 "
        "(Avg (12): all twelve benchmarks, Tables 8, 12, 16).",
        *_rules_notes(rules),
        "Rules on the paper's numbers: the same checks on reference/claims.csv, with each value's "
        "seed count from its table's caption (F.5); every claim tested must be reproduced there.",
        *([_frozen_bias_note(label)] if sensitivity else []),
        *([_premises_note()] if gates is not None else []),
        _scope_note(statistics, ratio, label),
    ]
    if config["scale"] == "toy":
        notes.insert(
            0,
            "Toy scale: the models and data are toy stand-ins for the paper's, so a verdict here tests "
            "the pipeline, not the paper.",
        )
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=("claim",),
        columns=COLUMNS,
        rows=without_seeds(rows, COLUMNS),
        labels=COLUMN_LABELS,
        notes=tuple(notes),
    )


TABLES: dict[str, Callable[[ReportInputs], Table]] = {TABLE_ID: claims_table}
