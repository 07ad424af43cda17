"""The claims table's rules: what one check of two cells means, read against the seeds' spread.

A check compares one metric of two cells (model, corpus, condition, and one training seed or the
mean over seeds), or the gap between two cells of one model with the same gap of another, or
with zero. Each relation says how the paper's words are read:

- ``above`` / ``below`` (the paper states an ordering): the direction, with its uncertainty; no
  tolerance (A.3: "we read the direction of the gaps ... rather than their size").
- ``close`` (the paper states a magnitude: "close", "within about one point"): an equivalence
  within the metric's tolerance.
- ``at_least`` ("at or above"): non-inferiority within the metric's at-or-above margin.

A difference Δ is read against its bound b = t·SE: SE = √(Σ sd²/n) over the compared cells (seed
means taken as independent), t the one-sided ``confidence`` quantile of Student's t at the
Welch-Satterthwaite degrees of freedom (a borrowed sd brings its pool's): every relation is a
one-sided test (``close`` two of them, TOST) at level 1 − ``confidence``. A cell without an sd of
its own (one seed, a mean printed without spread, or an sd of zero) borrows the pooled sd of its
model, corpus, condition family (hard top-k enforcement or soft) and metric, widening to other
corpora, other models, then other families only where nothing nearer exists (the text says which).

A check rests on premises (:func:`premises`): sanity gates of ``report/gates.py``. Where one of
them failed at this scale, the check is not testable here and gets no verdict.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from scipy import stats

from workflow_scripts.report.gates import IN_DOMAIN_HEADROOM, LOGLIK, ROUTING_CARRIES_TASK

SPLITS = ("math20k", "coding20k")
ACCURACY_METRICS = ("overall9", "id", "ood", "avg12")
METRICS = ("nmi", *ACCURACY_METRICS)
METRIC_LABELS = {"nmi": "Comm. NMI", "overall9": "Overall@9", "id": "ID", "ood": "OOD", "avg12": "Avg (12)"}
DIGITS = {"nmi": 3, "overall9": 2, "id": 2, "ood": 2, "avg12": 2}
RELATIONS = ("above", "below", "close", "at_least")
RELATION_TEXT = {"above": "above", "below": "below", "close": "close to", "at_least": "at or above"}
#: What each relation reads: the direction of an ordering, or a magnitude against a tolerance.
READING = {"above": "direction", "below": "direction", "close": "tolerance", "at_least": "margin"}
#: The conditions enforcing a prior as a hard top-k override: their seed spread is several times
#: soft training's (Table 18), so their single seeds borrow only from each other.
HARD_CONDITIONS = frozenset({"rpb_hard", "within_hard", "global_hard"})
#: Power of the minimal detectable effect.
POWER = 0.8
REPRODUCED, CONTRADICTED, UNRESOLVED, MISSING, NOT_TESTABLE = (
    "reproduced",
    "contradicted",
    "unresolved at this power",
    "missing",
    "not testable here",
)
VERDICT_MARK = {
    REPRODUCED: "✓",
    CONTRADICTED: "✗",
    UNRESOLVED: "?",
    MISSING: "missing",
    NOT_TESTABLE: NOT_TESTABLE,
}
#: The accuracy metrics that read in-domain items (Overall@9 and Avg (12) include them).
IN_DOMAIN_METRICS = ("id", "overall9", "avg12")
#: The gates' metric for accuracy (report/gates.py: avg@k per item, in percent).
GATE_ACCURACY = "accuracy"
#: Where a borrowed sd came from, nearest first (see :func:`pool_keys`).
POOL_SCOPES = ("", "other corpora", "other models", "other condition families")


def family(condition: str) -> str:
    """A condition's family for pooling seed spreads: ``hard`` top-k enforcement or ``soft``."""
    return "hard" if condition in HARD_CONDITIONS else "soft"


def half_unit(metric: str) -> float:
    """Half a unit of the last printed digit: an sd of zero is no smaller than its rounding."""
    return 0.5 * 10.0 ** -DIGITS[metric]


