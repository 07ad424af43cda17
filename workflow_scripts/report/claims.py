"""The paper's main qualitative claims, each checked against our results (``results/tables/claims.*``).

A claim is a few checks, each comparing one metric of two conditions of one model on every corpus
the claim names (RPB's community NMI above SFT's, ...). Our side of a check is the mean and sample
sd over training seeds of the per-seed values the other tables read (community NMI of the
bias-free probe, Overall@9 / ID per Appendix F.4); the paper's side is ``reference/claims.csv``.
Whether a check holds is computed by :func:`check_holds` under ``claim_rules`` of the config, and
a claim's verdict by :func:`claim_verdict`: never typed. The same rules run on the paper's numbers
too, so a rule that the paper itself would fail shows beside every verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from workflow_scripts.report.render import fixed
from workflow_scripts.report.routing_frames import retention_frame
from workflow_scripts.report.routing_tables import performance_seeds, without_seeds
from workflow_scripts.report.table import ReportInputs, Table, summarize_seeds

TABLE_ID = "claims"
ACCURACY_METRICS = ("overall9", "id", "ood")
METRICS = ("nmi", *ACCURACY_METRICS)
METRIC_LABELS = {"nmi": "Comm. NMI", "overall9": "Overall@9", "id": "ID", "ood": "OOD"}
DIGITS = {"nmi": 3, "overall9": 2, "id": 2, "ood": 2}
RELATIONS = ("above", "below", "close", "at_least")
RELATION_TEXT = {"above": "above", "below": "below", "close": "close to", "at_least": "at least"}
REPRODUCED, NOT_REPRODUCED, MISSING = "reproduced", "not reproduced", "missing"
HOLDS_MARK = {True: "✓", False: "✗", None: "missing"}
COLUMNS = ("statement", "compared", "ours", "paper", "verdict", "paper_check")
COLUMN_LABELS = {
    "claim": "Claim",
    "statement": "Claim in words (where the paper makes it)",
    "compared": "Compared cells",
    "ours": "Ours: mean ± sd over training seeds",
    "paper": "Paper",
    "verdict": "Our results",
    "paper_check": "Rules on the paper's numbers",
}
# (model, corpus, condition, metric): one compared quantity.
Key = tuple[str, str, str, str]


@dataclass(frozen=True)
class Estimate:
    """A quantity's mean and sample sd over ``n`` training seeds (sd NaN below two; n 0: missing)."""

    mean: float
    sd: float = math.nan
    n: int = 1

    @property
    def missing(self) -> bool:
        return self.n == 0 or math.isnan(self.mean)


MISSING_ESTIMATE = Estimate(math.nan, math.nan, 0)


@dataclass(frozen=True)
class Rules:
    """When a comparison of two seed means holds (config ``claim_rules``).

    The tolerances split the paper's own pairs: those it calls close (within-soft, within-hard and
    Router-L2 against RPB, Tables 5 and 15) differ by at most 0.007 NMI and 1.04 points, those it
    calls separated by at least 0.041 NMI (RPB over SFT, Table 15) and 4.36 points (RPB-hard under
    RPB, Table 6), so 0.02 NMI and 2 points leave room on both sides. ``spread_factor`` standard
    errors (two: the usual two-sided 95 % bound) keep an ordering inside the seed noise from
    counting; the t quantile for three seeds a side (about 2.8) would be stricter still.
    """

    nmi_points: float
    accuracy_points: float
    spread_factor: float

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> Rules:
        return cls(
            float(section["nmi_points"]), float(section["accuracy_points"]), float(section["spread_factor"])
        )

    def tolerance(self, metric: str) -> float:
        """The tolerance of ``metric`` in its own units (NMI units, or accuracy points)."""
        if metric == "nmi":
            return self.nmi_points
        if metric in ACCURACY_METRICS:
            return self.accuracy_points
        raise ValueError(f"claim metric {metric!r} has no tolerance (known: {', '.join(METRICS)})")


@dataclass(frozen=True)
class Check:
    """``metric`` of ``condition`` stands in ``relation`` to the same metric of ``reference``."""

    metric: str
    condition: str
    relation: str
    reference: str

    def __post_init__(self) -> None:
        if self.metric not in METRICS or self.relation not in RELATIONS:
            raise ValueError(f"check {self}: metric must be one of {METRICS}, relation one of {RELATIONS}")


@dataclass(frozen=True)
class Claim:
    """One qualitative claim of the paper: its words, where it is made, and the checks that test it."""

    claim_id: str
    statement: str
    sources: str
    model: str
    corpora: tuple[str, ...]
    checks: tuple[Check, ...]

    def keys(self) -> list[Key]:
        """Every compared quantity, in check order."""
        found: dict[Key, None] = {}
        for corpus in self.corpora:
            for check in self.checks:
                for condition in (check.condition, check.reference):
                    found[(self.model, corpus, condition, check.metric)] = None
        return list(found)


