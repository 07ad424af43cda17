"""``python -m workflow_scripts report <command>``: one paper table or figure from the results tree.

    python -m workflow_scripts report table --id table5 --config '{...}' --results results \\
        --reference reference/table5.csv --csv results/tables/table5.csv \\
        --md results/tables/table5.md --tex results/tables/table5.tex
    python -m workflow_scripts report figure --id figure3 --config '{...}' --results results \\
        --data results/figures/figure3.csv --png results/figures/figure3.png --pdf results/figures/figure3.pdf
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workflow_scripts.atomic import atomic_path, write_text
from workflow_scripts.cli import UserInputError, add_command, add_stage, json_argument


def _tables() -> dict:
    from workflow_scripts.report import performance_tables, routing_tables

    return {**performance_tables.TABLES, **routing_tables.TABLES}


def run_table(args: argparse.Namespace) -> None:
    """Compute one table from the results tree, set the paper's values beside it, write csv/md/tex."""
    from workflow_scripts.report.reference import load_reference
    from workflow_scripts.report.render import render
    from workflow_scripts.report.table import ReportInputs

    tables = _tables()
    if args.id not in tables:
        raise UserInputError(f"--id {args.id!r}: no such table (known: {', '.join(sorted(tables))})")
    try:
        table = tables[args.id](ReportInputs(args.config, args.id, Path(args.results)))
    except (KeyError, ValueError, OSError) as error:
        raise UserInputError(f"{args.id}: {error}") from error
    reference = load_reference(args.reference) if args.reference else None
    texts = render(table, reference, args.config["scale"])
    for kind in ("csv", "md", "tex"):
        write_text(getattr(args, kind), texts[kind])


def run_figure(args: argparse.Namespace) -> None:
    """Compute one figure's data from the results tree, write it as CSV, plot it as PNG and PDF."""
    from workflow_scripts.report.figures import FIGURES
    from workflow_scripts.report.table import ReportInputs

    if args.id not in FIGURES:
        raise UserInputError(f"--id {args.id!r}: no such figure (known: {', '.join(sorted(FIGURES))})")
    compute, plot = FIGURES[args.id]
    try:
        data = compute(ReportInputs(args.config, args.id, Path(args.results)))
    except (KeyError, ValueError, OSError) as error:
        raise UserInputError(f"{args.id}: {error}") from error
    write_text(args.data, data.to_csv(index=False, float_format="%.6g"))
    figure = plot(data)
    for path, kind in ((args.png, "png"), (args.pdf, "pdf")):
        with atomic_path(path) as tmp:
            figure.savefig(tmp, format=kind, dpi=150, bbox_inches="tight", metadata=_fixed_metadata(kind))


def _fixed_metadata(kind: str) -> dict:
    """No creation date or software stamp in the file, so reruns are byte-identical where possible."""
    return {"CreationDate": None} if kind == "pdf" else {"Software": None}


def register(stages: argparse._SubParsersAction) -> None:
    """Add the ``report`` stage and its commands."""
    commands = add_stage(stages, "report", "paper tables and figures from the results tree")

    table = add_command(
        commands,
        "table",
        run_table,
        "compute one paper table and render it as csv, md and tex beside the paper's values",
        inputs=("reference",),
        outputs=("csv", "md", "tex"),
    )
    table.add_argument("--id", required=True, help="table id of the registry, e.g. table5")
    table.add_argument(
        "--config", required=True, type=json_argument, help="the registry slice the table reads (JSON)"
    )
    table.add_argument("--results", required=True, help="results root (fixed layout)")
    table.add_argument("--reference", help="the paper's published values (reference/<id>.csv), if any")
    table.add_argument("--csv", required=True, help="output: machine-readable table")
    table.add_argument("--md", required=True, help="output: readable table")
    table.add_argument("--tex", required=True, help="output: LaTeX table in the paper's layout")

    figure = add_command(
        commands,
        "figure",
        run_figure,
        "compute one figure's data and plot it",
        outputs=("data", "png", "pdf"),
    )
    figure.add_argument("--id", required=True, help="figure id of the registry, e.g. figure3")
    figure.add_argument(
        "--config", required=True, type=json_argument, help="the registry slice the figure reads (JSON)"
    )
    figure.add_argument("--results", required=True, help="results root (fixed layout)")
    figure.add_argument("--data", required=True, help="output: the plotted data (CSV)")
    figure.add_argument("--png", required=True, help="output: PNG")
    figure.add_argument("--pdf", required=True, help="output: PDF")
