"""Benchmark: the toy default end to end, and the share of its wall time spent outside jobs.

Runs ``snakemake --profile profiles/local`` in a scratch copy of the working tree
(or, with ``--log``, reads the log of a run already made), then parses Snakemake's
log: each job's start and finish timestamps and its thread count. Jobs' busy
core-seconds over (cores x wall time) is the share spent in jobs; the rest is
Snakemake scheduling, process start-up and I/O between jobs (goal <= 20%).
Per rule it prints jobs, mean seconds and the share of busy time.

    python benchmarks/bench_toy_default.py                    # fresh run (minutes)
    python benchmarks/bench_toy_default.py --no-fork-server   # each job in its own interpreter
    python benchmarks/bench_toy_default.py --log run.log      # an existing run's log

Comparing a run with and without the fork server (``fork_server`` in the toy overlay)
measures what interpreter start-up costs: without it each torch job first spends
seconds importing torch and transformers, which this log counts as time in jobs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.dag import copy_checkout  # noqa: E402

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
START = re.compile(r"^(?:local)?rule (\w+):$")
JOBID = re.compile(r"^    jobid: (\d+)$")
THREADS = re.compile(r"^    threads: (\d+)$")
FINISH = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def parse(log: str) -> tuple[dict[str, list[tuple[float, int]]], float]:
    """Per rule the (seconds, threads) of each finished job, and the run's wall seconds."""
    stamp = None
    first = last = None
    started: dict[str, tuple[datetime, str]] = {}
    threads: dict[str, int] = {}
    pending_rule = None
    jobs: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for line in log.splitlines():
        if found := STAMP.match(line):
            stamp = datetime.strptime(found.group(1), "%a %b %d %H:%M:%S %Y")
            first = first or stamp
            last = stamp
        elif found := START.match(line):
            pending_rule = found.group(1)
        elif (found := JOBID.match(line)) and pending_rule and stamp:
            started[found.group(1)] = (stamp, pending_rule)
            threads[found.group(1)] = 1
        elif (found := THREADS.match(line)) and started:
            threads[list(started)[-1]] = int(found.group(1))
        elif (found := FINISH.match(line)) and stamp and found.group(1) in started:
            begin, rule = started.pop(found.group(1))
            jobs[rule].append(((stamp - begin).total_seconds(), threads.pop(found.group(1))))
    wall = (last - first).total_seconds() if first and last else 0.0
    return jobs, wall


def run_fresh(fork_server: bool, targets: list[str]) -> tuple[str, float]:
    """Run the toy default in a scratch copy of the tracked and untracked-but-not-ignored files."""
    scratch = Path(tempfile.mkdtemp(prefix="rpb-toy-"))
    try:
        copy_checkout(scratch)
        switch = [] if fork_server else ["--config", "fork_server=false"]
        started = time.perf_counter()
        # Jobs call ``python``: the interpreter running this script must come first on PATH.
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        done = subprocess.run(
            [sys.executable, "-m", "snakemake", "--profile", "profiles/local", *switch, *targets],
            cwd=scratch,
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": path},
        )
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"toy default failed:\n{done.stderr[-3000:]}")
        return done.stderr, seconds
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--log", help="Snakemake log of a finished toy run (default: run one now)")
    parser.add_argument("--cores", type=int, default=2, help="cores the run had (profiles/local: 2)")
    parser.add_argument(
        "--no-fork-server", action="store_true", help="run every job in its own interpreter (fresh run only)"
    )
    parser.add_argument("targets", nargs="*", help="outputs to build instead of the toy default's all")
    args = parser.parse_args()
    if args.log:
        log, measured = Path(args.log).read_text(), None
    else:
        log, measured = run_fresh(not args.no_fork_server, args.targets)
    jobs, wall = parse(log)
    wall = measured or wall
    busy = sum(seconds * threads for runs in jobs.values() for seconds, threads in runs)
    count = sum(len(runs) for runs in jobs.values())
    print(f"toy default: {count} jobs in {wall:.0f} s wall ({wall / 60:.1f} min; goal <= 5 min)")
    for rule, runs in sorted(jobs.items(), key=lambda item: -sum(s * t for s, t in item[1])):
        share = sum(s * t for s, t in runs) / busy if busy else 0.0
        mean = sum(s for s, _ in runs) / len(runs)
        print(f"  {rule:22s} {len(runs):4d} jobs  {mean:6.1f} s/job  {share:6.1%}")
    outside = 1.0 - busy / (args.cores * wall) if wall else float("nan")
    print(f"share of wall x cores outside jobs (Snakemake, start-up, I/O): {outside:.1%} (goal <= 20%)")


if __name__ == "__main__":
    main()
