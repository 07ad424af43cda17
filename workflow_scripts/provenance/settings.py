"""What the current configuration gives each recorded job, for the audit to compare with its record.

A record keeps the parsed arguments of the command that wrote it (config slices included).
Snakemake's own dry run of the audited output prints the command every job of its closure
would run today; parsed by the same parser, the two compare key by key,
so a file produced under other settings (a stale or foreign artefact with a valid record
of its own) is named with the keys that differ. Jobs are matched by their record's path,
which each command names in ``--provenance``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.commands import recorded_arguments
from workflow_scripts.errors import UserInputError
from workflow_scripts.layout import RESULTS

SHELL_LINE = "Shell command: "
ENTRY = ("-m", "workflow_scripts")


def _invocations(tokens: Sequence[str], stages: set[str]) -> Iterator[list[str]]:
    """Argument lists of each ``-m workflow_scripts`` call in a shell command's tokens.

    A call ends at the first shell operator; a launcher's ``-- <stage> ...`` tail (the
    command ``megatron-launch`` starts on every node) is a call of its own.
    """
    for start in range(len(tokens) - 1):
        if tuple(tokens[start : start + 2]) != ENTRY:
            continue
        call: list[str] = []
        for token in tokens[start + 2 :]:
            if token and all(character in "();<>|&" for character in token):
                break
            call.append(token)
        for split in range(len(call) - 1):
            if call[split] == "--" and call[split + 1] in stages:
                yield call[:split]
                yield call[split + 1 :]
                break
        else:
            yield call


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def settings_by_record(
    shell_commands: Sequence[str], stages: Mapping[str, argparse.ArgumentParser]
) -> dict[str, dict[str, Any]]:
    """Each command's recorded-argument form (``commands.recorded_arguments``), by its ``--provenance`` path.

    ``stages`` are the entry point's stage parsers by name, the ones that parsed each recorded run.
    """
    settings = {}
    for command in shell_commands:
        for call in _invocations(_tokens(command), set(stages)):
            try:
                if not call or call[0] not in stages:
                    raise SystemExit(2)
                args = stages[call[0]].parse_args(call[1:], argparse.Namespace(stage=call[0]))
            except SystemExit as error:
                raise UserInputError(
                    f"cannot parse the command a rule runs today: {shlex.join(call)}"
                ) from error
            if getattr(args, "provenance", None):
                arguments = recorded_arguments(args)
                settings[os.path.normpath(args.provenance)] = json.loads(json.dumps(arguments, default=str))
    return settings


def current_commands(targets: Sequence[str], config_files: Sequence[str], root: Path) -> list[str]:
    """Every job's shell command in the closure of ``targets`` as the given config files make it today.

    Snakemake plans in a shadow of the checkout without its results (every other entry linked),
    where the whole closure is to run: forcing it over the real results instead (``--forceall``)
    stops at the first write-protected output (``protect_outputs``, a read-only results folder),
    and the dry run would touch nothing there in any case. The DAG has no checkpoints, so the
    closure does not depend on what results exist.
    """
    printed = dry_run(targets, config_files, root, ["--printshellcmds"], shadow=True)
    return [line[len(SHELL_LINE) :] for line in printed.splitlines() if line.startswith(SHELL_LINE)]


def dry_run(
    targets: Sequence[str],
    config_files: Sequence[str],
    root: Path,
    options: Sequence[str] = (),
    shadow: bool = True,
) -> str:
    """What ``snakemake --dry-run`` of ``targets`` under ``config_files`` prints (stdout), with ``options``.

    ``shadow``: plan the whole closure, in a shadow of ``root`` without its results (see
    :func:`current_commands`); otherwise plan in ``root`` itself, as a run there would (the jobs
    its results and Snakemake's records still call for), without taking the lock a running
    Snakemake holds.
    """
    config = ["--configfiles", *config_files] if config_files else []
    command = [
        sys.executable, "-m", "snakemake", *(_relative(target, root) for target in targets),
        "--dry-run", "--nolock", *options, *config,
    ]  # fmt: skip
    if shadow:
        with tempfile.TemporaryDirectory(prefix="rpb-audit-plan-") as folder:
            for entry in Path(root).iterdir():
                if entry.name not in (RESULTS, ".snakemake"):
                    (Path(folder) / entry.name).symlink_to(entry.absolute())
            done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=1800)
            printed = done.stdout.replace(folder, str(Path(root).absolute()))
    else:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=1800)
        printed = done.stdout
    if done.returncode != 0:
        planned = f"{' '.join(targets)} under {' '.join(config_files) or 'the Snakefile config'}"
        # Snakemake prints some failures (a protected output) on stdout, others on stderr.
        said = "\n".join(text.strip() for text in (done.stdout, done.stderr) if text.strip())[-3000:]
        raise UserInputError(f"snakemake could not plan {planned}:\n{said}")
    return printed


def _relative(target: str, root: Path) -> str:
    """A target inside the checkout, relative to it (the shadow has the same layout)."""
    path = Path(target).absolute()
    return (
        str(path.relative_to(Path(root).absolute())) if path.is_relative_to(Path(root).absolute()) else target
    )
