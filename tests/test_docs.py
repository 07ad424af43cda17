"""The documentation: every command it shows runs as written, and no number of a toy run is typed by hand.

README.md and docs/*.md show commands in ```bash blocks. Each is checked by what it calls:
``python -m workflow_scripts`` commands are parsed by the product's own parser, ``snakemake``
commands by Snakemake's (their profiles must exist, and one dry run per profile must accept
every target shown), ``bash tests/...`` scripts must exist and pass ``bash -n``. A command of
any other kind fails until this file learns to check it.

A toy run's numbers (job counts, minutes, accuracies) change with every change of the code, so
docs/toy.md shows them only in a block that ``report docs-numbers`` writes from the run's own
outputs; README.md and docs/toy.md may carry none outside it.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.dag import PAPER, TOY, dry_run
from workflow_scripts import records
from workflow_scripts.cli import build_parser
from workflow_scripts.cli import main as cli_main
from workflow_scripts.report import docs_numbers
from workflow_scripts.report.render import render
from workflow_scripts.report.table import Table

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
OPERATORS = {"&&", "||", ";", "|", "&"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# The profiles a shown snakemake command may name, and the dry run that stands for each here
# (the paper profile's conda is swapped for env-modules, which a dry run does not load).
DRY_RUN_PROFILES = {
    "profiles/local": TOY,
    "profiles/claims": ["--profile", "profiles/claims"],
    "slurm": PAPER,
    "profiles/slurm": PAPER,
}

# Numbers about a run: decimals with two or more digits, percentages, counts of jobs and durations.
RUN_NUMBER = re.compile(
    r"\d+\.\d{2,}"
    r"|\d+(?:\.\d+)?\s?%"
    r"|\b\d[\d,]*(?:\.\d+)?\s*(?:jobs?|minutes?|min|hours?|seconds?)\b"
)
# Numbers that match but are no result of a run, each as the exact phrase the pages use.
ALLOWED_NUMBERS = ("Python 3.11", "Python 3.12", "`python3.12`")
NO_TYPED_NUMBERS = (ROOT / "README.md", ROOT / "docs" / "toy.md")


# ---------------------------------------------------------------- the commands shown


def _simple_commands(line: str) -> Iterator[list[str]]:
    """The simple commands of one shell line: split at ``&&``, ``;``, ``|``; comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    command: list[str] = []
    for token in lexer:
        if token in OPERATORS:
            if command:
                yield command
            command = []
        else:
            command.append(token)
    if command:
        yield command


