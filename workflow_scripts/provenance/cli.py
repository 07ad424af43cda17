"""``provenance`` stage: the manifest that says what produced a table or figure, and its audit.

python -m workflow_scripts provenance audit table5 figure1   # exit 0: everything recorded holds
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import write_json, write_text
from workflow_scripts.commands import add_command, add_stage, json_argument
from workflow_scripts.errors import UserInputError
from workflow_scripts.layout import RESULTS, ledger_path
from workflow_scripts.records import arguments_hash, code_version, path_digest, software_versions
from workflow_scripts.records.imported import read_ledger, vouched_digest


def build_manifest(args: argparse.Namespace) -> dict[str, Any]:
    """The output's closure, the checksums of its inputs and the records of every job behind them.

    The records are the audit's chain (``provenance.audit.build_chain``): each job's record
    beside its outputs, followed through its inputs back to the raw files and the hub
    downloads' manifests with the commits they resolved. A checkpoint an imported bundle left
    behind counts with the digest its record vouches for (``records.imported``).
    """
    from workflow_scripts.provenance.audit import build_chain

    ledger = read_ledger(ledger_path(RESULTS))
    inputs = sorted(args.inputs_list)
    digests = {path: vouched_digest(path, ledger) or path_digest(path) for path in inputs}
    chain = build_chain({"inputs": digests}, Path.cwd())
    return {
        "output": args.output_id,
        "title": args.entry["title"],
        "entry": args.entry,
        "closure": args.closure,
        "config_sha256": arguments_hash(args.config),
        "config": args.config,
        "config_files": {path: path_digest(path) for path in args.config_files},
        "inputs": digests,
        "upstream": chain.records,
        "code": code_version(),
        "software": software_versions(),
    }


def manifest(args: argparse.Namespace) -> None:
    write_json(args.out, build_manifest(args))


def read_manifest(results: str, output_id: str) -> dict[str, Any]:
    from workflow_scripts.layout import manifest_path

    path = manifest_path(results, output_id)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        known = _known_outputs()
        if known and output_id not in known:
            raise UserInputError(
                f"{output_id!r}: no such table or figure (known: {', '.join(known)})"
            ) from None
        raise UserInputError(
            f"{path}: no readable manifest ({error}); build it first: snakemake {path}"
        ) from error


def _original_inputs(results: str, output_id: str) -> dict[str, Any]:
    """The input digests of the manifest an imported bundle carried for ``output_id`` (none without one)."""
    from workflow_scripts.layout import bundle_manifest_path

    path = bundle_manifest_path(results, output_id)
    return json.loads(path.read_text())["inputs"] if path.is_file() else {}


def _known_outputs() -> list[str]:
    """The table and figure ids of the checkout's ``config.yaml`` (none outside a checkout)."""
    from workflow_scripts import registry

    try:
        return sorted(registry.outputs(registry.load_config(["config.yaml"])))
    except (OSError, registry.RegistryError):
        return []


def run_audit(args: argparse.Namespace, stages: argparse._SubParsersAction) -> None:
    """Audit each output; print text (or ``--json``); any mismatch is an error (exit status 2).

    ``stages`` is the entry point's stage action: its parsers read the commands rules run today.
    """
    from workflow_scripts import registry
    from workflow_scripts.layout import manifest_path
    from workflow_scripts.provenance.audit import Current, audit, origins, report, summary
    from workflow_scripts.provenance.settings import current_commands, settings_by_record

    manifests = {output_id: read_manifest(args.results, output_id) for output_id in args.output_ids}
    first = manifests[args.output_ids[0]]
    config_files = args.config_files or list(first.get("config_files", {}))
    if not config_files:
        first_path = manifest_path(args.results, args.output_ids[0])
        raise UserInputError(f"{first_path}: records no config files; name them with --config-files")
    config = registry.load_config(config_files)
    targets = [str(manifest_path(args.results, output_id)) for output_id in args.output_ids]
    settings = settings_by_record(current_commands(targets, config_files, Path.cwd()), stages.choices)
    ledger = read_ledger(ledger_path(args.results))
    current = Current(results=Path(args.results), config=config, settings=settings, ledger=ledger)
    texts, summaries = [], []
    for output_id, recorded in manifests.items():
        chain, findings, absent = audit(recorded, Path.cwd(), current)
        came_from = origins(chain, current.results, ledger, _original_inputs(args.results, output_id))
        texts.append(report(output_id, chain, findings, absent, came_from))
        summaries.append(summary(output_id, chain, findings, absent, came_from))
    print(json.dumps(summaries, indent=2) if args.json else "".join(texts), end="\n" if args.json else "")
    failed = [entry["output"] for entry in summaries if not entry["holds"]]
    if failed:
        count = sum(len(entry["findings"]) for entry in summaries)
        raise UserInputError(f"{', '.join(failed)}: {count} mismatch(es) against the recorded provenance")
    if args.out:
        write_text(args.out, "".join(texts))


def register(stages: argparse._SubParsersAction) -> None:
    commands = add_stage(stages, "provenance", "provenance manifests of tables and figures")
    parser = add_command(
        commands,
        "manifest",
        manifest,
        help="checksum every input of one table or figure and gather the records that produced them",
        inputs=("inputs_list", "config_files"),
        either=("inputs_list",),
        outputs=("out",),
    )
    parser.add_argument("--output-id", required=True, help="table or figure id, e.g. table5")
    parser.add_argument("--entry", required=True, type=json_argument, help="its registry entry (JSON)")
    parser.add_argument("--closure", required=True, type=json_argument, help="its closure (JSON)")
    parser.add_argument(
        "--config", required=True, type=json_argument, help="the whole validated config (JSON)"
    )
    parser.add_argument("--inputs", dest="inputs_list", nargs="*", default=[], help="input paths")
    parser.add_argument(
        "--config-files", nargs="*", default=[], help="the config files Snakemake merged, in order"
    )
    parser.add_argument("--out", required=True, help="manifest path (JSON)")
    parser.set_defaults(accepts_recorded_only=True)  # a checkpoint an imported bundle left behind

    summary = "re-check one table's or figure's recorded chain: files, code, software, config"
    checker = commands.add_parser("audit", help=summary, description=__doc__)
    checker.add_argument(
        "output_ids", nargs="+", metavar="OUTPUT", help="table or figure ids, e.g. table5 figure1"
    )
    checker.add_argument(
        "--json", action="store_true", help="print the audit as JSON (one object per output)"
    )
    checker.add_argument("--results", default=RESULTS, help=f"results root (default: {RESULTS})")
    checker.add_argument(
        "--config-files", nargs="*", help="config files to compare with (default: those the manifest records)"
    )
    checker.add_argument(
        "--out", help="write the report here when everything holds (the check rule's output)"
    )
    audit_with_parsers = functools.partial(run_audit, stages=stages)
    checker.set_defaults(run=audit_with_parsers, provenance=None, inputs=(), outputs=(), input_kinds={})
