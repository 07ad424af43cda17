"""What the current configuration gives each recorded job, for the audit to compare with its record.

A record keeps the parsed arguments of the command that wrote it (config slices included).
Snakemake's own dry run of the audited output, forced over its whole closure, prints the
command every job would run today; parsed by the same parser, the two compare key by key,
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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.commands import recorded_arguments
from workflow_scripts.errors import UserInputError

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
    """Every job's shell command in the closure of ``targets`` as the given config files make it today."""
    command = [
        sys.executable, "-m", "snakemake", *targets, "--forceall", "--dry-run", "--printshellcmds",
        "--nolock", "--configfiles", *config_files,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        planned = f"{' '.join(targets)} under {' '.join(config_files)}"
        raise UserInputError(f"snakemake could not plan {planned}:\n{done.stderr[-3000:]}")
    return [line[len(SHELL_LINE) :] for line in done.stdout.splitlines() if line.startswith(SHELL_LINE)]
