"""The paper's performance tables (2, 3, 4, 7, 8, 12, 14, 16-19) from the evaluation summaries.

Each function reads exactly the evaluations its registry closure names and
follows the seed protocol of its caption (Appendix F.5): multi-seed cells are
the mean and sample sd across training seeds of the per-seed score (an avg@5,
or its Overall@9 / twelve-benchmark aggregate); single-seed per-benchmark
tables (17, 19) and the base rows show the sd over the evaluation repeats.
Row and column order follow the paper; keys are registry ids.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pandas as pd

from workflow_scripts.registry import BASE, Evaluation, closure
from workflow_scripts.report.frames import RUN_KEYS, aggregate_frame, performance_frame, repeat_frame
from workflow_scripts.report.routing_frames import retention_frame
from workflow_scripts.report.table import ReportInputs, Table, summarize_seeds
from workflow_scripts.score_aggregates import SUITE_COLUMNS, suite_members

# Column order of the paper's per-benchmark tables, by family, registry order within one: the
# nine-benchmark tables (17-19) multi-domain, math, code; the twelve-benchmark Table 16
# multi-domain, code, math. The benchmarks themselves are the registry's (score_aggregates.py).
FAMILY_ORDER = {"overall9": ("multi_domain", "math", "code"), "all12": ("multi_domain", "code", "math")}


def benchmark_columns(benchmarks: Mapping[str, Mapping[str, Any]], suite: str) -> tuple[str, ...]:
    """The benchmark columns of a per-benchmark table of ``suite``, in the paper's order."""
    order = FAMILY_ORDER[suite]
    members = suite_members(benchmarks, suite)
    return tuple(sorted(members, key=lambda name: order.index(benchmarks[name]["family"])))


CORPUS_KEYS = ("corpus", "condition")
LABELS = {
    "corpus": "Dataset",
    "condition": "Method",
    "model": "Model",
    "overall9": "Overall@9",
    "avg12": "Avg",
    "id": "ID",
    "ood": "OOD",
    "nmi": "Comm. NMI",
    "id_ood_mean": "(ID+OOD)/2",
    "delta_rpb": "$\\Delta$ vs. RPB",
    BASE: "Base",
}


def display_labels(config: Mapping[str, Any], **overrides: str) -> dict[str, str]:
    """Display names: registry names of models, corpora, benchmarks and conditions, then table overrides."""
    labels = {name: spec["name"] for name, spec in config["models"].items()}
    labels |= {name: spec["name"] for name, spec in config["corpora"].items()}
    labels |= {name: spec["name"] for name, spec in config["benchmarks"].items()}
    labels |= {name: spec["label"] for name, spec in config["conditions"].items()}
    return labels | LABELS | overrides


def _layout(inputs: ReportInputs) -> tuple[tuple[str, ...], frozenset[Evaluation]]:
    """The table's rows and what they read: its conditions in the order its cells first list them
    (the base model's row first, where a cell evaluates it) and its closure's evaluations.

    A condition named in a table's cells is a row of it by config alone; the paper's published
    value is set beside each cell it prints (``—`` where it prints none) when the table renders.
    """
    evaluations = inputs.closure.evaluations
    base = (BASE,) if any(evaluation.condition == BASE for evaluation in evaluations) else ()
    return (*base, *inputs.rank("conditions")), evaluations


def _ordered(
    rows: pd.DataFrame, config: Mapping[str, Any], keys: Sequence[str], orders: Mapping[str, Sequence[Any]]
) -> pd.DataFrame:
    """Rows sorted key by key in the paper's order (corpora in registry order, the base row's None first)."""
    orders = {"corpus": [None, *config["corpora"]], **orders}
    ranks = []
    for key in keys:
        order = list(orders[key])
        values = [None if pd.isna(value) else value for value in rows[key]]
        unknown = sorted({str(value) for value in values if value not in order})
        if unknown:
            raise ValueError(f"rows hold {key} values {unknown} outside the table's layout {order}")
        ranks.append([order.index(value) for value in values])
    position = sorted(range(len(rows)), key=lambda index: tuple(rank[index] for rank in ranks))
    return rows.iloc[position].reset_index(drop=True)


