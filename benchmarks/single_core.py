"""What the one-core benchmarks share: pinning to a CPU, and the clocks a verdict is read on.

Imported by the ``bench_*.py`` scripts (run as ``python benchmarks/bench_x.py``, so this folder
is on ``sys.path``).
"""

from __future__ import annotations

import argparse
import os

# Index into a (wall seconds, process CPU seconds) pair.
CLOCKS = {"wall": 0, "cpu": 1}


def add_cpu_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the first allowed)")


def pin(cpu: int | None = None) -> int:
    """Pin this process to ``cpu`` (default: the first CPU it may use); returns the CPU."""
    cpu = min(os.sched_getaffinity(0)) if cpu is None else cpu
    os.sched_setaffinity(0, {cpu})
    return cpu


def add_clock_arguments(parser: argparse.ArgumentParser) -> None:
    """``--threads`` (torch intra-op threads) and ``--clock`` (the clock the verdict is read on)."""
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="cpu",
        help="clock of the verdict: process CPU seconds (robust to other processes; sums threads) or wall",
    )
