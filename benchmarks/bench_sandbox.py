"""Throughput of the sandboxed executor, per isolation mode, against exec() of the same programs.

    python benchmarks/bench_sandbox.py [--programs 60] [--workers 1 2 4]

The programs are HumanEval-shaped: a solution, a ``check(candidate)`` of asserts, and the call.
Prints programs per second unsandboxed (exec in one process, no isolation at all), then for each
isolation mode usable here (root: namespaces; other users: user_namespaces; both:
process_group) and worker count, sandboxed programs per second (``run_all``, one fresh
interpreter per program) and their ratio to unsandboxed. A mode unusable here is named with the
reason; run as another user to measure it. Every program must pass both ways.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workflow_scripts.evaluate.sandbox import Isolation, Job, Limits, run_all, unavailable  # noqa: E402

SOLUTIONS = (
    (
        "def candidate(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
        "    assert candidate({k}) == {fib}\n",
    ),
    (
        "def candidate(words):\n    return sorted(words, key=lambda w: (len(w), w))\n",
        "    assert candidate(['ccc', 'a', 'bb'] * {k}) == ['a'] * {k} + ['bb'] * {k} + ['ccc'] * {k}\n",
    ),
    (
        "import math\n\ndef candidate(n):\n    return [p for p in range(2, n) if all(p % q for q in "
        "range(2, math.isqrt(p) + 1))]\n",
        "    assert len(candidate({k} * 10)) == len([p for p in range(2, {k} * 10) if all(p % q for q in "
        "range(2, p))])\n",
    ),
)


def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def programs(count: int) -> list[str]:
    """``count`` distinct passing programs: each solution checked on a different input."""
    out = []
    for index in range(count):
        solution, assertion = SOLUTIONS[index % len(SOLUTIONS)]
        k = index // len(SOLUTIONS) + 1
        check = "def check(candidate):\n" + assertion.format(k=k, fib=fibonacci(k))
        out.append(f"{solution}\n\n{check}\n\ncheck(candidate)\n")
    return out


def unsandboxed(sources: list[str]) -> float:
    """Seconds to exec every program in this process (each in a fresh namespace)."""
    start = time.perf_counter()
    for source in sources:
        exec(compile(source, "<program>", "exec"), {"__name__": "__main__"})
    return time.perf_counter() - start


def sandboxed(sources: list[str], workers: int, isolation: Isolation) -> float:
    """Seconds to run every program in the sandbox on ``workers`` threads."""
    start = time.perf_counter()
    outcomes = run_all([Job(source) for source in sources], Limits(), workers=workers, isolation=isolation)
    elapsed = time.perf_counter() - start
    failed = [o for o in outcomes if o.status != "passed"]
    if failed:
        raise SystemExit(f"{len(failed)} programs did not pass in the sandbox; first: {failed[0]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--programs", type=int, default=60, help="number of test programs")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="sandbox worker counts")
    args = parser.parse_args()

    sources = programs(args.programs)
    plain_s = unsandboxed(sources)
    print(f"programs: {args.programs}")
    print(f"unsandboxed exec, one process: {args.programs / plain_s:10.1f} programs/s")
    for isolation in Isolation:
        reason = unavailable(isolation)
        if reason:
            print(f"{isolation.value}: unavailable here ({reason})")
            continue
        for workers in args.workers:
            boxed_s = sandboxed(sources, workers, isolation)
            print(
                f"{isolation.value:>15}, {workers} worker(s): {args.programs / boxed_s:10.1f} programs/s"
                f"  (sandboxed / unsandboxed: {plain_s / boxed_s:.4f}, {boxed_s / plain_s:.0f}x slower)"
            )


if __name__ == "__main__":
    main()