def shown_commands() -> list[tuple[str, list[str]]]:
    """Every simple command of every ```bash block, with the page it is on."""
    found = []
    for page in PAGES:
        for block in BASH_BLOCK.findall(page.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                found += [(page.name, command) for command in _simple_commands(line)]
    return found


def _workflow_scripts_error(argv: list[str]) -> str | None:
    """What ``python -m workflow_scripts`` says of ``argv`` without running it; None if it parses."""
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exit_:
            return (errors.getvalue() or f"exit {exit_.code}") if exit_.code else None
    return None


def _snakemake_arguments(argv: list[str]):
    from snakemake.cli import get_argument_parser

    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        try:
            return get_argument_parser().parse_args(argv)
        except SystemExit:
            raise AssertionError(f"snakemake {shlex.join(argv)}: {errors.getvalue()}") from None


def check_command(command: list[str], snakemake_targets: dict[str, set[str]]) -> None:
    """Fail unless ``command`` runs as shown; collect snakemake targets per profile for a dry run."""
    while command and ASSIGNMENT.match(command[0]):
        command = command[1:]
    shown = shlex.join(command)
    name, args = command[0], command[1:]
    if name == "srun":  # srun's own options, then the command it runs
        while args and args[0].startswith("-"):
            args = args[1:]
        check_command(args, snakemake_targets)
    elif name == "python3" and args[:2] == ["-m", "venv"] or name in (".", "source"):
        assert name == "python3" or args == [".venv/bin/activate"], shown
    elif name == "pip":
        assert args[0] == "install", shown
        requirements = [args[i + 1] for i, arg in enumerate(args) if arg == "-r"]
        assert all((ROOT / path).is_file() for path in requirements), shown
    elif name == "python" and args[:2] == ["-m", "pytest"]:
        pass
    elif name == "python" and args[:2] == ["-m", "workflow_scripts"]:
        error = _workflow_scripts_error(args[2:])
        assert error is None, f"{shown}: {error}"
    elif name == "python" and args[0].startswith("benchmarks/"):
        script = ROOT / args[0]
        assert script.is_file(), shown
        assert all(option in script.read_text() for option in args[1:] if option.startswith("--")), shown
    elif name == "snakemake":
        parsed = _snakemake_arguments(args)
        profiles = parsed.profile or []
        assert profiles, f"{shown}: names no profile"
        for profile in profiles:
            assert (ROOT / profile).is_dir(), f"{shown}: no profile folder {profile}"
        assert profiles[0] in DRY_RUN_PROFILES, f"{shown}: no dry run known for profile {profiles[0]}"
        # No target is rule all, whose whole DAG the dry runs of tests/test_dag.py build; a named
        # target is dry-run here, one Snakemake call per profile for all the pages' targets.
        assert parsed.targets or "\nrule all:" in (ROOT / "Snakefile").read_text(), shown
        snakemake_targets.setdefault(profiles[0], set()).update(parsed.targets or ())
    elif name == "bash":
        script = ROOT / args[0]
        assert script.is_file(), shown
        syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert syntax.returncode == 0, f"{shown}: {syntax.stderr}"
    elif name == "module" and args[0] == "use":
        assert Path(args[1].replace("$PWD", str(ROOT))).is_dir(), shown
    else:
        raise AssertionError(f"{shown}: no check for this kind of command (tests/test_docs.py)")


@pytest.mark.slow
def test_every_shown_command_runs_as_written():
    targets: dict[str, set[str]] = {}
    commands = shown_commands()
    for page, command in commands:
        try:
            check_command(command, targets)
        except AssertionError as error:
            raise AssertionError(f"{page}: {error}") from None
    assert {command[0] for _, command in commands} >= {"snakemake", "python", "bash"}
    for profile, shown in sorted(targets.items()):
        if shown:  # an unknown target fails the dry run (nothing to do, after a run, passes)
            dry_run(DRY_RUN_PROFILES[profile], *sorted(shown))


CODE_SPAN = re.compile(r"```[^\n]*\n(.*?)^```|`([^`\n]+)`", re.MULTILINE | re.DOTALL)
ENTRY_POINT = ["python", "-m", "workflow_scripts"]


def quoted_workflow_scripts_commands(text: str) -> list[list[str]]:
    """Every ``python -m workflow_scripts`` command in ``text``'s fenced blocks and inline code."""
    found = []
    for block, span in CODE_SPAN.findall(text):
        for line in (block or span).replace("\\\n", " ").splitlines():
            for command in _simple_commands(line):
                if command[:3] == ENTRY_POINT:
                    found.append(command)
    return found


def test_every_workflow_scripts_command_the_operating_manual_quotes_parses():
    commands = quoted_workflow_scripts_commands((ROOT / "docs" / "operating.md").read_text())
    assert {"status", "plan", "provenance"} <= {command[3] for command in commands}
    for command in commands:
        error = _workflow_scripts_error(command[3:])
        assert error is None, f"docs/operating.md: {shlex.join(command)}: {error}"


def test_a_quoted_command_that_does_not_parse_is_found():
    text = (
        "Run `python -m workflow_scripts status --nodes 3`\n```text\npython -m workflow_scripts plan\n```\n"
    )
    commands = quoted_workflow_scripts_commands(text)
    assert [command[3:] for command in commands] == [["status", "--nodes", "3"], ["plan"]]
    assert all(_workflow_scripts_error(command[3:]) for command in commands)


@pytest.mark.slow
def test_an_unknown_command_or_option_fails():
    with pytest.raises(AssertionError, match="no check"):
        check_command(["make", "all"], {})
    with pytest.raises(AssertionError, match="docs-numbers"):
        check_command(["python", "-m", "workflow_scripts", "report", "docs-numbers", "--result", "x"], {})
    with pytest.raises(AssertionError, match="no profile folder"):
        check_command(["snakemake", "--profile", "profiles/nowhere"], {})
    with pytest.raises(AssertionError):
        check_command(["bash", "tests/run_nothing.sh"], {})


def test_the_readme_test_command_is_the_one_ci_runs():
    readme_lines = "\n".join(BASH_BLOCK.findall((ROOT / "README.md").read_text())).splitlines()
    ci_command = (ROOT / ".ci" / "run").read_text().rstrip("\n").splitlines()[-1]
    assert ci_command in readme_lines


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_pages_resolve_and_every_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(((?:docs/)?[\w\-]+\.md)(?:#([\w\-]+))?\)", page.read_text()):
            linked = (page.parent / target).resolve()
            assert linked.is_file(), f"{page.name}: link to {target}"
            if anchor:
                headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.MULTILINE)
                assert anchor in {_slug(heading) for heading in headings}, f"{page.name}: {target}#{anchor}"
    for page in PAGES[1:]:
        assert f"](docs/{page.name})" in readme, f"README.md does not link docs/{page.name}"


CODE_PATH = re.compile(r"`([\w.\-]+/[\w./\-]*)`")
# Paths the pages name that are no files of the checkout: what a run writes, and placeholders.
NOT_CHECKOUT = ("results/", "logs/", ".venv", "/", "~")


def named_paths_missing(text: str) -> list[str]:
    """Paths in backticks that exist neither in the checkout nor below ``workflow_scripts/``."""
    missing = []
    for path in sorted(set(CODE_PATH.findall(text))):
        if any(mark in path for mark in ("{", "*", "<", "...", "tableN")) or path.startswith(NOT_CHECKOUT):
            continue
        if not ((ROOT / path).exists() or (ROOT / "workflow_scripts" / path).exists()):
            missing.append(path)
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_file_a_page_names_exists(page):
    assert named_paths_missing(page.read_text()) == []


# Checkout paths as config files, profiles and environment files name them in comments and values.
CHECKOUT_PATH = re.compile(
    r"(?<![\w/.])((?:docs|envs|rules|workflow_scripts|tests|profiles|reference|benchmarks)/[\w./\-]*\w)"
)
CONFIGURATION = sorted(
    [
        ROOT / "config.yaml",
        *ROOT.glob("profiles/*/*.yaml"),
        *(p for p in (ROOT / "envs").rglob("*") if p.is_file()),
    ]
)


@pytest.mark.parametrize("file", CONFIGURATION, ids=lambda file: str(file.relative_to(ROOT)))
def test_every_checkout_path_a_configuration_file_names_exists(file):
    named = set(CHECKOUT_PATH.findall(file.read_text()))
    placeholders = {path for path in named if any(mark in path for mark in ("{", "*", "<"))}
    built = {
        path for path in named if path.endswith(".sif")
    }  # the image a user builds from envs/megatron.def
    missing = sorted(path for path in named - placeholders - built if not (ROOT / path).exists())
    assert missing == [], f"{file.relative_to(ROOT)} names {missing}"


def test_a_moved_file_is_found():
    text = "`workflow_scripts/evaluate/aggregate_old.py`, `routing/core.py`, `results/tables/x.md`"
    assert named_paths_missing(text) == ["workflow_scripts/evaluate/aggregate_old.py"]


# ---------------------------------------------------------------- no typed numbers of a toy run


def typed_run_numbers(text: str) -> list[str]:
    """Numbers about a run in ``text`` outside its generated block (allowed phrases aside)."""
    if docs_numbers.BEGIN in text:
        head, rest = text.split(docs_numbers.BEGIN, 1)
        text = head + rest.split(docs_numbers.END, 1)[1]
    text = re.sub(r"\s+", " ", text)  # a phrase may break across lines
    for phrase in ALLOWED_NUMBERS:
        text = text.replace(phrase, "")
    return RUN_NUMBER.findall(text)


@pytest.mark.parametrize("page", NO_TYPED_NUMBERS, ids=lambda page: page.name)
def test_no_toy_run_number_is_typed_by_hand(page):
    assert typed_run_numbers(page.read_text()) == []


def test_typed_numbers_are_found_outside_the_block_only():
    typed = "513 jobs in 12.8 minutes; sharpness 0.467, HumanEval 62.5 %, 90 min, 1,200 jobs"
    assert typed_run_numbers(typed) == ["513 jobs", "12.8 minutes", "0.467", "62.5 %", "90 min", "1,200 jobs"]
    generated = f"before\n{docs_numbers.BEGIN}\n{typed}\n{docs_numbers.END}\nafter 4 epochs, 32 steps"
    assert typed_run_numbers(generated) == []
    assert typed_run_numbers("on Python 3.11") == []


def test_toy_page_has_one_generated_block():
    text = (ROOT / "docs" / "toy.md").read_text()
    assert text.count(docs_numbers.BEGIN) == text.count(docs_numbers.END) == 1
    assert docs_numbers.COMMAND in text


# ---------------------------------------------------------------- the generator


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _table_md(table_id: str, title: str) -> str:
    """A table's Markdown as the report renders it at toy scale."""
    rows = pd.DataFrame(
        {
            "condition": ["sft", "rpb"],
            "overall9": [11.25, 20.125],
            "overall9_sd": [float("nan"), 0.5],
            "overall9_n": [1, 3],
        }
    )
    return render(Table(table_id, title, ("condition",), ("overall9",), rows), None, "toy")["md"]


def _record(command: str, started: str, seconds: float) -> dict:
    record = records.build_record(command, {}, {}, {}, started, seconds)
    record["code"] = {"package_version": "0.1.0", "git_commit": COMMIT, "git_dirty": False}
    return record


def fake_toy_run(results: Path) -> None:
    """Two tables and two manifests sharing one training record, as a finished toy run leaves them."""
    tables = results / "tables"
    tables.mkdir(parents=True)
    (tables / "appendix_d2.md").write_text(_table_md("appendix_d2", "Base routing sharpness"))
    (tables / "table3.md").write_text(_table_md("table3", "Four anchoring objectives"))
    shared = {
        "results/checkpoints/moonlight/math20k/rpb/s42.provenance.json": _record(
            "train run", "2026-01-01T10:00:00+00:00", 60
        )
    }
    table3 = {
        **shared,
        "results/checkpoints/moonlight/math20k/sft/s42.provenance.json": _record(
            "train run", "2026-01-01T10:01:00+00:00", 60
        ),
        "results/evals/moonlight/math20k/rpb/s42/provenance.json": _record(
            "evaluate generate", "2026-01-01T10:02:00+00:00", 30
        ),
        "results/benchmarks/gsm8k/manifest.json": {"repo": "openai/gsm8k", "revision_resolved": "abc"},
    }
    appendix = {
        **shared,
        "results/probes/moonlight/math20k/base/provenance.json": _record(
            "probe routes", "2026-01-01T10:05:00+00:00", 120
        ),
    }
    code = {"package_version": "0.1.0", "git_commit": COMMIT, "git_dirty": False}
    (results / "provenance").mkdir()
    for output, upstream in (("table3", table3), ("appendix_d2", appendix)):
        manifest = {"output": output, "config": {"scale": "toy"}, "upstream": upstream, "code": code}
        (results / "provenance" / f"{output}.json").write_text(json.dumps(manifest))


PAGE = (
    f"# Toy\n\nBefore the block.\n\n{docs_numbers.BEGIN}\nNot yet generated.\n{docs_numbers.END}\n\nAfter.\n"
)


def _generate(results: Path, page: Path) -> int:
    return cli_main(["report", "docs-numbers", "--results", str(results), "--docs", str(page)])


def test_generator_writes_the_runs_numbers_between_the_markers(tmp_path):
    results, page = tmp_path / "results", tmp_path / "toy.md"
    fake_toy_run(results)
    page.write_text(PAGE)
    assert _generate(results, page) == 0
    text = page.read_text()
    assert text.startswith("# Toy\n\nBefore the block.\n\n") and text.endswith("\n\nAfter.\n")
    block = text.split(docs_numbers.BEGIN)[1].split(docs_numbers.END)[0]
    assert "Not yet generated" not in block
    assert f"- Commit: `{COMMIT}`, recorded by every job of the run." in block
    # The shared training counts once; the hub manifest is no job.
    assert "- Jobs: 4 jobs left a provenance record (2 trainings, 1 evaluation, 1 probe)" in block
    assert "7.0 minutes from the first job's start to the last job's end" in block
    assert (
        "### appendix_d2: Base routing sharpness" in block
        and "### table3: Four anchoring objectives" in block
    )
    assert "| rpb | 20.12 ± 0.50 |" in block
    assert "claims.md`: not in this run." in block and "gates.md`: not in this run." in block
    assert block.index("appendix_d2") < block.index("gates") < block.index("table3") < block.index("claims")


def test_generator_is_idempotent(tmp_path):
    results, page = tmp_path / "results", tmp_path / "toy.md"
    fake_toy_run(results)
    page.write_text(PAGE)
    assert _generate(results, page) == 0
    first = page.read_text()
    assert _generate(results, page) == 0
    assert page.read_text() == first


def test_generator_names_the_checkout_when_the_run_recorded_no_commit(tmp_path):
    results, page = tmp_path / "results", tmp_path / "toy.md"
    fake_toy_run(results)
    for manifest in (results / "provenance").iterdir():
        manifest.unlink()
    page.write_text(PAGE)
    assert _generate(results, page) == 0
    head = records.code_version()["git_commit"]
    assert f"checkout's at generation time (`git rev-parse HEAD`), `{head}`" in page.read_text()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda page, results: page.write_text("# no markers\n"), "needs exactly one"),
        (lambda page, results: page.write_text(PAGE + PAGE), "needs exactly one"),
        (lambda page, results: _rescale(results, "paper"), "scale 'paper'"),
        (lambda page, results: _empty(results), "no toy run's tables or manifests"),
    ],
)
def test_generator_refuses_what_it_cannot_fill(tmp_path, capsys, edit, message):
    results, page = tmp_path / "results", tmp_path / "toy.md"
    fake_toy_run(results)
    page.write_text(PAGE)
    edit(page, results)
    before = page.read_text()
    assert _generate(results, page) == 2
    assert message in capsys.readouterr().err
    assert page.read_text() == before


