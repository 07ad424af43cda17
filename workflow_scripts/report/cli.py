"""``python -m workflow_scripts report <command>``: one paper table or figure from its declared result files.

    python -m workflow_scripts report table --id table5 --config '{...}' --results results \\
        --inputs results/evals/.../summary.json ... --reference reference/table5.csv \\
        --csv results/tables/table5.csv --md results/tables/table5.md --tex results/tables/table5.tex
    python -m workflow_scripts report figure-data --id figure3 --config '{...}' --results results \\
        --inputs results/graphs/.../metrics.json ... --data results/figures/figure3.csv
    python -m workflow_scripts report figure-plot --id figure3 --data results/figures/figure3.csv \\
        --png results/figures/figure3.png --pdf results/figures/figure3.pdf

``--inputs`` lists every file the command reads (``report.inputs.declared_files``); any other
path under ``--results`` is refused. Figures are computed and drawn by separate commands, so a
restyled plot redraws from the CSV without recomputing.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from workflow_scripts.atomic import atomic_path, write_text
from workflow_scripts.commands import add_command, add_stage, json_argument
from workflow_scripts.errors import UserInputError
from workflow_scripts.report import docs_numbers

if TYPE_CHECKING:
    from workflow_scripts.report.table import ReportInputs


def _tables() -> dict:
    from workflow_scripts.report import (
        claims,
        diagnostic_tables,
        own_checkpoints,
        performance_tables,
        routing_tables,
    )

    return {
        **performance_tables.TABLES,
        **routing_tables.TABLES,
        **diagnostic_tables.TABLES,
        **claims.TABLES,
        **own_checkpoints.TABLES,
    }


def run_table(args: argparse.Namespace) -> None:
    """Compute one table from its declared result files; render it beside the paper's values."""
    from workflow_scripts.report.reference import load_reference, load_reference_notes
    from workflow_scripts.report.render import render

    tables = _tables()
    if args.id not in tables:
        raise UserInputError(f"--id {args.id!r}: no such table (known: {', '.join(sorted(tables))})")
    reference = load_reference(args.reference) if args.reference else None
    if args.paper_rows:  # the own-checkpoint table: the paper's rows of its models, set beside its own
        from workflow_scripts.report.own_checkpoints import paper_rows

        reference = paper_rows(args.config, args.paper_rows)
    try:
        table = tables[args.id](dataclasses.replace(_report_inputs(args), reference=reference))
    except (KeyError, ValueError, OSError) as error:
        raise UserInputError(f"{args.id}: {error}") from error
    if args.reference_notes:
        table = dataclasses.replace(table, notes=table.notes + load_reference_notes(args.reference_notes))
    texts = render(table, reference, args.config["scale"])
    for kind in ("csv", "md", "tex"):
        write_text(getattr(args, kind), texts[kind])


def _report_inputs(args: argparse.Namespace) -> ReportInputs:
    """The registry slice and exactly the ``--inputs`` files, resolved under ``--results``.

    A listed file the output does not read is refused by name (a mistyped path would otherwise
    surface as the file the output then misses).
    """
    from workflow_scripts.report.inputs import ResultFiles, declared_files
    from workflow_scripts.report.table import ReportInputs

    given = frozenset(map(Path, args.input_files))
    if foreign := sorted(given - set(declared_files(args.config, args.id, args.results))):
        raise UserInputError(
            f"--inputs {foreign[0]}: not a file {args.id} reads under --results {args.results}"
            + (f" (nor {len(foreign) - 1} more)" if len(foreign) > 1 else "")
        )
    files = ResultFiles(Path(args.results), given)
    return ReportInputs(args.config, args.id, files)


def _figure(figure_id: str) -> tuple[Callable, Callable]:
    """The (data, plot) pair of a figure id."""
    from workflow_scripts.report.figures import FIGURES

    if figure_id not in FIGURES:
        raise UserInputError(f"--id {figure_id!r}: no such figure (known: {', '.join(sorted(FIGURES))})")
    return FIGURES[figure_id]