@dataclass(frozen=True)
class Estimate:
    """A cell's mean and sample sd over ``n`` training seeds (n 0: missing).

    ``borrowed``: the sd is not the cell's own but a pooled one (:func:`with_spread`), from the
    pool named by ``scope`` ("" : the cell's own model, corpus and family) with ``pool_dof``
    degrees of freedom; an own sd has n - 1.
    """

    mean: float
    sd: float = math.nan
    n: int = 1
    borrowed: bool = False
    scope: str = ""
    pool_dof: float = math.nan

    @property
    def missing(self) -> bool:
        return self.n == 0 or math.isnan(self.mean)

    @property
    def dof(self) -> float:
        """The degrees of freedom of the sd."""
        return self.pool_dof if self.borrowed else float(self.n - 1)


MISSING_ESTIMATE = Estimate(math.nan, math.nan, 0)


@dataclass(frozen=True)
class Rules:
    """The tolerances and the confidence of a check (config ``claim_rules``).

    ``*_points``: the tolerance of a ``close`` check; the paper's own close pairs differ by at
    most 0.007 NMI (RPB against β = 0.5, Table 6) and 1.04 points (within-soft against RPB,
    Table 5). ``at_least_*_points``: how far below the reference an ``at_least`` check may sit,
    under the smallest gap the paper calls a separation (RPB over SFT, 0.041 NMI, Table 15).
    """

    nmi_points: float
    accuracy_points: float
    at_least_nmi_points: float
    at_least_accuracy_points: float
    confidence: float = 0.95

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> Rules:
        return cls(
            float(section["nmi_points"]),
            float(section["accuracy_points"]),
            float(section["at_least_nmi_points"]),
            float(section["at_least_accuracy_points"]),
            float(section["confidence"]),
        )

    def tolerance(self, metric: str, relation: str = "close") -> float:
        """What ``relation`` allows in ``metric``'s units: the tolerance, the margin, or 0 (an ordering)."""
        if metric not in METRICS:
            raise ValueError(f"claim metric {metric!r} has no tolerance (known: {', '.join(METRICS)})")
        if READING[relation] == "direction":
            return 0.0
        if relation == "at_least":
            return self.at_least_nmi_points if metric == "nmi" else self.at_least_accuracy_points
        return self.nmi_points if metric == "nmi" else self.accuracy_points

    def quantile(self, dof: float) -> float:
        """One-sided ``confidence`` quantile of Student's t at ``dof`` (NaN without any)."""
        if math.isnan(dof) or dof <= 0:
            return math.nan
        return float(stats.t.ppf(self.confidence, dof))

    def bound(self, se: float, dof: float) -> float:
        """t·SE: how far a difference must clear a threshold for a one-sided test to pass."""
        return self.quantile(dof) * se

    def mde(self, se: float, dof: float) -> float:
        """Minimal detectable effect of a direction check: the true gap resolved with 80 % power."""
        if math.isnan(dof) or dof <= 0:
            return math.nan
        return (self.quantile(dof) + float(stats.t.ppf(POWER, dof))) * se


@dataclass(frozen=True)
class Cell:
    """One compared quantity: ``metric`` of a (model, corpus, condition) run.

    ``seed`` None is the mean over every training seed the claims table declares for the cell;
    a seed is that seed's run alone (a seed-matched comparison, Table 6).
    """

    model: str
    corpus: str
    condition: str
    metric: str
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"cell {self}: metric must be one of {METRICS}")


@dataclass(frozen=True)
class Side:
    """One side of a check: a cell's value, or the gap ``cell`` minus ``less`` within one model and corpus."""

    cell: Cell
    less: Cell | None = None

    def __post_init__(self) -> None:
        if self.less is not None and (self.less.model, self.less.corpus, self.less.metric) != (
            self.cell.model,
            self.cell.corpus,
            self.cell.metric,
        ):
            raise ValueError(f"gap {self}: both cells need one model, corpus and metric")

    def cells(self) -> tuple[Cell, ...]:
        return (self.cell,) if self.less is None else (self.cell, self.less)


