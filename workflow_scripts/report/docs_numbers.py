"""The generated block of a docs page: a finished toy run's numbers, taken from the run's own outputs.

    python -m workflow_scripts report docs-numbers --results results --docs docs/toy.md

Rewrites the part of the page between ``BEGIN`` and ``END`` (the markers stay) from the tables
the run rendered and the provenance manifests it wrote, and names the commit its jobs recorded,
so that no number about a run is typed by hand. Not a rule of the workflow: it runs after one,
and writes into the checkout's documentation.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import write_text
from workflow_scripts.commands import add_command
from workflow_scripts.errors import UserInputError

BEGIN = "<!-- generated: toy-run -->"
END = "<!-- end generated -->"
COMMAND = "python -m workflow_scripts report docs-numbers --results results --docs docs/toy.md"
#: The tables the block shows, in this order: Appendix D.2's base routers, the toy's sanity gates,
#: Table 3's Overall@9, the claims.
TABLES = ("appendix_d2", "gates", "table3", "claims")
#: The commands whose jobs the block counts, by what the reader calls them.
JOB_KINDS = {
    "trainings": ("train run", "train megatron"),
    "evaluations": ("evaluate generate",),
    "probes": ("probe routes",),
}


@dataclass(frozen=True)
class CommitCount:
    """One git commit of a run's jobs: how many ran at it, and how many of those from a dirty checkout."""

    commit: str | None  # None: the job ran outside a git checkout
    jobs: int
    dirty_jobs: int


@dataclass(frozen=True)
class RunSummary:
    """What a run's provenance records say about it as a whole."""

    jobs: int  # job records in the manifests' chains, each counted once
    kinds: Mapping[str, int]  # JOB_KINDS name -> jobs of those commands
    commits: tuple[CommitCount, ...]  # the git commits the jobs recorded, most jobs first
    wall_seconds: float | None  # first recorded start to last recorded end; None without timings


