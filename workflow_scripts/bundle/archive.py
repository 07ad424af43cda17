"""The bundle archive: its members at their paths in the run, ``bundle.json`` and a checksum list.

``SHA256SUMS`` (the ``sha256sum -c`` format, ``records.sha256sums``) lists every other member, so
a reader can check a download with coreutils alone; an import checks it before reading anything.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import atomic_path
from workflow_scripts.errors import UserInputError
from workflow_scripts.records import SNAKEMAKE_FLAG
from workflow_scripts.records.sha256sums import DigestListError, digests_of, mismatch, read_list, write_list

META = "bundle.json"
CHECKSUMS = "SHA256SUMS"
MANIFESTS = "manifests"  # the exported tables' and figures' manifests: manifests/{id}.json


def member_files(paths: Iterable[str]) -> list[str]:
    """Every file of ``paths``, a folder (a checkpoint) as the files in it."""
    files = []
    for path in paths:
        folder = Path(path)
        if folder.is_dir():
            files += sorted(str(f) for f in folder.rglob("*") if f.is_file() and f.name != SNAKEMAKE_FLAG)
        else:
            files.append(path)
    return files


def write_archive(
    out: str, files: list[str], meta: Mapping[str, Any], manifests: Mapping[str, Any], staging: Path
) -> None:
    """Write ``files`` (relative to the working directory), ``meta``, ``manifests`` and their checksum list.

    ``staging`` holds the generated members (``bundle.json``, the manifests) while the archive is written.
    """
    (staging / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    (staging / MANIFESTS).mkdir()
    for output_id, manifest in manifests.items():
        (staging / MANIFESTS / f"{output_id}.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    generated = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file())
    digests = digests_of(Path.cwd(), files) | digests_of(staging, generated)
    write_list(staging / CHECKSUMS, digests)
    with atomic_path(out) as tmp, tarfile.open(tmp, "w:gz", compresslevel=6) as archive:
        for name in [CHECKSUMS, *generated]:
            archive.add(staging / name, arcname=name)
        for name in files:
            archive.add(name, arcname=name)


def unpack(archive_path: str, staging: Path) -> dict[str, Any]:
    """Extract the archive into ``staging`` and check it against its checksum list; its ``bundle.json``."""
    try:
        with tarfile.open(archive_path) as archive:
            archive.extractall(staging, filter="data")  # refuses absolute paths, '..' and links out
    except (tarfile.TarError, OSError) as error:
        raise UserInputError(f"{archive_path}: not a readable bundle archive ({error})") from error
    try:
        listed = read_list(staging / CHECKSUMS)
    except DigestListError as error:
        raise UserInputError(f"{archive_path}: {error}") from error
    present = [str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()]
    problem = mismatch(staging, listed, [name for name in present if name != CHECKSUMS])
    if problem:
        raise UserInputError(f"{archive_path}: {problem}; the archive is not the one exported")
    return json.loads((staging / META).read_text())
