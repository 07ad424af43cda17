"""Static checks that are part of the test command: ruff and the Snakemake linter."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.dag import ROOT


def test_ruff_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is pinned in envs/requirements-local.txt"
    done = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_snakemake_lint_clean():
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "--profile", "profiles/local"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
