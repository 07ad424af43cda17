"""How a stage registers its commands with ``python -m workflow_scripts``.

A command is a function of the parsed arguments; it names which arguments are input and
output paths so that ``--provenance`` can checksum them. These helpers sit below the stages
because every stage's ``cli.py`` uses them while the entry point (:mod:`workflow_scripts.cli`)
imports the stages and provenance.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from workflow_scripts import registry


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
    folders: Sequence[str] = (),
    either: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """Register a command; ``inputs``/``outputs`` name the path arguments provenance checksums.

    An input is a file unless named in ``folders`` (a folder) or ``either`` (a list that may hold
    both): the entry point refuses one of the other kind before the command runs.
    """
    parser = commands.add_parser(name, help=help, description=help)
    parser.add_argument(
        "--provenance", metavar="JSON", help="write a provenance record of this run to this path"
    )
    parser.set_defaults(
        run=run, inputs=tuple(inputs), outputs=tuple(outputs), input_kinds=input_kinds(folders, either)
    )
    return parser


def input_kinds(folders: Sequence[str] = (), either: Sequence[str] = ()) -> dict[str, str]:
    """Input argument name → ``"folder"`` or ``"either"``; every other input is a file."""
    return dict.fromkeys(folders, "folder") | dict.fromkeys(either, "either")


def json_argument(text: str) -> Any:
    """argparse type for a JSON value passed inline (a config slice from ``params:``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not valid JSON: {error}") from error


def recorded_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments a provenance record keeps: every parsed option but the command's own plumbing.

    The audit parses the command a rule would run today the same way, so the two compare key by key.
    """
    skip = {
        "run",
        "inputs",
        "outputs",
        "input_kinds",
        "option_labels",
        "provenance",
        "claimed_digests",
        "input_digests",
        "accepts_recorded_only",
    }
    return {key: value for key, value in vars(args).items() if key not in skip}


def add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--overlay``: the registry as Snakemake loads it, for commands run by hand."""
    parser.add_argument(
        "--config", default=registry.CONFIG_FILE, help=f"registry file (default: {registry.CONFIG_FILE})"
    )
    parser.add_argument(
        "--overlay",
        action="append",
        default=[],
        help=f"YAML merged over the config, e.g. {registry.TOY_OVERLAY}; repeatable, later ones win",
    )


def registry_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config named by :func:`add_registry_arguments`, validated (a refusal names the key)."""
    return registry.load_config([args.config, *args.overlay])
