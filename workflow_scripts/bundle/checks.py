"""An unpacked bundle checked against the records it carries and this checkout's configuration.

The checksum list only proves the archive is the one its maker wrote. These checks prove more:
every shipped file is the output its job's record lists (bytes and all), every file left behind
is vouched for by a record, and the bundle's jobs ran under the configuration this checkout
loads, so its settings are what the rules here would run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts import layout, registry
from workflow_scripts.errors import UserInputError
from workflow_scripts.provenance.audit import config_differences
from workflow_scripts.records import path_digest

SHOWN = 5  # differences named in a refusal


def _carried_records(staging: Path, meta: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The records the bundle says it carries, each read from the unpacked archive."""
    records = {}
    for path in meta["records"]:
        try:
            records[path] = json.loads((staging / path).read_text())
        except (OSError, ValueError) as error:
            raise UserInputError(
                f"{path}: a record the bundle lists is missing or unreadable ({error})"
            ) from error
    return records


def recorded_outputs(records: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """Output path -> (the record listing it, its sha256), over every job record carried."""
    listed = {}
    for record_path, record in records.items():
        for digest in (record.get("outputs") or {}).values():
            if isinstance(digest, dict) and "sha256" in digest:
                listed[str(Path(digest["path"]))] = (record_path, digest["sha256"])
    return listed


def check_records(staging: Path, meta: Mapping[str, Any]) -> None:
    """Refuse a shipped file its record does not list with these bytes, or a vouched file with no record."""
    listed = recorded_outputs(_carried_records(staging, meta))
    for path in meta["shipped"]:
        if path not in listed:
            raise UserInputError(
                f"{path}: no record in the bundle lists it as its job's output (record removed?)"
            )
        record, sha256 = listed[path]
        now = path_digest(staging / path)["sha256"]
        if now != sha256:
            raise UserInputError(
                f"{path}: sha256 {now[:12]} in the bundle, {sha256[:12]} recorded by {record}"
            )
    for path, digest in meta["recorded_only"].items():
        hub = digest["recorded_by"].endswith(layout.MANIFEST_FILE)  # a download: its hub manifest vouches
        if not hub and listed.get(path, (None, None))[1] != digest["sha256"]:
            raise UserInputError(f"{path}: the bundle vouches for it, but no record it carries lists it so")


def check_config(meta: Mapping[str, Any], config_files: Sequence[str]) -> None:
    """Refuse a bundle made under another configuration than ``config_files`` load here, naming keys."""
    differences = config_differences(meta["config"], registry.load_config(list(config_files)))
    if differences:
        shown = "; ".join(differences[:SHOWN]) + (" ..." if len(differences) > SHOWN else "")
        raise UserInputError(
            f"{' '.join(config_files)}: the bundle was made under another configuration "
            f"({len(differences)} key(s) differ, bundle -> here: {shown}); import it into a checkout "
            f"with its config files ({', '.join(meta['config_files'])}) or name them with --config-files"
        )
