"""``bundle`` commands: export a run's expensive outputs with their records; import them into a checkout.

python -m workflow_scripts bundle export table5 figure1 --out rpb-bundle.tar.gz
python -m workflow_scripts bundle import rpb-bundle.tar.gz   # then: snakemake <targets>
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from workflow_scripts import layout, registry
from workflow_scripts.atomic import atomic_path, write_json
from workflow_scripts.commands import add_registry_arguments, registry_config
from workflow_scripts.errors import UserInputError
from workflow_scripts.records import code_version, file_sha256
from workflow_scripts.records.imported import Ledger, read_ledger
from workflow_scripts.records.sha256sums import read_list

FORMAT = 1


def _output_ids(args: argparse.Namespace) -> list[str]:
    """The tables and figures named, ``all`` as every one of the configuration."""
    if args.targets == ["all"]:
        return sorted(registry.outputs(registry_config(args)))
    return args.targets


def export(args: argparse.Namespace) -> None:
    """Write the bundle of the named outputs' closures to ``--out``."""
    from workflow_scripts.bundle.archive import member_files, write_archive
    from workflow_scripts.bundle.contents import bundle_contents

    output_ids = _output_ids(args)
    contents = bundle_contents(Path(layout.RESULTS), output_ids, args.checkpoints)
    first = contents.manifests[output_ids[0]]
    files = member_files([*contents.shipped, *contents.records])
    meta = {
        "format": FORMAT,
        "outputs": output_ids,
        "config": first["config"],
        "config_sha256": first["config_sha256"],
        "config_files": list(first["config_files"]),
        "code": first["code"],
        "hub": contents.hub,
        "checkpoints": args.checkpoints,
        "shipped": list(contents.shipped),
        "records": list(contents.records),
        "recorded_only": contents.recorded_only,
        "mtimes": {name: os.stat(name).st_mtime_ns for name in files},
    }
    Path(layout.RESULTS).mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=layout.RESULTS, prefix=".bundle-") as staging:
        write_archive(args.out, files, meta, contents.manifests, Path(staging))
    size = Path(args.out).stat().st_size
    print(
        f"{args.out}: {len(contents.shipped)} result files and {len(contents.records)} records of "
        f"{', '.join(output_ids)}, {size / 1e6:.1f} MB; {len(contents.recorded_only)} files left "
        "behind, vouched for by their records"
    )


def _place(staging: Path, names: list[str], mtimes: dict[str, int]) -> None:
    """Copy each member into place with its exported mtime; first refuse any replacing other bytes."""
    clashing = [
        name
        for name in names
        if Path(name).exists() and file_sha256(Path(name)) != file_sha256(staging / name)
    ]
    if clashing:
        raise UserInputError(
            f"{clashing[0]}: already here with other bytes than the bundle's ({len(clashing)} file(s)); "
            "import into a checkout without results, or move them away"
        )
    for name in names:
        with atomic_path(name) as tmp:
            shutil.copyfile(staging / name, tmp)
        os.utime(name, ns=(mtimes[name], mtimes[name]))  # Snakemake then sees each file as old as it was


def import_bundle(args: argparse.Namespace) -> None:
    """Check the archive, its records and the configuration; put its files in place; write the ledger."""
    from workflow_scripts.bundle.archive import CHECKSUMS, MANIFESTS, unpack
    from workflow_scripts.bundle.checks import check_config, check_records

    results = Path(layout.RESULTS)
    archive_sha256 = file_sha256(Path(args.archive))
    earlier = read_ledger(layout.ledger_path(results))
    if earlier is not None and earlier.archive_sha256 != archive_sha256:
        raise UserInputError(
            f"{layout.ledger_path(results)}: bundle {earlier.archive} is imported here (one a checkout)"
        )
    results.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=results, prefix=".bundle-") as staging_name:
        staging = Path(staging_name)
        meta = unpack(args.archive, staging)
        check_records(staging, meta)
        check_config(meta, args.config_files or meta["config_files"])
        listed = read_list(staging / CHECKSUMS)
        names = sorted(name for name in listed if name.startswith(f"{layout.RESULTS}/"))
        _place(staging, names, meta["mtimes"])
        for manifest in sorted((staging / MANIFESTS).glob("*.json")):
            with atomic_path(layout.bundle_manifest_path(results, manifest.stem)) as tmp:
                shutil.copyfile(manifest, tmp)
    ledger = Ledger(
        archive=Path(args.archive).name,
        archive_sha256=archive_sha256,
        exported_commit=meta["code"]["git_commit"],
        placed={name: listed[name] for name in names},
        recorded_only=meta["recorded_only"],
    )
    write_json(layout.ledger_path(results), dataclasses.asdict(ledger))
    _report(meta, ledger)


def _report(meta: dict[str, Any], ledger: Ledger) -> None:
    """What was imported, whether the code matches, and the next command."""
    here = code_version()["git_commit"]
    print(
        f"imported {len(ledger.placed)} files of {', '.join(meta['outputs'])} (exported at commit "
        f"{ledger.exported_commit}); {len(ledger.recorded_only)} files stay behind, vouched for by records"
    )
    if here != ledger.exported_commit:
        print(f"note: this checkout is at {here}: the audit will name the bundle's jobs under 'code'")
    targets = " ".join(str(layout.manifest_path(layout.RESULTS, output_id)) for output_id in meta["outputs"])
    print(f"next: snakemake {targets} --profile <your profile>")


def register(stages: argparse._SubParsersAction) -> None:
    commands = stages.add_parser("bundle", help="results bundles: export a run's results, import them")
    actions = commands.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plumbing = {"provenance": None, "inputs": (), "outputs": (), "input_kinds": {}}

    exporter = actions.add_parser("export", help=export.__doc__, description=export.__doc__)
    exporter.add_argument("targets", nargs="+", metavar="OUTPUT", help="table or figure ids, or 'all'")
    exporter.add_argument("--out", required=True, help="the archive to write (.tar.gz)")
    exporter.add_argument(
        "--checkpoints",
        action="store_true",
        help="ship the trained checkpoints too (hundreds of GB at paper scale)",
    )
    add_registry_arguments(exporter)  # the configuration whose tables and figures 'all' names
    exporter.set_defaults(run=export, **plumbing)

    importer = actions.add_parser("import", help=import_bundle.__doc__, description=import_bundle.__doc__)
    importer.add_argument("archive", help="a bundle written by 'bundle export'")
    importer.add_argument(
        "--config-files",
        nargs="*",
        help="the config files of this checkout to compare with (default: the bundle's)",
    )
    importer.set_defaults(run=import_bundle, **{**plumbing, "inputs": ("archive",)})
