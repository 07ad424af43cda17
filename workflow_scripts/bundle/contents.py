"""Which files of a finished run a bundle ships, which it vouches for by record only, and why.

The chain behind each table's or figure's manifest (``provenance.audit.build_chain``) names every
file and record. A bundle ships the files that cost GPUs or hours and that the report reads
(corpora, priors, routes, graphs and metrics, benchmark items, generations, scores, likelihoods,
summaries), trained checkpoints only when asked, and the record of every job; base models, raw
downloads and (by default) checkpoints stay behind, vouched for by the records that wrote them.
Tables, figures and manifests are what an importer rebuilds, so they are not shipped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts import layout
from workflow_scripts.errors import UserInputError
from workflow_scripts.provenance.audit import build_chain, file_findings, record_findings
from workflow_scripts.provenance.cli import read_manifest

SHIPPED_KINDS = ("corpus", "prior", "probe", "graph", "benchmark", "suite", "eval")
REBUILT_KINDS = ("table", "figure", "provenance", "bundle")


def _folders(kinds: Sequence[str]) -> set[str]:
    """The top folders below the results root of these ``layout.PATHS`` kinds."""
    return {layout.PATHS[kind].split("/")[0] for kind in kinds}


def _top_folder(path: str, results: Path) -> str | None:
    """The first folder of ``path`` below the results root; None outside it."""
    relative = Path(os.path.relpath(os.path.abspath(path), os.path.abspath(results)))
    return None if relative.parts[0] == ".." else relative.parts[0]


@dataclass(frozen=True)
class Contents:
    """A bundle's members by role, with what it records of its origin."""

    manifests: Mapping[str, Mapping[str, Any]]  # output id -> its manifest
    shipped: tuple[str, ...]  # files (a checkpoint: a folder) placed by an import
    records: tuple[str, ...]  # every job record and hub manifest of the chain, rebuilt jobs' apart
    recorded_only: Mapping[str, Mapping[str, Any]]  # left behind: path -> the digest its job recorded
    hub: Mapping[str, str]  # downloaded path -> repo@commit


def _recorded_digest(path: str, job: str, expected: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The digest of ``path`` as its producing ``job`` recorded it."""
    sha256 = next(sha for recorder, sha in expected if recorder == job)
    return {"path": path, "sha256": sha256, "recorded_by": job}


def bundle_contents(results: Path, output_ids: Sequence[str], checkpoints: bool) -> Contents:
    """What a bundle of ``output_ids`` holds; refuses a chain that does not hold (naming the file)."""
    manifests = {output_id: read_manifest(str(results), output_id) for output_id in output_ids}
    configs = {manifest["config_sha256"] for manifest in manifests.values()}
    if len(configs) > 1:
        raise UserInputError(
            f"{', '.join(output_ids)}: their manifests were made with {len(configs)} configurations; "
            "a bundle holds one (rebuild them under one config, then export)"
        )
    inputs = {path: d for manifest in manifests.values() for path, d in manifest["inputs"].items()}
    chain = build_chain({"inputs": inputs}, Path.cwd())
    shipped_folders = _folders(SHIPPED_KINDS + (("checkpoint",) if checkpoints else ()))
    rebuilt_folders = _folders(REBUILT_KINDS)
    shipped, recorded_only = [], {}
    for path, expected in sorted(chain.expected.items()):
        folder = _top_folder(path, results)
        if folder is None or folder in rebuilt_folders or path not in chain.producers:
            continue
        if folder in shipped_folders and path not in chain.hub:
            shipped.append(path)
        else:
            recorded_only[os.path.normpath(path)] = _recorded_digest(path, chain.producers[path], expected)
    broken = [
        finding
        for finding in file_findings(chain) + record_findings(chain, results)
        if finding.subject in shipped or finding.kind == "record"
    ]
    if broken:
        first = broken[0]
        raise UserInputError(
            f"{first.subject}: {first.detail} ({len(broken)} finding(s)); a bundle ships only what its "
            f"records vouch for: python -m workflow_scripts provenance audit {' '.join(output_ids)}"
        )
    records = tuple(sorted(job for job in chain.records if _top_folder(job, results) not in rebuilt_folders))
    return Contents(manifests, tuple(shipped), records, recorded_only, dict(sorted(chain.hub.items())))
