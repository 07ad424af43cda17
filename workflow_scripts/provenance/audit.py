"""Audit a table's or figure's recorded chain against the files, code, software and config as they are now.

A manifest (``results/provenance/{id}.json``) lists the files its output was made from;
the job that wrote each one left a record (``*provenance*.json``) listing its own inputs,
back to the raw data and the hub downloads' manifests. The audit follows that chain,
re-hashes every file and compares it with every checksum recorded for it, requires a
readable record of the job that wrote every file under the results root, compares each
job's recorded arguments with those the current configuration gives it, and each job's
code and package versions with today's. Every difference is a finding, with the jobs it
invalidates (docs: provenance).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.layout import MANIFEST_FILE
from workflow_scripts.records import TRACKED_PACKAGES, code_version, path_digest
from workflow_scripts.records.imported import Ledger, vouched_digest
from workflow_scripts.records.verify import RecordIndex

MANIFEST = "manifest"  # the job id of the table's or figure's own manifest
# Run by an environment's own interpreter: the versions of the packages named as arguments.
VERSIONS_SCRIPT = """
import json, sys
from importlib import metadata
versions = {}
for name in sys.argv[1:]:
    try:
        versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        versions[name] = None
print(json.dumps(versions))
"""


@dataclass(frozen=True)
class Finding:
    """One difference between what was recorded and what is there now."""

    kind: str  # file | record | settings | code | software | config
    subject: str
    detail: str
    jobs: tuple[str, ...] = ()  # the jobs whose results it invalidates (record paths, or "manifest")


@dataclass
class Chain:
    """The recorded jobs behind one output and every checksum recorded for each file they touch."""

    records: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    expected: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # path -> [(job, sha256)]
    readers: dict[str, set[str]] = field(default_factory=dict)  # path -> jobs reading it
    outputs: dict[str, set[str]] = field(default_factory=dict)  # job -> paths it wrote
    producers: dict[str, str] = field(default_factory=dict)  # path -> the job that wrote it
    hub: dict[str, str] = field(default_factory=dict)  # downloaded path -> repo@commit
    unreadable: dict[str, str] = field(default_factory=dict)  # record -> why it cannot be read

    def expect(self, path: str, job: str, digest: Mapping[str, Any], read: bool) -> None:
        if "sha256" in digest:
            self.expected.setdefault(path, []).append((job, digest["sha256"]))
        if read:
            self.readers.setdefault(path, set()).add(job)
        else:
            self.outputs.setdefault(job, set()).add(path)
            self.producers[path] = job

    def downstream(self, path: str) -> set[str]:
        """Every job that read ``path`` or, transitively, anything written from it."""
        found: set[str] = set()
        pending = [path]
        while pending:
            for job in self.readers.get(pending.pop(), ()):
                if job not in found:
                    found.add(job)
                    pending.extend(self.outputs.get(job, ()))
        return found

    def invalidated_by(self, job: str) -> tuple[str, ...]:
        """``job`` itself and every job downstream of what it wrote."""
        found = {job}
        for path in self.outputs.get(job, ()):
            found |= self.downstream(path)
        return tuple(sorted(found))


def _hub_manifest(path: Path) -> tuple[Path, Mapping[str, Any]] | None:
    """The download manifest that lists ``path`` (a raw parquet or a base checkpoint), if any."""
    for candidate in (path.with_suffix(".manifest.json"), path.parent / MANIFEST_FILE):
        if candidate.is_file():
            manifest = json.loads(candidate.read_text())
            listed = manifest.get("parquet") or (manifest.get("checkpoint") or {}).get("path")
            if listed and Path(listed) == path:
                return candidate, manifest
    return None


def build_chain(manifest: Mapping[str, Any], root: Path) -> Chain:
    """Follow the records from the manifest's inputs back to the raw files and hub downloads."""
    chain, index = Chain(), RecordIndex(root)
    pending = []
    for path, digest in manifest["inputs"].items():
        chain.expect(path, MANIFEST, digest, read=True)
        pending.append(path)
    seen: set[str] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for entry in index.recorded(path):
            job = index.shown(entry.record)
            if job in chain.records:
                continue
            record = chain.records[job] = json.loads(entry.record.read_text())
            for digest in record.get("outputs", {}).values():
                chain.expect(digest["path"], job, digest, read=False)
            for digest in record.get("inputs", {}).values():
                if isinstance(digest, dict) and "path" in digest:
                    chain.expect(digest["path"], job, digest, read=True)
                    pending.append(digest["path"])
        found = _hub_manifest(Path(path))
        if found:
            where, hub = found
            job = str(where)
            chain.records.setdefault(job, hub)
            digest = hub.get("checkpoint") or {"sha256": hub["parquet_sha256"]}
            chain.expect(path, job, digest, read=False)
            chain.hub[path] = f"{hub['repo']}@{hub['revision_resolved']}"
    chain.unreadable = {index.shown(path): reason for path, reason in index.unreadable.items()}
    return chain