@dataclass(frozen=True)
class Premise:
    """A premise a check rests on, a sanity gate of ``report/gates.py`` or the scope premise of
    ``report/scope_premise.py``: its name, metric, model and corpus (``-``: the base model alone)."""

    gate: str
    metric: str
    model: str
    corpus: str


@dataclass(frozen=True)
class Check:
    """``side`` stands in ``relation`` to ``reference`` (None: zero), on one metric; ``rests_on``:
    premises of this check beyond those its metric and conditions bring (:func:`premises`)."""

    relation: str
    side: Side
    reference: Side | None
    rests_on: tuple[Premise, ...] = ()

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"check {self}: relation must be one of {RELATIONS}")
        if self.reference is not None and self.side.cell.metric != self.reference.cell.metric:
            raise ValueError(f"check {self}: both sides need one metric")

    @property
    def metric(self) -> str:
        return self.side.cell.metric

    @property
    def corpus(self) -> str:
        return self.side.cell.corpus

    @property
    def reading(self) -> str:
        return READING[self.relation]

    def cells(self) -> tuple[Cell, ...]:
        return (*self.side.cells(), *(() if self.reference is None else self.reference.cells()))

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(cell.model for cell in self.cells()))


@dataclass(frozen=True)
class Claim:
    """One qualitative claim of the paper: its words, where it is made, and the checks that test it."""

    claim_id: str
    statement: str
    sources: str
    checks: tuple[Check, ...]

    def __post_init__(self) -> None:
        if not self.checks:
            raise ValueError(f"claim {self.claim_id}: needs at least one check")
        if len(set(self.checks)) != len(self.checks):
            raise ValueError(f"claim {self.claim_id}: a check appears twice")

    def cells(self) -> list[Cell]:
        """Every compared cell, in check order, without repeats."""
        return list(dict.fromkeys(cell for check in self.checks for cell in check.cells()))

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(model for check in self.checks for model in check.models()))


@dataclass(frozen=True)
class Inexpressible:
    """A claim the paper makes that the rules cannot test, with the paper's numbers and the reason."""

    claim_id: str
    statement: str
    sources: str
    paper: str
    reason: str


def premises(check: Check) -> tuple[Premise, ...]:
    """The premise gates of ``check``, per compared model.

    - An accuracy check reading in-domain items (ID, Overall@9, Avg (12)) rests on SFT learning in
      domain at all (``in_domain_headroom`` on accuracy, the model and corpus): without that gain
      the fine-tuned conditions have nothing in domain to differ in.
    - An accuracy check with a hard-enforced condition rests on routing carrying the task
      (``routing_carries_task``, the base model): otherwise overriding it can cost nothing.

    Community NMI checks rest on neither. A check's own ``rests_on`` premises come last (the DeepSeek
    scope claim's diffuse base routing, ``report/scope_premise.py``).
    """
    found: list[Premise] = []
    if check.metric == "nmi":
        return check.rests_on
    for cell in check.cells():
        if check.metric in IN_DOMAIN_METRICS:
            found.append(Premise(IN_DOMAIN_HEADROOM, GATE_ACCURACY, cell.model, cell.corpus))
        if cell.condition in HARD_CONDITIONS:
            found.append(Premise(ROUTING_CARRIES_TASK, LOGLIK, cell.model, "-"))
    return tuple(dict.fromkeys((*found, *check.rests_on)))


