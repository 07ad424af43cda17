"""``python -m workflow_scripts plan <target>``: price a table, a figure or ``all`` before submitting it.

A top-level command rather than a stage: it loads the registry as the workflow does
(``registry.load_config``: config file, optional overlay, validation, seed cap) and runs no rule.
"""

from __future__ import annotations

import argparse
from typing import Any

from workflow_scripts.errors import UserInputError
from workflow_scripts.registry import CONFIG_FILE, TOY_OVERLAY

# Training rows of corpora whose split keeps every eligible row (train_rows: null), as the
# paper states them: OpenR1-Math-220k, "roughly 94k examples".
PAPER_ROWS = {"openr1math": 94000}


def _row_count(text: str) -> tuple[str, int]:
    """argparse type of ``--rows corpus=N``."""
    corpus, equals, count = text.partition("=")
    if not equals or not corpus or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected CORPUS=N (N a row count), got {text!r}")
    return corpus, int(count)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _step_seconds(text: str) -> tuple[str, float]:
    """argparse type of ``--step-seconds model=S``."""
    model, equals, seconds = text.partition("=")
    if not equals or not model:
        raise argparse.ArgumentTypeError(f"expected MODEL=S (S seconds per optimizer step), got {text!r}")
    return model, _positive(seconds)


def register(stages: argparse._SubParsersAction) -> None:
    summary = "print the GPU-hours and node-hours a table, a figure or 'all' needs, before submitting it"
    parser = stages.add_parser("plan", help=summary, description=summary)
    parser.add_argument("target", help="a table or figure id, or 'all' for every one")
    parser.add_argument("--config", default=CONFIG_FILE, help=f"registry file (default: {CONFIG_FILE})")
    parser.add_argument(
        "--overlay",
        action="append",
        default=[],
        help=f"YAML merged over the config, e.g. {TOY_OVERLAY}; repeatable, later ones win",
    )
    parser.add_argument(
        "--rows",
        type=_row_count,
        action="append",
        default=[],
        metavar="CORPUS=N",
        help="training-split rows of a corpus (repeatable); needed where train_rows is null",
    )
    parser.add_argument(
        "--step-seconds",
        type=_step_seconds,
        action="append",
        default=[],
        metavar="MODEL=S",
        help="measured seconds per optimizer step of MODEL's training at the configured parallelism "
        "(Bridge's 'elapsed time per iteration' / 1000); prices its trainings instead of the MFU; repeatable",
    )
    parser.add_argument(
        "--decode-rate",
        type=_positive,
        metavar="TOKENS",
        help="measured decoded tokens per second per GPU of a generation job; replaces the assumed rate",
    )
    parser.set_defaults(run=run, command="plan", provenance=None, inputs=(), outputs=(), input_kinds={})


def load_config(path: str, overlays: list[str]) -> dict[str, Any]:
    """The config as Snakemake sees it (``registry.load_config``); a refusal is a user error."""
    from workflow_scripts import registry

    try:
        return registry.load_config([path, *overlays])
    except registry.RegistryError as error:
        raise UserInputError(str(error)) from None


def run(args: argparse.Namespace) -> None:
    from workflow_scripts.compute_plan import Calibration, plan, render

    config = load_config(args.config, args.overlay)
    given = dict(args.rows)
    defaults = {
        corpus: count
        for corpus, count in PAPER_ROWS.items()
        if corpus in config["corpora"] and config["corpora"][corpus]["train_rows"] is None
    }
    calibration = Calibration(dict(args.step_seconds), args.decode_rate)
    result = plan(config, args.target, {**defaults, **given}, calibration)
    for corpus, count in defaults.items():
        if corpus in result.rows and corpus not in given:
            print(
                f"note: {corpus}: {count} training rows, the paper's approximate count; "
                f"pass --rows {corpus}=N with the built split's count"
            )
    print(render(result))