def file_findings(chain: Chain, ledger: Ledger | None = None) -> list[Finding]:
    """Files whose bytes differ from a checksum recorded for them (or that are gone).

    A file an imported bundle left behind (``ledger``: a checkpoint, a download) is absent by
    design: it holds when every checksum recorded for it is the one the bundle vouched for.
    """
    findings = []
    for path, expected in sorted(chain.expected.items()):
        now = path_digest(path)
        vouched = vouched_digest(path, ledger)
        placed = (
            f" (placed by bundle {ledger.archive})"
            if ledger and os.path.normpath(path) in ledger.placed
            else ""
        )
        for job, sha256 in expected:
            if vouched is not None and vouched["sha256"] == sha256:
                continue
            if now.get("missing"):
                detail = f"missing; {job} recorded sha256 {sha256[:12]}"
            elif now["sha256"] != sha256:
                detail = f"sha256 {now['sha256'][:12]} now, {sha256[:12]} recorded by {job}{placed}"
            else:
                continue
            findings.append(Finding("file", path, detail, tuple(sorted(chain.downstream(path)))))
    return findings


def record_findings(chain: Chain, results: Path) -> list[Finding]:
    """Records that cannot be read, and files under ``results`` that no record says a job wrote.

    Everything under the results root is written by a job of the workflow, so a file there
    whose producer left no (readable) record has no provenance to hold.
    """
    findings = [Finding("record", record, reason) for record, reason in sorted(chain.unreadable.items())]
    for path in sorted(chain.expected):
        if path not in chain.producers and Path(path).resolve().is_relative_to(results.resolve()):
            detail = "no readable record of the job that wrote it"
            findings.append(Finding("record", path, detail, tuple(sorted(chain.downstream(path)))))
    return findings


