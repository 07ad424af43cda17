"""Command-line entry point: ``python -m workflow_scripts <stage> <command> [options]``.

Every rule of the workflow calls exactly one command, and the same command
runs under Snakemake, under ``srun`` and in tests (stages register them through
:mod:`workflow_scripts.commands`). Before a command runs its inputs are checked
against their records; after it, its own record is written. Stage modules are
imported lazily so that a cheap command never pays for torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from workflow_scripts.atomic import write_json
from workflow_scripts.commands import recorded_arguments
from workflow_scripts.errors import expected_error

STAGE_MODULES = (
    "workflow_scripts.data.cli",
    "workflow_scripts.models.cli",
    "workflow_scripts.priors.cli",
    "workflow_scripts.train.cli",
    "workflow_scripts.probe.cli",
    "workflow_scripts.evaluate.cli",
    "workflow_scripts.report.cli",
    "workflow_scripts.provenance.cli",
    "workflow_scripts.bundle.cli",
    "workflow_scripts.plan_cli",
    "workflow_scripts.lock_cli",
    "workflow_scripts.status_cli",
    "workflow_scripts.envs_cli",
    "workflow_scripts.preflight.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts", description=__doc__)
    stages = parser.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for module_name in STAGE_MODULES:
        importlib.import_module(module_name).register(stages)
    return parser


def _option_labels(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The command's options by destination (``inputs_list`` → ``--inputs``), to name them in errors."""
    labels: dict[str, str] = {}
    for name in (args.stage, args.command):
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subparsers and name in subparsers[0].choices:  # ``plan`` is a stage without commands
            parser = subparsers[0].choices[name]
    for action in parser._actions:
        if action.option_strings:
            labels[action.dest] = max(action.option_strings, key=len)
    return labels


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


def _verified_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """Digests of the inputs, each checked against the records that wrote it (hashed once, reused).

    A command started on many ranks (``train megatron``) takes the digests its one-process claim
    took instead: hashing there would hold rank 0 back while the others wait in the process group.
    """
    from workflow_scripts.layout import RESULTS, ledger_path
    from workflow_scripts.records.imported import read_ledger
    from workflow_scripts.records.verify import verify_inputs

    if getattr(args, "claimed_digests", None):
        return args.claimed_digests(args)
    ledger = read_ledger(ledger_path(RESULTS)) if getattr(args, "accepts_recorded_only", False) else None
    return verify_inputs(
        _path_arguments(args, args.inputs),
        digest_all=bool(args.provenance),
        kinds=args.input_kinds,
        labels=args.option_labels,
        recorded_only=ledger.recorded_only if ledger else {},
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.option_labels = _option_labels(parser, args)
    started_utc = datetime.now(UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    leader = os.environ.get("RANK", "0") == "0"  # one check and one record per torchrun job
    try:
        input_digests = _verified_inputs(args) if leader else {}
        args.run(args)
        sys.stdout.flush()  # a reader gone away (``| head``) shows here, not at the interpreter's exit
    except BrokenPipeError:  # the reader of stdout went away (``| head``): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception as error:  # the one place a command's expected failures become one line
        paths = _path_arguments(args, (*args.inputs, *args.outputs))
        report = expected_error(error, paths, args.option_labels)
        if report is None:
            raise
        print(f"error: {report.message}", file=sys.stderr)
        return report.status
    except KeyboardInterrupt:
        print("interrupted (outputs are written atomically: none is left half-written)", file=sys.stderr)
        return 130
    if args.provenance and leader:
        from workflow_scripts.records import build_record

        record = build_record(
            command=f"{args.stage} {args.command}",
            arguments=recorded_arguments(args),
            input_digests=input_digests,
            outputs=_path_arguments(args, args.outputs),
            started_utc=started_utc,
            wall_seconds=time.perf_counter() - start,
        )
        write_json(args.provenance, record)
    return 0