def run_figure_data(args: argparse.Namespace) -> None:
    """Compute one figure's numbers from its declared result files and write them as CSV."""
    compute, _ = _figure(args.id)
    try:
        data = compute(_report_inputs(args))
    except (KeyError, ValueError, OSError) as error:
        raise UserInputError(f"{args.id}: {error}") from error
    write_text(args.data, data.to_csv(index=False, float_format="%.6g"))


def run_figure_plot(args: argparse.Namespace) -> None:
    """Draw one figure from its data CSV alone, as PNG and PDF."""
    import pandas as pd

    _, plot = _figure(args.id)
    try:
        figure = plot(pd.read_csv(args.data))
    except (KeyError, ValueError, OSError) as error:
        raise UserInputError(f"{args.id}: {error}") from error
    for path, kind in ((args.png, "png"), (args.pdf, "pdf")):
        with atomic_path(path) as tmp:
            figure.savefig(tmp, format=kind, dpi=150, bbox_inches="tight", metadata=_fixed_metadata(kind))


def run_gates(args: argparse.Namespace) -> None:
    """The sanity gates (routing carries the task, in-domain headroom, OOD change) from their files."""
    import json

    import pandas as pd

    from workflow_scripts.report import gates

    if len(args.base_likelihood) != len(args.base_models):
        raise UserInputError("--base-likelihood and --base-models must be equally long")
    if len(args.sft_likelihood) != len(args.sft_runs) or len(args.sft_scores) not in (0, len(args.sft_runs)):
        raise UserInputError("--sft-likelihood, --sft-runs (and --sft-scores, if given) must be equally long")
    if len(args.base_scores) not in (0, len(args.base_models)):
        raise UserInputError("--base-scores, if given, must be as long as --base-models")
    base = {m: pd.read_parquet(path) for m, path in zip(args.base_models, args.base_likelihood, strict=True)}
    base_scores = dict(zip(args.base_models, map(pd.read_parquet, args.base_scores), strict=False))
    rows = []
    try:
        for model in args.base_models:
            rows += gates.routing_gates(model, base[model], args.spread_factor)
        for index, (run, path) in enumerate(zip(args.sft_runs, args.sft_likelihood, strict=True)):
            model, corpus = run["model"], run["corpus"]
            if model not in base:
                raise ValueError(f"SFT run {run} has no base likelihood (--base-models)")
            sft_scores = pd.read_parquet(args.sft_scores[index]) if args.sft_scores else None
            rows += gates.sft_gates(
                model, corpus, args.domains[corpus], args.families, base[model], pd.read_parquet(path),
                base_scores.get(model), sft_scores, args.spread_factor,
            )  # fmt: skip
    except (KeyError, ValueError) as error:
        raise UserInputError(f"gates: {error}") from error
    frame = gates.gates_frame(rows)
    write_text(args.csv, frame.to_csv(index=False))
    write_text(args.md, gates.render_markdown(frame, args.spread_factor, args.scale))
    print(json.dumps(frame.to_dict("records"), indent=1))


def _fixed_metadata(kind: str) -> dict:
    """No creation date or software stamp in the file, so reruns are byte-identical where possible."""
    return {"CreationDate": None} if kind == "pdf" else {"Software": None}