def check_verdict(relation: str, difference: float, bound: float, tolerance: float) -> str:
    """Reproduced, contradicted or unresolved, for ``difference`` Δ (side minus reference) with its
    ``bound`` b = t·SE and the relation's ``tolerance`` (0 for an ordering).

    - above: reproduced when Δ − b > 0; contradicted when Δ + b < 0 (the direction, resolved).
    - below: the same for −Δ.
    - close (equivalence, TOST-style): reproduced when |Δ| + b ≤ tol; contradicted when |Δ| − b > tol.
    - at_least (non-inferiority): reproduced when Δ − b ≥ −tol; contradicted when Δ + b < −tol.

    Otherwise unresolved at this power. A NaN difference is missing; a NaN bound (no spread to
    borrow) leaves the check unresolved.
    """
    if relation not in RELATIONS:
        raise ValueError(f"unknown relation {relation!r} (known: {', '.join(RELATIONS)})")
    if math.isnan(difference):
        return MISSING
    if math.isnan(bound):
        return UNRESOLVED
    if relation in ("above", "below"):
        d = difference if relation == "above" else -difference
        if d - bound > 0:
            return REPRODUCED
        return CONTRADICTED if d + bound < 0 else UNRESOLVED
    if relation == "close":
        if abs(difference) + bound <= tolerance:
            return REPRODUCED
        return CONTRADICTED if abs(difference) - bound > tolerance else UNRESOLVED
    if difference - bound >= -tolerance:
        return REPRODUCED
    return CONTRADICTED if difference + bound < -tolerance else UNRESOLVED


def claim_verdict(verdicts: Iterable[str]) -> str:
    """Contradicted if any check is; else not testable here if a check's premise failed; else
    missing if any cell lacks a value; else unresolved if any check is; else reproduced."""
    verdicts = list(verdicts)
    if not verdicts:
        raise ValueError("a claim needs at least one check")
    for verdict in (CONTRADICTED, NOT_TESTABLE, MISSING, UNRESOLVED):
        if verdict in verdicts:
            return verdict
    return REPRODUCED


PoolKey = tuple[str, ...]


def pool_keys(cell: Cell) -> tuple[PoolKey, ...]:
    """The pools a cell's sd enters and may borrow from, nearest first (:data:`POOL_SCOPES`):
    its model, corpus and family; its model and family; its family; its metric."""
    kind = family(cell.condition)
    return (
        (cell.model, cell.corpus, kind, cell.metric),
        (cell.model, kind, cell.metric),
        (kind, cell.metric),
        (cell.metric,),
    )


def pooled_sds(values: Iterable[tuple[Cell, Estimate]]) -> dict[PoolKey, tuple[float, float]]:
    """Per pool (:func:`pool_keys`), the pooled sample sd √(Σ (n−1) sd² / Σ (n−1)) over cells with
    an sd of their own, and its degrees of freedom Σ (n−1)."""
    sums: dict[PoolKey, list[float]] = {}
    for cell, estimate in values:
        if estimate.n >= 2 and not estimate.borrowed and not math.isnan(estimate.sd):
            for key in pool_keys(cell):
                total = sums.setdefault(key, [0.0, 0.0])
                total[0] += (estimate.n - 1) * estimate.sd**2
                total[1] += estimate.n - 1
    return {key: (math.sqrt(squares / dof), dof) for key, (squares, dof) in sums.items()}


def with_spread(
    values: Mapping[Cell, Estimate], pooled: Mapping[PoolKey, tuple[float, float]]
) -> dict[Cell, Estimate]:
    """``values`` where a present cell without an sd of its own, or with an sd of zero, borrows the
    nearest pooled sd (``pooled``, :func:`pool_keys`); an sd is never below half a printed unit."""
    out = {}
    for cell, estimate in values.items():
        if not estimate.missing and (math.isnan(estimate.sd) or estimate.sd == 0):
            for key, scope in zip(pool_keys(cell), POOL_SCOPES, strict=True):
                if key in pooled and pooled[key][0] > 0:
                    sd, dof = pooled[key]
                    estimate = replace(estimate, sd=sd, borrowed=True, scope=scope, pool_dof=dof)
                    break
        if not math.isnan(estimate.sd) and estimate.sd < half_unit(cell.metric):
            estimate = replace(estimate, sd=half_unit(cell.metric))
        out[cell] = estimate
    return out


