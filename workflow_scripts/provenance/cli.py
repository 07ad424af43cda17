"""``provenance`` stage: the manifest that says what produced a table or figure."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import write_json
from workflow_scripts.cli import add_command, add_stage, json_argument
from workflow_scripts.provenance import arguments_hash, code_version, path_digest, software_versions


def upstream_records(inputs: list[str]) -> dict[str, Any]:
    """Records of every job upstream of ``inputs``, followed transitively.

    A job's record sits beside its outputs (``provenance.json``); a downloaded
    raw file has a ``.manifest.json`` with the hub commit it resolved. Each
    record's own inputs are followed in turn, so a table's manifest reaches
    back to the hub revision its rows came from.
    """
    records: dict[str, Any] = {}
    pending = [Path(path) for path in inputs]
    while pending:
        path = pending.pop()
        for candidate in (path.parent / "provenance.json", path.with_suffix(".manifest.json")):
            if str(candidate) in records or not candidate.is_file():
                continue
            record = json.loads(candidate.read_text())
            records[str(candidate)] = record
            upstream = record.get("inputs", {}).values()
            pending.extend(
                Path(digest["path"]) for digest in upstream if isinstance(digest, dict) and "path" in digest
            )
    return records


def build_manifest(args: argparse.Namespace) -> dict[str, Any]:
    inputs = sorted(args.inputs_list)
    return {
        "output": args.output_id,
        "title": args.entry["title"],
        "entry": args.entry,
        "closure": args.closure,
        "config_sha256": arguments_hash(args.config),
        "inputs": {path: path_digest(path) for path in inputs},
        "upstream": upstream_records(inputs),
        "code": code_version(),
        "software": software_versions(),
    }


def manifest(args: argparse.Namespace) -> None:
    write_json(args.out, build_manifest(args))


def register(stages: argparse._SubParsersAction) -> None:
    commands = add_stage(stages, "provenance", "provenance manifests of tables and figures")
    parser = add_command(
        commands,
        "manifest",
        manifest,
        help="checksum every input of one table or figure and gather the records that produced them",
        outputs=("out",),
    )
    parser.add_argument("--output-id", required=True, help="table or figure id, e.g. table5")
    parser.add_argument("--entry", required=True, type=json_argument, help="its registry entry (JSON)")
    parser.add_argument("--closure", required=True, type=json_argument, help="its closure (JSON)")
    parser.add_argument(
        "--config", required=True, type=json_argument, help="the whole validated config (JSON)"
    )
    parser.add_argument("--inputs", dest="inputs_list", nargs="*", default=[], help="input paths")
    parser.add_argument("--out", required=True, help="manifest path (JSON)")
