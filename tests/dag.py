"""Dry-run helpers: the jobs Snakemake would run, as (rule, wildcards) pairs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# The paper profile as users name it (``slurm``, found from the repository root). It deploys
# per-rule conda environments, which Snakemake checks even in a dry run; this machine has no
# conda, so tests take the no-conda method (env-modules), which a dry run does not load.
PAPER = ["--profile", "slurm", "--sdm", "env-modules"]
TOY = ["--profile", "profiles/local"]
# Where a test's subject is not the toy base, a few pretraining steps on a small corpus keep it short.
SHORT_BASE = {
    "toy_base": {"steps": 4, "warmup_steps": 1, "corpus_rows": {"main": 200, "Math": 100}, "report_rows": 10}
}
OVERLAY = "test_overlay.yaml"
# Jobs call ``python``: the interpreter running the tests comes first on their PATH.
JOB_ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
_JOB = re.compile(r"^(?:local)?rule (\w+):\n((?:    .*\n)*)", re.MULTILINE)


def dry_run(profile: list[str], *targets: str, cwd: Path = ROOT) -> list[tuple[str, dict[str, str]]]:
    """Jobs of ``snakemake -n`` for ``targets`` (all when none) under ``profile``."""
    command = [sys.executable, "-m", "snakemake", *targets, "--dry-run", *profile]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    jobs = []
    for rule, body in _JOB.findall(done.stdout):
        found = re.search(r"wildcards: (.*)", body)
        pairs = found.group(1).split(", ") if found else []
        jobs.append((rule, dict(pair.split("=", 1) for pair in pairs)))
    return jobs


def printed_job(target: str, rule: str, *extra: str) -> tuple[str, str]:
    """The paper-scale dry run of ``target`` with commands printed: ``rule``'s resources and shell command.

    ``extra``: more Snakemake arguments, e.g. ``--configfiles`` with an overlay.
    """
    command = [sys.executable, "-m", "snakemake", target, "-n", "-p", *PAPER, *extra]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    job = done.stdout[done.stdout.index(f"rule {rule}:") :]
    return re.search(r"resources: (.*)", job).group(1), job[job.index("Shell command:") :].splitlines()[0]


def wildcard_values(jobs: list[tuple[str, dict[str, str]]], rule: str, key: str) -> list[str]:
    return sorted(wildcards[key] for name, wildcards in jobs if name == rule)


def copy_checkout(destination: Path) -> Path:
    """The checkout as git sees it (tracked and untracked-but-not-ignored files), without results."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in sorted({os.fsdecode(entry) for entry in listed.split(b"\0") if entry}):
        source = ROOT / name
        if not (source.exists() or source.is_symlink()):
            continue  # deleted in the working tree, not yet in the index
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    return destination


def overlay_configfiles(workdir: Path, overlay: dict) -> list[str]:
    """``--configfiles``: the toy overlay, then ``overlay`` written as a last config file in ``workdir``."""
    (workdir / OVERLAY).write_text(yaml.safe_dump(overlay))
    return ["--configfiles", "profiles/local/toy.yaml", OVERLAY]


def with_overlay(workdir: Path, overlay: dict) -> list[str]:
    """The toy profile plus ``overlay`` as a last config file in ``workdir``."""
    return [*TOY, *overlay_configfiles(workdir, overlay)]
