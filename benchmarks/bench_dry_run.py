"""Benchmark: a dry run of every paper table and figure at paper scale (goal <= 5 s).

The dry run selects the local training backend (``training.backend=hf``) so the
DAG holds every training, probe and evaluation job, as it will once the cluster
backend's rules exist. Prints the best of five wall times
(the minimum, as timeit advises: on a shared or virtual machine the clock
speed can vary by a third between runs) and the job count.

    python benchmarks/bench_dry_run.py
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [
    sys.executable, "-m", "snakemake", "--dry-run", "--profile", "profiles/slurm", "--sdm", "env-modules",
    "--config", "training={backend: hf}",
]  # fmt: skip


def main() -> None:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        done = subprocess.run(COMMAND, cwd=ROOT, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            sys.exit(done.stderr[-3000:])
    total = re.search(r"^total\s+(\d+)$", done.stdout, re.MULTILINE)
    jobs = total.group(1) if total else "?"
    best = min(times)
    print(f"paper-scale dry run of all: {jobs} jobs in {best:.2f} s (best of {len(times)}; goal <= 5 s)")


if __name__ == "__main__":
    main()
