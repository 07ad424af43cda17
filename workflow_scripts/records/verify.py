"""Check a command's inputs against the provenance records that list them as outputs.

A job's record sits beside its outputs (``provenance.json``, ``s0.provenance.json``,
``shuffle-provenance.json``), so the records of an input lie in its directory or one
above it, up to the working directory. An input whose checksum differs from its record
changed after the job that wrote it finished, and is refused before it is read; an input
no record lists (a raw download, a test fixture) is accepted as it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.errors import UserInputError, option_name
from workflow_scripts.records import path_digest

RECORD_PATTERN = "*provenance*.json"


@dataclass(frozen=True)
class RecordedOutput:
    """One output digest as a record holds it, with the record it came from."""

    record: Path
    command: str
    digest: Mapping[str, Any]


def _read_record(path: Path) -> Mapping[str, Any]:
    """A record's JSON object; an empty one if it vanished (Snakemake clears a job's outputs to rerun it)."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:  # ValueError: bad JSON or bad UTF-8
        raise UnreadableRecord(f"{path}: unreadable provenance record ({error})") from error
    if not isinstance(record, dict):
        raise UnreadableRecord(f"{path}: unreadable provenance record (not a JSON object)")
    return record


class UnreadableRecord(UserInputError):
    """A provenance record that exists but cannot be parsed: its job's outputs cannot be vouched for."""


def _directory_outputs(directory: Path, unreadable: dict[Path, str]) -> dict[str, list[RecordedOutput]]:
    """Outputs the records in ``directory`` list, by absolute path (records keep paths as given).

    A record that cannot be read is kept in ``unreadable`` (path -> reason) instead of being skipped.
    """
    outputs: dict[str, list[RecordedOutput]] = {}
    for path in sorted(directory.glob(RECORD_PATTERN)):
        if not path.is_file():
            continue
        try:
            record = _read_record(path)
        except UnreadableRecord as error:
            unreadable[path] = str(error)
            continue
        listed = record.get("outputs")
        for digest in listed.values() if isinstance(listed, dict) else ():
            if isinstance(digest, dict) and "path" in digest and "sha256" in digest:
                entry = RecordedOutput(path, str(record.get("command")), digest)
                outputs.setdefault(os.path.abspath(digest["path"]), []).append(entry)
    return outputs


def _search_directories(path: str, root: Path) -> list[Path]:
    """The input's directory and its ancestors up to ``root``; only its directory outside ``root``."""
    parent = Path(os.path.abspath(path)).parent
    inside = [directory for directory in (parent, *parent.parents) if directory.is_relative_to(root)]
    return inside or [parent]


class RecordIndex:
    """Records found beside inputs, each directory listed and each record parsed once.

    Records that cannot be read are collected in ``unreadable`` (record path -> reason):
    a job refuses its inputs over them, the audit reports them as mismatches.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.unreadable: dict[Path, str] = {}
        self._outputs: dict[Path, dict[str, list[RecordedOutput]]] = {}

    def recorded(self, path: str) -> list[RecordedOutput]:
        """Every record entry that lists ``path`` among its outputs."""
        key = os.path.abspath(path)
        found = []
        for directory in _search_directories(path, self.root):
            if directory not in self._outputs:
                self._outputs[directory] = _directory_outputs(directory, self.unreadable)
            found.extend(self._outputs[directory].get(key, []))
        return found

    def shown(self, path: Path) -> str:
        """``path`` relative to the working directory when inside it, as rules name files."""
        return str(path.relative_to(self.root)) if path.is_relative_to(self.root) else str(path)


def _check_digest(path: str, current: Mapping[str, Any], entry: RecordedOutput, index: RecordIndex) -> None:
    """Refuse ``path`` if its checksum differs from the one ``entry`` recorded when it was written."""
    if current["sha256"] != entry.digest["sha256"]:
        raise UserInputError(
            f"{path}: sha256 {current['sha256']} differs from {entry.digest['sha256']} recorded by "
            f"{index.shown(entry.record)} ({entry.command}): it changed after that job wrote it; "
            f"rerun the job that writes it (snakemake --forcerun {path})"
        )


def check_kind(name: str, path: str, kinds: Mapping[str, str], labels: Mapping[str, str]) -> None:
    """Refuse a missing input, a folder given for a file or a file for a folder (``commands.input_kinds``)."""
    kind = kinds.get(name.partition("[")[0], "file")
    given = f"{option_name(name, labels)} {path}"
    if not os.path.exists(path):  # a missing input is never vouched for
        raise UserInputError(f"{given}: no such file or directory")
    if kind == "file" and not os.path.isfile(path):
        raise UserInputError(f"{given}: a folder, where a file is expected")
    if kind == "folder" and not os.path.isdir(path):
        raise UserInputError(f"{given}: a file, where a folder is expected")


def verify_inputs(
    inputs: Mapping[str, str],
    digest_all: bool,
    kinds: Mapping[str, str],
    labels: Mapping[str, str],
    recorded_only: Mapping[str, Any] = {},
) -> dict[str, dict[str, Any]]:
    """Check each input's kind and its records; return the digests taken, by input name.

    Only inputs some record lists are hashed, unless ``digest_all`` (the caller writes a
    record of its own and needs every input's digest): each input is hashed at most once.
    An absent input that ``recorded_only`` holds (a file an imported bundle vouches for by
    its records, ``records.imported``) is accepted unread.
    """
    index = RecordIndex(Path.cwd())
    digests = {}
    for name, path in inputs.items():
        if os.path.normpath(path) in recorded_only and not os.path.exists(path):
            continue
        check_kind(name, path, kinds, labels)
        entries = index.recorded(path)
        if index.unreadable:
            raise UnreadableRecord(next(iter(index.unreadable.values())))
        if not (entries or digest_all):
            continue
        digests[name] = path_digest(path)
        for entry in entries:
            _check_digest(path, digests[name], entry, index)
    return digests
