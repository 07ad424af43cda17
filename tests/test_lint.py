"""Static checks that are part of the test command: ruff and the Snakemake linter."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.dag import ROOT, TOY, snakemake


def test_ruff_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is pinned in envs/requirements-local.txt"
    done = subprocess.run([ruff, "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.slow
def test_snakemake_lint_clean():
    done = snakemake(ROOT, "--lint", *TOY, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