SPLITS = ("math20k", "coding20k")
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "lbl_below_rpb",
        "Re-applied load balancing (LBL) underperforms soft anchoring (RPB) on Overall@9.",
        "§5.1; Table 3",
        "moonlight",
        SPLITS,
        (Check("overall9", "rpb", "above", "lbl"),),
    ),
    Claim(
        "rpb_nmi_above_sft_lbl",
        "RPB keeps more of the base routing's community structure than SFT and than LBL: "
        "community NMI above both.",
        "§5.2.1; Table 15, also Tables 5, 6, 10",
        "moonlight",
        SPLITS,
        (Check("nmi", "rpb", "above", "sft"), Check("nmi", "rpb", "above", "lbl")),
    ),
    Claim(
        "rpb_id_at_least_sft",
        "RPB's in-domain accuracy is at least SFT's (in the paper, far above it).",
        "§5.1.1; Table 2",
        "moonlight",
        SPLITS,
        (Check("id", "rpb", "at_least", "sft"),),
    ),
    Claim(
        "within_soft_close_to_rpb",
        "A within-community shuffled prior applied softly (within-soft) keeps community NMI and "
        "Overall@9 close to RPB's: community-level anchoring suffices.",
        "§5.2.2; Table 5",
        "moonlight",
        SPLITS,
        (Check("nmi", "within_soft", "close", "rpb"), Check("overall9", "within_soft", "close", "rpb")),
    ),
    Claim(
        "within_hard_keeps_nmi_loses_accuracy",
        "The same within-community prior enforced as a hard top-k override (within-hard) keeps "
        "community NMI close to RPB's but loses Overall@9: enforcement strength is the operative axis.",
        "§5.2.2; Table 5",
        "moonlight",
        SPLITS,
        (Check("nmi", "within_hard", "close", "rpb"), Check("overall9", "within_hard", "below", "rpb")),
    ),
    Claim(
        "global_hard_loses_accuracy_not_nmi",
        "A globally shuffled hard prior (global-hard) loses Overall@9 further still, below within-hard, "
        "while its community NMI does not fall below RPB's (the paper: it is the highest).",
        "§5.2.2; Table 5",
        "moonlight",
        SPLITS,
        (
            Check("overall9", "global_hard", "below", "within_hard"),
            Check("nmi", "global_hard", "at_least", "rpb"),
        ),
    ),
    Claim(
        "router_l2_close_to_rpb",
        "Router-L2 at λ = 10⁴, a parameter-space anchor with no prior, holds community NMI at RPB's "
        "level, and its Overall@9 stays close to RPB's (the paper: within 0.6 points, no cost beyond "
        "the seed noise).",
        "§5.1.2; Tables 3, 7, 15, NMI also Table 10",
        "moonlight",
        SPLITS,
        (Check("nmi", "router_l2", "close", "rpb"), Check("overall9", "router_l2", "close", "rpb")),
    ),
    Claim(
        "rpb_hard_costs_accuracy",
        "Enforcing the base prior as a hard top-k assignment (RPB-hard) costs Overall@9 relative to "
        "soft RPB.",
        "Appendix A.1; Table 6, also Table 14",
        "moonlight",
        SPLITS,
        (Check("overall9", "rpb_hard", "below", "rpb"),),
    ),
)


def standard_error(a: Estimate, b: Estimate) -> float:
    """Standard error of ``a.mean - b.mean``: sqrt(sd_a^2/n_a + sd_b^2/n_b) over the sides with an sd.

    A side of one seed (or a value printed without spread) has no sd and adds nothing.
    """
    return math.sqrt(sum(e.sd**2 / e.n for e in (a, b) if not math.isnan(e.sd) and e.n > 0))


def check_holds(
    relation: str, a: Estimate, b: Estimate, tolerance: float, spread_factor: float
) -> bool | None:
    """Whether ``a`` stands in ``relation`` to ``b``; None when either is missing.

    With d = a.mean - b.mean and SE its :func:`standard_error`: ``close`` is |d| <= tolerance;
    ``above`` is d > tolerance and d > spread_factor * SE; ``below`` is -d > tolerance and
    -d > spread_factor * SE; ``at_least`` is d >= -tolerance.
    """
    if a.missing or b.missing:
        return None
    difference = a.mean - b.mean
    resolved = spread_factor * standard_error(a, b)
    if relation == "close":
        return abs(difference) <= tolerance
    if relation == "above":
        return difference > tolerance and difference > resolved
    if relation == "below":
        return -difference > tolerance and -difference > resolved
    if relation == "at_least":
        return difference >= -tolerance
    raise ValueError(f"unknown relation {relation!r} (known: {', '.join(RELATIONS)})")