def side_terms(side: Side | None, values: Mapping[Cell, Estimate]) -> tuple[float, list[tuple[float, float]]]:
    """A side's value and each cell's (sd²/n, dof); NaN where a cell is missing; zero for None."""
    if side is None:
        return 0.0, []
    estimates = [values.get(cell, MISSING_ESTIMATE) for cell in side.cells()]
    if any(e.missing for e in estimates):
        return math.nan, []
    value = estimates[0].mean - (estimates[1].mean if len(estimates) == 2 else 0.0)
    return value, [(e.sd**2 / e.n, e.dof) for e in estimates]


def side_value(side: Side | None, values: Mapping[Cell, Estimate]) -> tuple[float, float]:
    """A side's value and the variance of its mean (Σ sd²/n over its cells)."""
    value, terms = side_terms(side, values)
    return value, (math.nan if math.isnan(value) else sum(v for v, _ in terms))


def welch_dof(terms: Iterable[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of Σ v_i: (Σ v)² / Σ v²/dof_i (NaN where a term has none)."""
    terms = [(v, dof) for v, dof in terms if v > 0 or math.isnan(v)]
    if not terms or any(math.isnan(v) or math.isnan(dof) or dof <= 0 for v, dof in terms):
        return math.nan
    return sum(v for v, _ in terms) ** 2 / sum(v**2 / dof for v, dof in terms)


@dataclass(frozen=True)
class Outcome:
    """One check: its difference, the standard error and degrees of freedom of that difference,
    its bound t·SE and the verdict; ``failed``, the premises that failed (then not testable here)."""

    check: Check
    difference: float
    se: float
    dof: float
    bound: float
    verdict: str
    failed: tuple[Premise, ...] = ()


def coefficients(check: Check) -> dict[Cell, float]:
    """Each cell's weight in the check's difference (side minus reference): a cell on both sides
    (within-soft in within-soft − within-hard against RPB − within-soft) is one term, weight 2."""
    weights: dict[Cell, float] = {}
    for side, sign in ((check.side, 1.0), (check.reference, -1.0)):
        if side is None:
            continue
        weights[side.cell] = weights.get(side.cell, 0.0) + sign
        if side.less is not None:
            weights[side.less] = weights.get(side.less, 0.0) - sign
    return {cell: weight for cell, weight in weights.items() if weight != 0}


def evaluate(
    claim: Claim, values: Mapping[Cell, Estimate], rules: Rules, failed: Collection[Premise] = ()
) -> list[Outcome]:
    """Every check of ``claim`` with ``values`` (absent cells are missing); a check with a premise
    in ``failed`` is not testable here, whatever its numbers.

    Δ = Σ c·mean and SE² = Σ c²·sd²/n over the check's cells with their weights c
    (:func:`coefficients`), the cells' seed means taken as independent.
    """
    outcomes = []
    for check in claim.checks:
        estimates = {cell: values.get(cell, MISSING_ESTIMATE) for cell in check.cells()}
        if any(e.missing for e in estimates.values()):
            difference, terms = math.nan, []
        else:
            weights = coefficients(check)
            difference = sum(w * estimates[cell].mean for cell, w in weights.items())
            terms = [
                (w**2 * estimates[c].sd ** 2 / estimates[c].n, estimates[c].dof) for c, w in weights.items()
            ]
        se = math.sqrt(sum(v for v, _ in terms)) if terms else math.nan
        dof = welch_dof(terms)
        bound = rules.bound(se, dof)
        tolerance = rules.tolerance(check.metric, check.relation)
        verdict = check_verdict(check.relation, difference, bound, tolerance)
        blocked = tuple(premise for premise in premises(check) if premise in failed)
        outcomes.append(
            Outcome(check, difference, se, dof, bound, NOT_TESTABLE if blocked else verdict, blocked)
        )
    return outcomes
