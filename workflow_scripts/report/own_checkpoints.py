"""Own checkpoints (config ``own_checkpoints``) in the layout of Tables 16-19, beside the paper's rows.

A user's checkpoint is one row: avg@5 per benchmark and Overall@9, ID and OOD (its corpus' domain,
Appendix F.4), each ± its sd over the evaluation repeats, as the Base rows of Tables 16-19 report a
run without training seeds; then its routing retention against its model's base on that corpus'
probe pool (community NMI, TVD, JSD, top-k overlap; F.10). The paper's published rows of the same
models' per-benchmark tables are the reference it is rendered with, each under its table's id, so
a reader sees the checkpoint's numbers beside the paper's without any of them being recomputed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.registry import OWN, OWN_TABLE, own_name
from workflow_scripts.report.frames import RUN_KEYS, aggregate_frame, performance_frame, repeat_frame
from workflow_scripts.report.performance_tables import benchmark_columns, display_labels, wide
from workflow_scripts.report.reference import load_reference
from workflow_scripts.report.routing_frames import retention_frame
from workflow_scripts.report.table import ReportInputs, Table

KEYS = ("model", "source", "corpus", "condition")  # source: the paper table of a row, or OWN
AGGREGATES = ("overall9", "id", "ood")
RETENTION = ("nmi", "tvd", "jsd", "topk_overlap")
LABELS = {
    "source": "Source",
    OWN: "Own checkpoint",
    "tvd": "TVD",
    "jsd": "JSD",
    "topk_overlap": "Top-k overlap",
}


def columns(config: Mapping[str, Any]) -> tuple[str, ...]:
    """Every benchmark (Table 16's order), the Overall@9 aggregates, then the retention metrics."""
    return (*benchmark_columns(config["benchmarks"], "all12"), *AGGREGATES, *RETENTION)


def _performance_rows(inputs: ReportInputs, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per own checkpoint: each benchmark's avg@5 and the aggregates, with their sds over the repeats."""
    evaluations = inputs.closure.evaluations
    performance = performance_frame(inputs.results, evaluations)
    rows = wide(performance, benchmarks, "score").merge(
        wide(performance, benchmarks, "repeat_sd"), on=list(RUN_KEYS), suffixes=("", "_sd")
    )
    runs = aggregate_frame(performance, inputs.config, "overall9")
    repeats = aggregate_frame(repeat_frame(inputs.results, evaluations), inputs.config, "overall9")
    spread = repeats.groupby("condition")[list(AGGREGATES)].std().add_suffix("_sd").reset_index()
    return rows.merge(runs[["condition", *AGGREGATES]], on="condition").merge(spread, on="condition")


def own_checkpoints(inputs: ReportInputs) -> Table:
    """The own checkpoints' rows; no seed stands behind them, so every count is 0 and every ± is over
    the evaluation repeats (retention has none)."""
    config = inputs.config
    benchmarks = benchmark_columns(config["benchmarks"], "all12")
    retention = retention_frame(inputs.results, inputs.closure.probes)[["condition", *RETENTION]]
    rows = _performance_rows(inputs, benchmarks).merge(retention, on="condition", validate="one_to_one")
    rows["source"] = OWN
    for column in columns(config):
        rows[f"{column}_n"] = 0
    for column in RETENTION:
        rows[f"{column}_sd"] = float("nan")
    sources = {table: f"Paper, Table {table.removeprefix('table')}" for table in inputs.entry["paper_rows"]}
    names = {run: own_name(run) for run in rows["condition"]}
    labels = display_labels(config, **LABELS, **sources, **names)
    notes = (
        "Own rows: avg@5 per benchmark; ± is the sample sd over the evaluation repeats (no training seed).",
        "Overall@9, ID and OOD aggregate the nine-benchmark suite (F.4), ID/OOD by the entry's corpus.",
        "Retention is against the model's base on the corpus' probe pool (F.10 layer means).",
        "Paper rows show the values their table prints; the others are —.",
    )
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=KEYS,
        columns=columns(config),
        rows=rows.sort_values(["model", "condition"]).reset_index(drop=True),
        labels=labels,
        block="model",
        notes=notes,
        digits=dict.fromkeys(RETENTION, 3),
    )


def paper_rows(config: Mapping[str, Any], files: Sequence[str | Path]) -> pd.DataFrame:
    """The published rows of ``files`` (the paper tables of the entry's ``paper_rows``) as the table's
    reference: keyed by their model and table, kept to the own checkpoints' corpora (and the base
    rows) and to the columns the table shows (Table 16's twelve-benchmark Avg is not one)."""
    entry = config["tables"][OWN_TABLE]
    corpora: dict[str, set[str]] = {}
    for cell in entry["cells"]:
        for model in cell["models"]:
            corpora.setdefault(model, {""}).update(cell["corpora"])
    shown, parts = set(columns(config)), []
    for path in files:
        table_id = Path(path).stem
        model = entry["paper_rows"][table_id]
        frame = load_reference(Path(path))
        kept = frame[frame["column"].isin(shown) & frame["corpus"].isin(corpora[model])]
        parts.append(kept.assign(model=model, source=table_id))
    reference = pd.concat(parts, ignore_index=True)[[*KEYS, "column", "value", "sd"]]
    reference.attrs["path"] = ", ".join(map(str, files))
    return reference


TABLES = {OWN_TABLE: own_checkpoints}