def claim_verdict(outcomes: Iterable[bool | None]) -> str:
    """``not reproduced`` if any check fails, else ``missing`` if any lacks a value, else ``reproduced``."""
    outcomes = list(outcomes)
    if not outcomes:
        raise ValueError("a claim needs at least one check")
    if any(outcome is False for outcome in outcomes):
        return NOT_REPRODUCED
    if any(outcome is None for outcome in outcomes):
        return MISSING
    return REPRODUCED


@dataclass(frozen=True)
class Outcome:
    """One check on one corpus: both sides and whether it holds (None: a side is missing)."""

    corpus: str
    check: Check
    value: Estimate
    reference: Estimate
    holds: bool | None


def evaluate(claim: Claim, values: Mapping[Key, Estimate], rules: Rules) -> list[Outcome]:
    """Every check of ``claim`` on every corpus it names, with ``values`` (absent keys are missing)."""
    outcomes = []
    for corpus in claim.corpora:
        for check in claim.checks:
            a = values.get((claim.model, corpus, check.condition, check.metric), MISSING_ESTIMATE)
            b = values.get((claim.model, corpus, check.reference, check.metric), MISSING_ESTIMATE)
            holds = check_holds(check.relation, a, b, rules.tolerance(check.metric), rules.spread_factor)
            outcomes.append(Outcome(corpus, check, a, b, holds))
    return outcomes


def our_estimates(seeds: pd.DataFrame) -> dict[Key, Estimate]:
    """Mean, sample sd and count over seeds per (model, corpus, condition, metric).

    ``seeds`` is long: model, corpus, condition, seed, metric, value (one row per seed and metric).
    """
    keys = ["model", "corpus", "condition", "metric"]
    if seeds.empty:
        return {}
    stats = summarize_seeds(seeds, keys, ["value"])
    return {
        tuple(row[keys]): Estimate(float(row["value"]), float(row["value_sd"]), int(row["value_n"]))
        for _, row in stats.iterrows()
    }


def paper_estimates(reference: pd.DataFrame | None) -> dict[tuple[str, ...], Estimate]:
    """The paper's numbers per (claim, model, corpus, condition, metric) from ``reference/claims.csv``.

    The paper prints an sd only beside three-seed means (Appendix F.5), so a printed sd counts
    three seeds; a value printed without one adds no spread.
    """
    if reference is None:
        return {}
    values = {}
    for _, row in reference.iterrows():
        key = (row["claim"], row["model"], row["corpus"], row["condition"], row["column"])
        if key in values:
            raise ValueError(f"reference: {key} appears more than once")
        sd = float(row["sd"])
        values[key] = Estimate(float(row["value"]), sd, 1 if math.isnan(sd) else 3)
    return values


def claim_values(paper: Mapping[tuple[str, ...], Estimate], claim: Claim) -> dict[Key, Estimate]:
    """The paper's values of one claim, keyed like ours."""
    return {(m, c, k, metric): v for (i, m, c, k, metric), v in paper.items() if i == claim.claim_id}


def estimate_text(estimate: Estimate, digits: int, seeds: int) -> str:
    """``mean ± sd``, with the seed count where below ``seeds`` (0: never shown); ``missing`` if absent."""
    if estimate.missing:
        return MISSING
    text = fixed(estimate.mean, digits)
    if not math.isnan(estimate.sd):
        text += f" ± {fixed(estimate.sd, digits)}"
    if estimate.n < seeds:
        text += f" (n={estimate.n})"
    return text


def outcome_text(outcome: Outcome, label: Callable[[str], str], seeds: int) -> str:
    """``corpus: A a vs B b (Δ d ✓)`` for one check on one corpus."""
    check, digits = outcome.check, DIGITS[outcome.check.metric]
    a = estimate_text(outcome.value, digits, seeds)
    b = estimate_text(outcome.reference, digits, seeds)
    text = f"{label(outcome.corpus)}: {label(check.condition)} {a} vs {label(check.reference)} {b}"
    if outcome.holds is None:
        return f"{text} (missing)"
    difference = fixed(outcome.value.mean - outcome.reference.mean, digits, sign=True)
    return f"{text} (Δ {difference} {HOLDS_MARK[outcome.holds]})"


def compared_text(claim: Claim, label: Callable[[str], str]) -> str:
    """Model, corpora, and each check as ``metric: condition relation reference``."""
    checks = "; ".join(
        f"{METRIC_LABELS[c.metric]}: {label(c.condition)} {RELATION_TEXT[c.relation]} {label(c.reference)}"
        for c in claim.checks
    )
    return f"{label(claim.model)}; {', '.join(label(c) for c in claim.corpora)}; {checks}"