def settings_findings(chain: Chain, current: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """Jobs whose recorded arguments differ from those the current configuration gives them.

    ``current`` maps a record path to the arguments today's command for it would record
    (``provenance.settings``); hub downloads carry a manifest, not arguments, and are skipped.
    """
    findings = []
    for job, record in sorted(chain.records.items()):
        if "arguments" not in record:
            continue
        now = current.get(os.path.normpath(job))
        if now is None:
            detail = "no job of the current configuration writes this record (a foreign or stale artefact)"
            findings.append(Finding("settings", job, detail, chain.invalidated_by(job)))
            continue
        differences = config_differences(record["arguments"], now)
        if differences:
            detail = f"{record.get('command')} ran with other settings: " + "; ".join(differences)
            findings.append(Finding("settings", job, detail, chain.invalidated_by(job)))
    return findings


def code_findings(chain: Chain, current: Mapping[str, Any]) -> list[Finding]:
    """Jobs that ran at another commit than the checkout's, or from a modified working tree."""
    by_version: dict[tuple[Any, Any], list[str]] = {}
    for job, record in chain.records.items():
        if "code" in record:
            by_version.setdefault((record["code"]["git_commit"], record["code"]["git_dirty"]), []).append(job)
    findings = []
    now = (current["git_commit"], current["git_dirty"])
    for (commit, dirty), jobs in sorted(by_version.items(), key=str):
        if (commit, dirty) != now or dirty:
            detail = f"ran at {_commit_text(commit, dirty)}; the checkout is at {_commit_text(*now)}"
            findings.append(Finding("code", f"{len(jobs)} job(s)", detail, tuple(sorted(jobs))))
    return findings


def _commit_text(commit: str | None, dirty: bool | None) -> str:
    return f"{commit or 'no git commit'}{' with uncommitted changes' if dirty else ''}"


def installed_versions(prefix: str) -> dict[str, str | None] | None:
    """Tracked package versions of the environment at ``prefix`` now; None where it is not on this machine."""
    python = Path(prefix) / "bin" / "python"
    if not python.exists():
        return None
    done = subprocess.run(
        [str(python), "-c", VERSIONS_SCRIPT, *TRACKED_PACKAGES], capture_output=True, text=True, timeout=120
    )
    return json.loads(done.stdout) if done.returncode == 0 else None


def software_findings(chain: Chain) -> tuple[list[Finding], list[str]]:
    """Packages whose version in a job's environment differs now; and environments not on this machine."""
    findings, absent = [], []
    environments: dict[str, dict[str, str | None] | None] = {}
    for job, record in sorted(chain.records.items()):
        software = record.get("software")
        if not software:
            continue
        prefix = software["prefix"]
        if prefix not in environments:
            environments[prefix] = installed_versions(prefix)
            if environments[prefix] is None:
                absent.append(prefix)
        now = environments[prefix]
        for name, version in sorted(software["packages"].items()):
            if now is not None and now.get(name) != version:
                detail = f"{name} {version} recorded by {job}, {now.get(name)} installed in {prefix} now"
                findings.append(Finding("software", name, detail, (job,)))
    return findings, absent


def config_differences(recorded: Any, current: Any, where: str = "") -> list[str]:
    """Key paths whose values differ between two configs (``a.b.c: old -> new``)."""
    if isinstance(recorded, Mapping) and isinstance(current, Mapping):
        differences = []
        for key in sorted(set(recorded) | set(current), key=str):
            path = f"{where}.{key}" if where else str(key)
            if key not in current:
                differences.append(f"{path}: {recorded[key]!r} -> (removed)")
            elif key not in recorded:
                differences.append(f"{path}: (absent) -> {current[key]!r}")
            else:
                differences.extend(config_differences(recorded[key], current[key], path))
        return differences
    return [] if recorded == current else [f"{where}: {recorded!r} -> {current!r}"]


def config_findings(manifest: Mapping[str, Any], current: Mapping[str, Any]) -> list[Finding]:
    """Config keys whose value differs from the config the manifest was made with."""
    jobs = (MANIFEST,)
    return [
        Finding("config", d.split(":")[0], d, jobs) for d in config_differences(manifest["config"], current)
    ]


@dataclass(frozen=True)
class Current:
    """What the audit compares with: the results root, the merged config and each job's arguments today."""

    results: Path
    config: Mapping[str, Any]
    settings: Mapping[str, Mapping[str, Any]]  # record path -> arguments (provenance.settings)
    ledger: Ledger | None = None  # the bundle imported into the results root, if any


def audit(
    manifest: Mapping[str, Any], root: Path, current: Current
) -> tuple[Chain, list[Finding], list[str]]:
    """The chain behind ``manifest``, every finding, and the environments that could not be checked."""
    chain = build_chain(manifest, root)
    software, absent = software_findings(chain)
    findings = (
        file_findings(chain, current.ledger)
        + record_findings(chain, current.results)
        + settings_findings(chain, current.settings)
        + code_findings(chain, code_version(root))
        + software
        + config_findings(manifest, current.config)
    )
    return chain, findings, absent


def origins(
    chain: Chain, results: Path, ledger: Ledger | None, originals: Mapping[str, Any]
) -> dict[str, list[str]]:
    """Where each results file of the chain came from, once a bundle was imported: from the bundle,
    known by its records only (left behind), or rebuilt here (beside the bundle's original when it
    recorded one, ``originals``: path -> digest from its manifest). Empty without an import."""
    if ledger is None:
        return {}
    found: dict[str, list[str]] = {"bundle": [], "recorded_only": [], "rebuilt": []}
    for path in sorted(chain.expected):
        key = os.path.normpath(path)
        if key in ledger.placed:
            found["bundle"].append(path)
        elif key in ledger.recorded_only:
            found["recorded_only"].append(path)
        elif path in chain.producers and Path(path).resolve().is_relative_to(results.resolve()):
            if path in originals:
                same = path_digest(path).get("sha256") == originals[path]["sha256"]
                path += f" ({'identical to' if same else 'differs from'} the bundle's original)"
            found["rebuilt"].append(path)
    return found


def summary(
    output_id: str,
    chain: Chain,
    findings: list[Finding],
    absent: list[str],
    came_from: Mapping[str, list[str]] = {},
) -> dict[str, Any]:
    """The audit of one output as data (``--json``): what was verified, files' origins, every finding."""
    return {
        "output": output_id,
        "records": len(chain.records),
        "files": len(chain.expected),
        "hub": dict(sorted(chain.hub.items())),
        "origins": dict(came_from),
        "environments_absent": absent,
        "findings": [
            {"kind": f.kind, "subject": f.subject, "detail": f.detail, "invalidates": list(f.jobs)}
            for f in findings
        ],
        "holds": not findings,
    }


ORIGIN_LINES = {  # origins() key -> how the text report names it
    "bundle": "from the bundle, verified against its record",
    "recorded_only": "left behind by the bundle, vouched for by its record",
    "rebuilt": "rebuilt here",
}


def report(
    output_id: str,
    chain: Chain,
    findings: list[Finding],
    absent: list[str],
    came_from: Mapping[str, list[str]] = {},
) -> str:
    """The audit as text: what was checked, where files came from, each finding and what it invalidates."""
    files = len(chain.expected)
    lines = [f"audit of {output_id}: {len(chain.records)} records and {files} files verified"]
    lines += [f"  hub: {path} from {origin}" for path, origin in sorted(chain.hub.items())]
    lines += [f"  {ORIGIN_LINES[kind]}: {path}" for kind, paths in came_from.items() for path in paths]
    lines += [f"  not checkable here (environment absent): {prefix}" for prefix in absent]
    for finding in findings:
        lines.append(f"MISMATCH {finding.kind} {finding.subject}: {finding.detail}")
        if finding.jobs:
            lines.append(f"  invalidates: {', '.join(finding.jobs)}")
    verdict = f"{len(findings)} mismatch(es)" if findings else "everything recorded holds"
    lines.append(f"{output_id}: {verdict}")
    return "\n".join(lines) + "\n"