def _rescale(results: Path, scale: str) -> None:
    path = results / "provenance" / "table3.json"
    manifest = json.loads(path.read_text())
    manifest["config"]["scale"] = scale
    path.write_text(json.dumps(manifest))


def _empty(results: Path) -> None:
    for folder in ("tables", "provenance"):
        for path in (results / folder).iterdir():
            path.unlink()


def test_summary_counts_jobs_once_and_names_every_commit():
    def job(command: str, commit: str, dirty: bool) -> dict:
        return {"command": command, "code": {"git_commit": commit, "git_dirty": dirty}}

    shared = {"a/provenance.json": job("train run", "aaa", False)}
    manifests = [
        {"upstream": {**shared, "b/provenance.json": job("probe routes", "aaa", False)}},
        {
            "upstream": {
                **shared,
                "c/provenance.json": job("evaluate generate", "bbb", True),
                "hub": {"repo": "x"},
            }
        },
    ]
    summary = docs_numbers.summarize(manifests)
    assert (summary.jobs, dict(summary.kinds)) == (3, {"trainings": 1, "evaluations": 1, "probes": 1})
    assert summary.wall_seconds is None
    lines = docs_numbers.provenance_lines(summary, ("head", False))
    assert lines == [
        "- Commit: the run's jobs recorded 2 commits: `aaa` (2 jobs), "
        "`bbb` (1 job, 1 with uncommitted changes).",
        "- Jobs: 3 jobs left a provenance record (1 training, 1 evaluation, 1 probe).",
    ]