def register(stages: argparse._SubParsersAction) -> None:
    """Add the ``report`` stage and its commands."""
    commands = add_stage(stages, "report", "paper tables and figures from their declared result files")

    table = add_command(
        commands,
        "table",
        run_table,
        "compute one paper table and render it as csv, md and tex beside the paper's values",
        inputs=("input_files", "reference", "reference_notes", "paper_rows"),
        either=("input_files",),
        outputs=("csv", "md", "tex"),
    )
    table.add_argument("--id", required=True, help="table id of the registry, e.g. table5")
    table.add_argument(
        "--config", required=True, type=json_argument, help="the registry slice the table reads (JSON)"
    )
    _add_result_files(table)
    table.add_argument("--reference", help="the paper's published values (reference/<id>.csv), if any")
    table.add_argument(
        "--reference-notes",
        help="notes on those values (reference/<id>.notes.md, one '- ' item per note), if any",
    )
    table.add_argument(
        "--paper-rows",
        nargs="+",
        help="paper tables (reference/<id>.csv) whose rows the own-checkpoint table sets beside its own",
    )
    table.add_argument("--csv", required=True, help="output: machine-readable table")
    table.add_argument("--md", required=True, help="output: readable table")
    table.add_argument("--tex", required=True, help="output: LaTeX table in the paper's layout")

    data = add_command(
        commands,
        "figure-data",
        run_figure_data,
        "compute the numbers behind one figure and write them as CSV",
        inputs=("input_files",),
        either=("input_files",),
        outputs=("data",),
    )
    data.add_argument("--id", required=True, help="figure id of the registry, e.g. figure3")
    data.add_argument(
        "--config", required=True, type=json_argument, help="the registry slice the figure reads (JSON)"
    )
    _add_result_files(data)
    data.add_argument("--data", required=True, help="output: the figure's data (CSV)")

    plot = add_command(
        commands,
        "figure-plot",
        run_figure_plot,
        "draw one figure from its data CSV",
        inputs=("data",),
        outputs=("png", "pdf"),
    )
    plot.add_argument("--id", required=True, help="figure id of the registry, e.g. figure3")
    plot.add_argument("--data", required=True, help="the figure's data CSV (written by figure-data)")
    plot.add_argument("--png", required=True, help="output: PNG")
    plot.add_argument("--pdf", required=True, help="output: PDF")

    gates = add_command(
        commands,
        "gates",
        run_gates,
        "sanity gates: does routing carry the task, does SFT learn in domain; its OOD change (value, SE)",
        inputs=("base_likelihood", "sft_likelihood", "base_scores", "sft_scores"),
        outputs=("csv", "md"),
    )
    gates.add_argument(
        "--base-likelihood", nargs="+", required=True, help="each base model's likelihood parquet"
    )
    gates.add_argument("--base-models", nargs="+", required=True, help="the model of each --base-likelihood")
    gates.add_argument(
        "--base-scores", nargs="*", default=[], help="each base model's scores parquet (optional)"
    )
    gates.add_argument("--sft-likelihood", nargs="*", default=[], help="each SFT run's likelihood parquet")
    gates.add_argument(
        "--sft-runs", type=json_argument, default=[], help="JSON list: the model and corpus of each SFT file"
    )
    gates.add_argument("--sft-scores", nargs="*", default=[], help="each SFT run's scores parquet (optional)")
    gates.add_argument("--families", type=json_argument, required=True, help="benchmark id -> family (JSON)")
    gates.add_argument("--domains", type=json_argument, required=True, help="corpus id -> domain (JSON)")
    gates.add_argument(
        "--spread-factor", type=float, required=True, help="a gate passes above this many standard errors"
    )
    gates.add_argument("--scale", required=True, help="toy or paper (named in the table's title)")
    gates.add_argument("--csv", required=True, help="output: the gates (CSV)")
    gates.add_argument("--md", required=True, help="output: the gates with their definitions (Markdown)")

    docs_numbers.add_docs_numbers(commands)


def _add_result_files(parser: argparse.ArgumentParser) -> None:
    """``--results`` (the root the layout resolves paths under) and ``--inputs`` (the only files read)."""
    parser.add_argument(
        "--results", required=True, help="results root the fixed layout names files under (never scanned)"
    )
    parser.add_argument(
        "--inputs",
        dest="input_files",  # ``args.inputs`` names the path arguments provenance checksums
        nargs="*",
        default=[],
        help="every result file the command reads (report.inputs.declared_files; none for a table of "
        "registry values only); any other is refused",
    )
