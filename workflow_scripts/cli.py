"""Command-line entry point: ``python -m workflow_scripts <stage> <command> [options]``.

Every rule of the workflow calls exactly one command, and the same command
runs under Snakemake, under ``srun`` and in tests. A command is a function of
the parsed arguments; it names which arguments are input and output paths so
that ``--provenance`` can checksum them. Stage modules are imported lazily so
that a cheap command never pays for torch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from workflow_scripts.atomic import write_json

STAGE_MODULES = (
    "workflow_scripts.data.cli",
    "workflow_scripts.models.cli",
    "workflow_scripts.priors.cli",
    "workflow_scripts.train.cli",
    "workflow_scripts.probe.cli",
    "workflow_scripts.evaluate.cli",
    "workflow_scripts.report.cli",
    "workflow_scripts.provenance.cli",
    "workflow_scripts.plan_cli",
    "workflow_scripts.envs_cli",
)


class UserInputError(Exception):
    """Bad input (file, column, key, value): reported as one clear line, without a traceback."""


def add_stage(stages: argparse._SubParsersAction, name: str, help: str) -> argparse._SubParsersAction:
    """Register a stage (``python -m workflow_scripts <name> ...``); returns where its commands go."""
    stage = stages.add_parser(name, help=help)
    return stage.add_subparsers(dest="command", required=True, metavar="COMMAND")


def add_command(
    commands: argparse._SubParsersAction,
    name: str,
    run: Callable[[argparse.Namespace], None],
    help: str,
    inputs: Sequence[str] = (),
    outputs: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """Register a command; ``inputs``/``outputs`` name the path arguments provenance checksums."""
    parser = commands.add_parser(name, help=help, description=help)
    parser.add_argument(
        "--provenance", metavar="JSON", help="write a provenance record of this run to this path"
    )
    parser.set_defaults(run=run, inputs=tuple(inputs), outputs=tuple(outputs))
    return parser


def json_argument(text: str) -> Any:
    """argparse type for a JSON value passed inline (a config slice from ``params:``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON: {error}") from error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts", description=__doc__)
    stages = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for module_name in STAGE_MODULES:
        importlib.import_module(module_name).register(stages)
    return parser


def _path_arguments(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """Path arguments by name; a repeated argument (``--items a b``) becomes ``items[0]``, ``items[1]``."""
    paths = {}
    for name in names:
        value = getattr(args, name)
        if isinstance(value, list):
            paths.update({f"{name}[{index}]": path for index, path in enumerate(value)})
        elif value is not None:
            paths[name] = value
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started_utc = datetime.now(UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    try:
        args.run(args)
    except UserInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.provenance and os.environ.get("RANK", "0") == "0":  # one record per torchrun job
        from workflow_scripts.provenance import build_record

        skip = {"run", "inputs", "outputs", "provenance"}
        arguments = {key: value for key, value in vars(args).items() if key not in skip}
        record = build_record(
            command=f"{args.stage} {args.command}",
            arguments=arguments,
            inputs=_path_arguments(args, args.inputs),
            outputs=_path_arguments(args, args.outputs),
            started_utc=started_utc,
            wall_seconds=time.perf_counter() - start,
        )
        write_json(args.provenance, record)
    return 0