def _summarize(frame: pd.DataFrame, keys: Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """Mean ± sample sd over training seeds (F.5); a base row has no seed, so its counts are 0."""
    rows = summarize_seeds(frame, keys, columns)
    if "condition" in rows.columns:
        unseeded = rows["condition"] == BASE
        for column in columns:
            rows.loc[unseeded, f"{column}_n"] = 0
    return rows


def _seed_note(evaluations: Iterable[Evaluation]) -> str:
    """The seed protocol of the table's trained rows (F.5), for its notes."""
    seeds = sorted({e.seed for e in evaluations if e.seed is not None})
    names = " / ".join(f"s{seed}" for seed in seeds)
    if len(seeds) == 1:
        return f"Single training seed ({names}); each score is an avg@5."
    return f"Mean ± sample sd across training seeds ({names}); each seed score is an avg@5."


def _aggregates(inputs: ReportInputs, evaluations: Iterable[Evaluation], suite: str) -> pd.DataFrame:
    return aggregate_frame(performance_frame(inputs.results, evaluations), inputs.config, suite)


def _table(
    inputs: ReportInputs, keys: Sequence[str], columns: Sequence[str], rows: pd.DataFrame, **kw: Any
) -> Table:
    title = inputs.title
    return Table(
        table_id=inputs.output_id, title=title, keys=tuple(keys), columns=tuple(columns), rows=rows, **kw
    )


def _overall9_table(
    inputs: ReportInputs, columns: Sequence[str], labels: Mapping[str, str], bold: bool
) -> Table:
    """Corpus x condition rows of Overall@9-suite aggregates, mean ± sd across seeds (Tables 2, 3, 7)."""
    conditions, evaluations = _layout(inputs)
    seeds = _aggregates(inputs, evaluations, "overall9")
    rows = _ordered(
        _summarize(seeds, CORPUS_KEYS, columns), inputs.config, CORPUS_KEYS, {"condition": conditions}
    )
    return _table(
        inputs,
        CORPUS_KEYS,
        columns,
        rows,
        labels=labels,
        bold=dict.fromkeys(columns, "max") if bold else {},
        block="corpus",
        notes=(_seed_note(evaluations), "Aggregates over the nine-benchmark suite (Appendix F.4)."),
    )


def table2(inputs: ReportInputs) -> Table:
    """Table 2: Moonlight ID / OOD over the nine-benchmark suite, mean ± sd across three seeds."""
    labels = display_labels(inputs.config, sft="SFT")
    return _overall9_table(inputs, ("id", "ood"), labels, bold=False)


def table3(inputs: ReportInputs) -> Table:
    """Table 3: the four anchoring objectives and both baselines, Overall@9, best per corpus in bold."""
    labels = display_labels(inputs.config, sft="NoAux / SFT", lbl="LBL (re-applied)")
    return _overall9_table(inputs, ("overall9",), labels, bold=True)


def table4(inputs: ReportInputs) -> Table:
    """Table 4: Qwen3-30B-A3B on both corpora and Moonlight on OpenR1-Math, Overall@9 mean ± sd."""
    conditions, evaluations = _layout(inputs)
    keys = ("model", "corpus", "condition")
    seeds = _aggregates(inputs, evaluations, "overall9")
    rows = _summarize(seeds, keys, ("overall9",))
    rows = _ordered(
        rows, inputs.config, keys, {"model": list(inputs.rank("models")), "condition": conditions}
    )
    notes = (_seed_note(evaluations), "Aggregates over the nine-benchmark suite (Appendix F.4).")
    labels = display_labels(inputs.config, sft="NoAux")
    return _table(inputs, keys, ("overall9",), rows, labels=labels, block="model", notes=notes)


def table7(inputs: ReportInputs) -> Table:
    """Table 7: Router-L2 at lambda 1e2 / 1e3 (single seed) and 1e4 (three seeds), Overall@9."""
    labels = display_labels(
        inputs.config,
        condition="$\\lambda$",
        router_l2_1e2="$\\lambda=10^{2}$",
        router_l2_1e3="$\\lambda=10^{3}$",
        router_l2="$\\lambda=10^{4}$",
    )
    return _overall9_table(inputs, ("overall9",), labels, bold=True)


def table8(inputs: ReportInputs) -> Table:
    """Table 8: ST-MoE z-loss, twelve-benchmark mean at a single seed, per corpus and model."""
    conditions, evaluations = _layout(inputs)
    if len(conditions) != 1:
        raise ValueError(
            f"{inputs.output_id}: its rows are corpus x model of one condition; "
            f"its cells give {list(conditions)}"
        )
    keys = ("corpus", "model")
    rows = _summarize(_aggregates(inputs, evaluations, "all12"), keys, ("avg12",))
    rows = _ordered(rows, inputs.config, keys, {"model": list(inputs.config["models"])})
    notes = (_seed_note(evaluations), "Avg is the mean over all twelve benchmarks, not Overall@9.")
    return _table(
        inputs, keys, ("avg12",), rows, labels=display_labels(inputs.config), block="corpus", notes=notes
    )


def table12(inputs: ReportInputs) -> Table:
    """Table 12: DeepSeek-V2-Lite twelve-benchmark ID / OOD / Avg with community NMI, single seed.

    The base model is evaluated once; its row repeats in every corpus block,
    with ID and OOD split by that corpus' domain.
    """
    conditions, evaluations = _layout(inputs)
    performance = performance_frame(inputs.results, evaluations)
    trained = performance[performance["condition"] != BASE]
    base = performance[performance["condition"] == BASE]
    corpora = [corpus for corpus in inputs.config["corpora"] if corpus in set(trained["corpus"])]
    performance = pd.concat([trained, *(base.assign(corpus=corpus) for corpus in corpora)], ignore_index=True)
    seeds = aggregate_frame(performance, inputs.config, "all12")
    probes = closure(inputs.config, inputs.output_id).probes
    retention = retention_frame(inputs.results, probes)[[*RUN_KEYS, "nmi"]]
    retention = retention.astype({"seed": "Int64"})
    seeds = seeds.merge(retention, on=list(RUN_KEYS), how="left")
    columns = ("id", "ood", "avg12", "nmi")
    rows = _ordered(
        _summarize(seeds, CORPUS_KEYS, columns), inputs.config, CORPUS_KEYS, {"condition": conditions}
    )
    notes = (
        _seed_note(evaluations),
        "ID, OOD and Avg aggregate all twelve benchmarks; Comm. NMI is against the base partition.",
        "The Base rows' Comm. NMI (the base partition against itself) is not measured.",
    )
    labels = display_labels(inputs.config, sft="SFT")
    return _table(
        inputs, CORPUS_KEYS, columns, rows, labels=labels, block="corpus", notes=notes, digits={"nmi": 3}
    )


def _hardness_label(config: Mapping[str, Any], condition: str) -> str:
    """Table 14's Prior and Constraint columns as label text, from the condition's registry entry."""
    spec = config["conditions"][condition]
    kind = spec.get("prior")
    if kind is None:  # a condition without a prior, named in the table's cells
        return spec["label"]
    prior = "base prior" if kind == BASE else f"{kind.removeprefix('shuffled_')}-shuffled prior"
    constraint = "hard" if spec["intervention"] == "rpb_hard" else "soft"
    return f"{spec['label']} ({prior}, {constraint})"


def table14(inputs: ReportInputs) -> Table:
    """Table 14: hardness vs shuffle scope; ID, OOD, (ID+OOD)/2 and its difference from RPB per corpus."""
    conditions, evaluations = _layout(inputs)
    seeds = _aggregates(inputs, evaluations, "overall9")
    seeds["id_ood_mean"] = (seeds["id"] + seeds["ood"]) / 2
    rows = _summarize(seeds, CORPUS_KEYS, ("id", "ood", "id_ood_mean"))
    rows = _ordered(rows, inputs.config, CORPUS_KEYS, {"condition": conditions})
    reference = rows[rows["condition"] == "rpb"].set_index("corpus")["id_ood_mean"]
    rows["delta_rpb"] = (rows["id_ood_mean"] - rows["corpus"].map(reference)).where(
        rows["condition"] != "rpb"
    )
    rows["delta_rpb_sd"] = math.nan
    rows["delta_rpb_n"] = rows["id_ood_mean_n"]
    labels = display_labels(inputs.config, **{c: _hardness_label(inputs.config, c) for c in conditions})
    notes = (
        _seed_note(evaluations),
        "Δ vs. RPB is the row's (ID+OOD)/2 minus the RPB row's in the same corpus (the reference).",
    )
    columns = ("id", "ood", "id_ood_mean", "delta_rpb")
    return _table(inputs, CORPUS_KEYS, columns, rows, labels=labels, block="corpus", notes=notes)


def _by_run(frame: pd.DataFrame) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """Groups of ``frame`` per run, the run's keys with None where it has no corpus or seed."""
    for values, group in frame.groupby(list(RUN_KEYS), sort=False, dropna=False):
        yield {key: None if pd.isna(v) else v for key, v in zip(RUN_KEYS, values, strict=True)}, group


def wide(performance: pd.DataFrame, benchmarks: Sequence[str], value: str) -> pd.DataFrame:
    """One row per run with one column per benchmark; a benchmark a run lacks raises naming both."""
    records = []
    for run, group in _by_run(performance):
        scores = dict(zip(group["benchmark"], group[value], strict=True))
        missing = [name for name in benchmarks if name not in scores]
        if missing:
            raise ValueError(f"run {run}: no scores for benchmarks {missing}")
        records.append({**run, **{name: scores[name] for name in benchmarks}})
    return pd.DataFrame(records, columns=[*RUN_KEYS, *benchmarks]).astype({"seed": "Int64"})


def _runs(
    inputs: ReportInputs, evaluations: Iterable[Evaluation], benchmarks: Sequence[str], suite: str
) -> pd.DataFrame:
    """Per run: the benchmark scores, their repeat sds (``{b}_sd``) and the suite aggregate."""
    performance = performance_frame(inputs.results, evaluations)
    aggregate = SUITE_COLUMNS[suite]
    sds = wide(performance, benchmarks, "repeat_sd")
    return (
        wide(performance, benchmarks, "score")
        .merge(sds, on=list(RUN_KEYS), suffixes=("", "_sd"))
        .merge(aggregate_frame(performance, inputs.config, suite)[[*RUN_KEYS, aggregate]], on=list(RUN_KEYS))
    )


def _repeat_rows(
    inputs: ReportInputs, evaluations: Iterable[Evaluation], benchmarks: Sequence[str], suite: str
) -> pd.DataFrame:
    """Single-run rows: avg@5 ± repeat sd per benchmark, suite aggregate ± sd over repeat aggregates."""
    evaluations = list(evaluations)
    aggregate = SUITE_COLUMNS[suite]
    repeats = aggregate_frame(repeat_frame(inputs.results, evaluations), inputs.config, suite)
    spread = pd.DataFrame(
        [{**run, f"{aggregate}_sd": group[aggregate].std()} for run, group in _by_run(repeats)],
        columns=[*RUN_KEYS, f"{aggregate}_sd"],
    ).astype({"seed": "Int64"})
    rows = _runs(inputs, evaluations, benchmarks, suite).merge(spread, on=list(RUN_KEYS))
    seeded = (rows["condition"] != BASE).astype(int)
    for column in [*benchmarks, aggregate]:
        rows[f"{column}_n"] = seeded
    return rows.drop(columns=["model", "seed"])


def _per_benchmark(
    inputs: ReportInputs, benchmarks: Sequence[str], suite: str, over_repeats: bool
) -> pd.DataFrame:
    """Per-benchmark rows plus the suite aggregate (Tables 16-19).

    Rows spread over seeds (mean ± sample sd of the seed scores) unless
    ``over_repeats`` or the row is the base model: then the single run's
    avg@5 with the sd over its evaluation repeats, and the aggregate's sd over
    the per-repeat aggregates (F.5: "its spread is over the five evaluation
    repeats").
    """
    conditions, evaluations = _layout(inputs)
    single = {e for e in evaluations if over_repeats or e.condition == BASE}
    columns = [*benchmarks, SUITE_COLUMNS[suite]]
    parts = []
    if evaluations - single:
        parts.append(_summarize(_runs(inputs, evaluations - single, benchmarks, suite), CORPUS_KEYS, columns))
    if single:
        parts.append(_repeat_rows(inputs, single, benchmarks, suite))
    rows = pd.concat(parts, ignore_index=True)
    return _ordered(rows, inputs.config, CORPUS_KEYS, {"condition": conditions})


def _repeat_note(inputs: ReportInputs, evaluations: Iterable[Evaluation]) -> str:
    """Single-seed protocol of Tables 17/19: which seed each row is, and what the ± covers."""
    counts = pd.Series([e.seed for e in evaluations if e.seed is not None]).value_counts()
    common = int(counts[counts == counts.max()].index.min())
    exceptions = sorted(
        f"{e.corpus} {e.condition}: s{e.seed}" for e in evaluations if e.seed is not None and e.seed != common
    )
    repeats = inputs.config["evaluation"]["repeats"]
    text = f"Single training seed (s{common}" + ("; " + ", ".join(exceptions) if exceptions else "") + ")"
    return f"{text}; ± is the sample sd over the {repeats} evaluation repeats (avg@{repeats})."


def table16(inputs: ReportInputs) -> Table:
    """Table 16: Moonlight per-benchmark (twelve) with the twelve-benchmark Avg; Base row over repeats."""
    twelve = benchmark_columns(inputs.config["benchmarks"], "all12")
    rows = _per_benchmark(inputs, twelve, "all12", over_repeats=False)
    evaluations = inputs.closure.evaluations
    notes = (
        _seed_note(evaluations),
        "The Base row has no training seed: its ± is over the evaluation repeats.",
        "Avg is the mean over all twelve benchmarks.",
    )
    columns = (*twelve, "avg12")
    return _table(
        inputs,
        CORPUS_KEYS,
        columns,
        rows,
        labels=display_labels(inputs.config, sft="SFT"),
        bold=dict.fromkeys(columns, "max"),
        block="corpus",
        notes=notes,
    )


def _single_seed_table(inputs: ReportInputs, bold: bool) -> Table:
    """Nine-benchmark single-seed tables (17, 19): every ± is over the evaluation repeats."""
    nine = benchmark_columns(inputs.config["benchmarks"], "overall9")
    rows = _per_benchmark(inputs, nine, "overall9", over_repeats=True)
    evaluations = inputs.closure.evaluations
    columns = (*nine, "overall9")
    notes = (_repeat_note(inputs, evaluations), "Avg is Overall@9, the mean of the nine benchmark columns.")
    return _table(
        inputs,
        CORPUS_KEYS,
        columns,
        rows,
        labels=display_labels(inputs.config, sft="SFT", overall9="Avg"),
        bold=dict.fromkeys(nine, "max") if bold else {},  # per benchmark column, not the Avg
        block="corpus",
        notes=notes,
    )


def table17(inputs: ReportInputs) -> Table:
    """Table 17: DeepSeek-V2-Lite per-benchmark (nine), single seed, Base / SFT / LBL / RPB."""
    return _single_seed_table(inputs, bold=True)


def table18(inputs: ReportInputs) -> Table:
    """Table 18: Moonlight per-benchmark shuffled-prior controls, mean ± sd across three seeds."""
    nine = benchmark_columns(inputs.config["benchmarks"], "overall9")
    rows = _per_benchmark(inputs, nine, "overall9", over_repeats=False)
    evaluations = inputs.closure.evaluations
    notes = (
        _seed_note(evaluations),
        "Avg is Overall@9, the mean of the nine benchmark columns.",
    )
    labels = display_labels(inputs.config, overall9="Avg")
    return _table(inputs, CORPUS_KEYS, (*nine, "overall9"), rows, labels=labels, block="corpus", notes=notes)


def table19(inputs: ReportInputs) -> Table:
    """Table 19: DeepSeek-V2-Lite per-benchmark shuffled-prior controls, single seed."""
    return _single_seed_table(inputs, bold=False)


TABLES: dict[str, Callable[[ReportInputs], Table]] = {
    "table2": table2,
    "table3": table3,
    "table4": table4,
    "table7": table7,
    "table8": table8,
    "table12": table12,
    "table14": table14,
    "table16": table16,
    "table17": table17,
    "table18": table18,
    "table19": table19,
}