def claim_rows(
    claims: Sequence[Claim],
    ours: Mapping[Key, Estimate],
    paper: Mapping[tuple[str, ...], Estimate],
    rules: Rules,
    label: Callable[[str], str] = str,
    seeds: int = 3,
) -> pd.DataFrame:
    """One row per claim: its words, what it compares, our and the paper's numbers, the verdicts.

    ``verdict`` is :func:`claim_verdict` over our values; ``paper_check`` the same rules on the
    paper's values (``holds``, ``fails`` or ``missing``), which a well-posed claim passes.
    """
    rows = []
    for claim in claims:
        ours_outcomes = evaluate(claim, ours, rules)
        paper_outcomes = evaluate(claim, claim_values(paper, claim), rules)
        paper_verdict = claim_verdict(o.holds for o in paper_outcomes)
        rows.append(
            {
                "claim": claim.claim_id,
                "statement": f"{claim.statement} ({claim.sources})",
                "compared": compared_text(claim, label),
                "ours": "; ".join(outcome_text(o, label, seeds) for o in ours_outcomes),
                "paper": "; ".join(outcome_text(o, label, 0) for o in paper_outcomes),
                "verdict": claim_verdict(o.holds for o in ours_outcomes),
                "paper_check": {REPRODUCED: "holds", NOT_REPRODUCED: "fails"}.get(paper_verdict, MISSING),
            }
        )
    return pd.DataFrame(rows, columns=["claim", *COLUMNS])


def seed_frame(inputs: ReportInputs) -> pd.DataFrame:
    """Per-seed community NMI (probed seeds) and Overall@9 / ID / OOD (trained seeds), long.

    Columns model, corpus, condition, seed, metric, value: read through the frames every other
    table reads (``retention_frame``, ``performance_seeds``) from exactly the closure's files.
    """
    keys = ["model", "corpus", "condition", "seed"]
    probes = inputs.closure.probes
    nmi = retention_frame(inputs.results, probes)[[*keys, "nmi"]]
    performance = performance_seeds(inputs)
    parts = [
        nmi.melt(id_vars=keys, value_vars=["nmi"], var_name="metric"),
        performance.melt(id_vars=keys, value_vars=list(ACCURACY_METRICS), var_name="metric"),
    ]
    parts = [part for part in parts if not part.empty]
    if not parts:
        return pd.DataFrame(columns=[*keys, "metric", "value"])
    return pd.concat(parts, ignore_index=True).astype({"seed": "Int64", "value": float})


def _rules_note(rules: Rules) -> str:
    return (
        f"A check holds when, with Δ the first mean minus the second and SE = √(sd₁²/n₁ + sd₂²/n₂): "
        f"close |Δ| ≤ tol; above Δ > tol and Δ > {rules.spread_factor:g}·SE; below −Δ > tol and "
        f"−Δ > {rules.spread_factor:g}·SE; at least Δ ≥ −tol; tol is {rules.nmi_points:g} NMI or "
        f"{rules.accuracy_points:g} accuracy points (config claim_rules). A claim is reproduced when every "
        "check holds on every corpus, not reproduced when one fails, missing when a compared cell has no "
        "result and none fails."
    )


def claims_table(inputs: ReportInputs) -> Table:
    """The claims table: one row per claim of :data:`CLAIMS`, verdicts computed from the results."""
    config = inputs.config
    rules = Rules.from_config(config["claim_rules"])
    labels = {name: spec["name"] for key in ("models", "corpora") for name, spec in config[key].items()}
    labels |= {name: spec["label"] for name, spec in config["conditions"].items()}
    seeds = max((len(cell.get("eval_seeds", [])) for cell in inputs.cells), default=1)
    rows = claim_rows(
        CLAIMS,
        our_estimates(seed_frame(inputs)),
        paper_estimates(inputs.reference),
        rules,
        lambda name: labels.get(name, name),
        seeds,
    )
    notes = [
        "Ours: mean ± sample sd over training seeds (community NMI over probed seeds, bias-free); "
        "each accuracy seed score is an avg over the evaluation repeats, aggregated per Appendix F.4.",
        _rules_note(rules),
        "Rules on the paper's numbers: the same checks on reference/claims.csv (a printed sd counts "
        "three seeds), so a claim the paper's own numbers would not pass shows as fails.",
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


def needed_cells(claims: Iterable[Claim]) -> dict[str, set[tuple[str, str, str]]]:
    """(model, corpus, condition) the claims evaluate (accuracy metrics) and probe (NMI)."""
    needed: dict[str, set[tuple[str, str, str]]] = {"eval": set(), "probe": set()}
    for claim in claims:
        for model, corpus, condition, metric in claim.keys():
            needed["probe" if metric == "nmi" else "eval"].add((model, corpus, condition))
    return needed


TABLES: dict[str, Callable[[ReportInputs], Table]] = {TABLE_ID: claims_table}