def job_records(manifests: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The job records upstream of the manifests, each once; hub download manifests are left out.

    A manifest keys each upstream record by where it lies, so a job several outputs share
    appears once.
    """
    records: dict[str, Mapping[str, Any]] = {}
    for manifest in manifests:
        for where, record in manifest.get("upstream", {}).items():
            if "command" in record:
                records.setdefault(where, record)
    return records


def count_commits(records: Iterable[Mapping[str, Any]]) -> tuple[CommitCount, ...]:
    """The commits the records name (``code.git_commit``, ``code.git_dirty``), most jobs first."""
    jobs: dict[str | None, list[bool]] = {}
    for record in records:
        if code := record.get("code"):
            jobs.setdefault(code.get("git_commit"), []).append(bool(code.get("git_dirty")))
    counts = (CommitCount(commit, len(dirty), sum(dirty)) for commit, dirty in jobs.items())
    return tuple(sorted(counts, key=lambda count: (-count.jobs, str(count.commit))))


def summarize(manifests: Sequence[Mapping[str, Any]]) -> RunSummary:
    """Job counts, commits and wall time of the run behind ``manifests``."""
    records = job_records(manifests)
    kinds = {
        kind: sum(record["command"] in commands for record in records.values())
        for kind, commands in JOB_KINDS.items()
    }
    commits = count_commits(records.values()) or count_commits(manifests)
    starts, ends = [], []
    for record in records.values():
        if record.get("started_utc") and record.get("wall_seconds") is not None:
            start = datetime.fromisoformat(record["started_utc"])
            starts.append(start)
            ends.append(start + timedelta(seconds=record["wall_seconds"]))
    wall = (max(ends) - min(starts)).total_seconds() if starts else None
    return RunSummary(len(records), kinds, commits, wall)


def _describe_commit(commit: str | None, dirty: bool | None = None) -> str:
    text = f"`{commit}`" if commit else "no commit (outside a git checkout)"
    return text + (" with uncommitted changes" if dirty else "")


def _count(count: int, kind: str) -> str:
    return f"{count} {kind[:-1] if count == 1 else kind}"


def _commit_line(commits: Sequence[CommitCount]) -> str:
    if len(commits) == 1:
        (only,) = commits
        every = "recorded by every job of the run"
        if only.dirty_jobs in (0, only.jobs):
            return f"- Commit: {_describe_commit(only.commit, only.dirty_jobs > 0)}, {every}."
        dirty = f"{only.dirty_jobs} of {only.jobs} jobs ran with uncommitted changes"
        return f"- Commit: {_describe_commit(only.commit)}, {every}; {dirty}."
    each = []
    for count in commits:
        dirty = f", {count.dirty_jobs} with uncommitted changes" if count.dirty_jobs else ""
        each.append(f"{_describe_commit(count.commit)} ({_count(count.jobs, 'jobs')}{dirty})")
    return f"- Commit: the run's jobs recorded {len(commits)} commits: {', '.join(each)}."


def provenance_lines(summary: RunSummary | None, head: tuple[str | None, bool | None]) -> list[str]:
    """Which code made the run, and what it comprised; ``head`` (commit, dirty) is the checkout now."""
    if summary is None or not summary.commits:
        return [
            "- Commit: the run's outputs record none, so this is the checkout's at generation time "
            f"(`git rev-parse HEAD`), {_describe_commit(*head)}."
        ]
    kinds = ", ".join(_count(count, kind) for kind, count in summary.kinds.items())
    line = f"- Jobs: {_count(summary.jobs, 'jobs')} left a provenance record ({kinds})"
    if summary.wall_seconds is not None:
        line += f"; {summary.wall_seconds / 60:.1f} minutes from the first job's start to the last job's end"
    return [_commit_line(summary.commits), line + "."]


def table_section(path: str, markdown: str | None) -> list[str]:
    """A rendered table's Markdown, its headings one level down, or a line saying the run lacks it."""
    if markdown is None:
        return [f"`{path}`: not in this run.", ""]
    lines = [f"#{line}" if line.startswith("#") else line for line in markdown.rstrip("\n").split("\n")]
    return [*lines, "", f"(`{path}`)", ""]


def render_block(
    summary: RunSummary | None,
    head: tuple[str | None, bool | None],
    tables: Sequence[tuple[str, str | None]],
) -> str:
    """The block's text between the markers: provenance lines, then each ``(path, markdown)`` table."""
    lines = [
        f"Generated from the run's own outputs by `{COMMAND}`; do not edit by hand.",
        "",
        *provenance_lines(summary, head),
        "",
    ]
    for path, markdown in tables:
        lines += table_section(path, markdown)
    return "\n".join(lines).rstrip("\n") + "\n"


def replace_block(page: str, block: str, name: str) -> str:
    """``page`` with the text between its one ``BEGIN`` and ``END`` marker replaced by ``block``."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise UserInputError(f"{name}: needs exactly one {BEGIN} followed by one {END}")
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{block}{END}{tail}"


def _read_manifests(results: Path) -> list[dict[str, Any]]:
    from workflow_scripts.layout import manifest_path

    pattern = manifest_path(results, "*")
    manifests = []
    for path in sorted(pattern.parent.glob(pattern.name)):
        try:
            manifest = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise UserInputError(f"{path}: not a readable manifest ({error})") from error
        scale = manifest.get("config", {}).get("scale")
        if scale != "toy":
            raise UserInputError(f"{path}: a run at scale {scale!r}; this block shows a toy run's numbers")
        manifests.append(manifest)
    return manifests


def run(args: argparse.Namespace) -> None:
    """Rewrite the page's generated block from the run under ``--results``."""
    from workflow_scripts.layout import result_path
    from workflow_scripts.records import code_version

    results, page = Path(args.results), Path(args.docs)
    manifests = _read_manifests(results)
    tables = []
    for table_id in TABLES:
        path = Path(f"{result_path(results, 'table', table=table_id)}.md")
        tables.append((str(path), path.read_text() if path.is_file() else None))
    if not manifests and all(markdown is None for _, markdown in tables):
        raise UserInputError(
            f"{results}: no toy run's tables or manifests; run snakemake --profile profiles/local"
        )
    code = code_version()
    head = (code["git_commit"], code["git_dirty"])
    block = render_block(summarize(manifests) if manifests else None, head, tables)
    try:
        text = page.read_text()
    except OSError as error:
        raise UserInputError(f"--docs {page}: {error}") from error
    updated = replace_block(text, block, str(page))
    if updated != text:
        write_text(page, updated)


def add_docs_numbers(commands: argparse._SubParsersAction) -> None:
    """Register ``report docs-numbers``."""
    parser = add_command(
        commands,
        "docs-numbers",
        run,
        "rewrite a docs page's generated block from a finished toy run's tables and provenance records",
        outputs=("docs",),
    )
    parser.add_argument(
        "--results", required=True, help="results root of the finished toy run (its tables and provenance/)"
    )
    parser.add_argument(
        "--docs", required=True, help=f"the page to rewrite between its {BEGIN} and {END} markers"
    )
