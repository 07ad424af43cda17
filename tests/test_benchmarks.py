"""Every benchmark script runs from a fresh copy of the checkout, in its cheapest mode.

A benchmark nobody can start measures nothing: ``bench_toy_default.py`` once stopped at once
copying the tracked ``slurm`` link. These runs check that each script starts, runs its real path
at a small size and prints its ratio or timing line; the numbers themselves are not judged here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.dag import JOB_ENV, copy_checkout

pytestmark = pytest.mark.slow

#: script: (its cheapest arguments, a line it prints when it has run to the end)
CHEAPEST = {
    "bench_coactivation.py": (["--rounds", "1", "--tokens", "200"], "against the per-token loop of eq. (1)"),
    "bench_dry_run.py": (["--pairs", "1"], "for a bare Snakefile with as many jobs"),
    "bench_null_model.py": (["--samples", "2"], "wall time: median"),
    "bench_prior_pass.py": (["--rows", "8", "--repeats", "1"], "architectures meet the goal"),
    "bench_sandbox.py": (["--programs", "4", "--workers", "1", "2"], "2 worker(s)"),
    "bench_scoring.py": (["--rows", "2000", "--loop-rows", "200", "--repeats", "1"], "ratio"),
    "bench_toy_default.py": (["results/raw/glm51/Math.parquet"], "toy default: 1 jobs"),
    "bench_train_step.py": (["--rows", "8", "--steps", "1", "--repeats", "1"], "ms/step (ratio to sft)"),
}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The working tree's files in a git repository of their own, as a clone has them."""
    clone = copy_checkout(tmp_path_factory.mktemp("clone"))
    subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
    return clone


def test_every_benchmark_is_listed():
    scripts = {path.name for path in (Path(__file__).parents[1] / "benchmarks").glob("bench_*.py")}
    assert scripts == set(CHEAPEST)


@pytest.mark.parametrize("script", sorted(CHEAPEST))
def test_a_benchmark_runs_from_a_copy_of_the_checkout(checkout, script):
    arguments, printed = CHEAPEST[script]
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *arguments],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=900,
        env=JOB_ENV,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert printed in done.stdout, done.stdout[-2000:]
