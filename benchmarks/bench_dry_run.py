"""Benchmark: the workflow's own overhead in a paper-scale dry run of every table and figure.

The dry run selects the local training backend (``training.backend=hf``) so the DAG holds
every training, probe and evaluation job. Its wall time is set against a bare Snakefile with
the same number of jobs and the same profile (one rule fanned out, no input functions, no
registry), timed in
alternating pairs so that a machine's changing clock speed hits both alike. Prints the median
ratio over the pairs (goal <= 1.5) and both median times.

    python benchmarks/bench_dry_run.py [--pairs 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = [
    sys.executable, "-m", "snakemake", "--dry-run", "--profile", "profiles/slurm", "--sdm", "env-modules",
    "--config", "training={backend: hf}",
]  # fmt: skip
#: The same number of jobs with nothing of the workflow's own: ``all`` plus one rule fanned out.
BARE = """
rule all:
    input: expand("out/{i}.txt", i=range(int(config["jobs"]) - 1))

rule make:
    output: "out/{i}.txt"
    shell: "touch {output}"
"""


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    return elapsed, done.stdout


def job_count(stdout: str) -> int:
    total = re.search(r"^total\s+(\d+)$", stdout, re.MULTILINE)
    if not total:
        sys.exit("no job count in the dry run's summary")
    return int(total.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    _, stdout = timed(WORKFLOW, ROOT)  # warm-up, and the job count the bare Snakefile copies
    jobs = job_count(stdout)
    with tempfile.TemporaryDirectory() as scratch:
        bare_file = Path(scratch) / "Snakefile"
        bare_file.write_text(BARE)
        bare = [
            sys.executable,
            "-m",
            "snakemake",
            "--dry-run",
            "-s",
            str(bare_file),
            *("--profile", str(ROOT / "profiles" / "slurm"), "--sdm", "env-modules"),  # as the workflow's
            "--config",
            f"jobs={jobs}",
        ]
        bare_time, bare_stdout = timed(bare, Path(scratch))
        if job_count(bare_stdout) != jobs:
            sys.exit(f"the bare Snakefile planned {job_count(bare_stdout)} jobs, not {jobs}")
        pairs = []
        for _ in range(args.pairs):
            workflow_time, _ = timed(WORKFLOW, ROOT)
            bare_time, _ = timed(bare, Path(scratch))
            pairs.append((workflow_time, bare_time))
    ratio = statistics.median(w / b for w, b in pairs)
    print(
        f"paper-scale dry run of all: {jobs} jobs, {statistics.median(w for w, _ in pairs):.2f} s against "
        f"{statistics.median(b for _, b in pairs):.2f} s for a bare Snakefile with as many jobs: "
        f"{ratio:.2f}x (median of {args.pairs} alternating pairs; goal <= 1.5x)"
    )


if __name__ == "__main__":
    main()
