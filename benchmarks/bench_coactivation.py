"""Benchmark: vectorised co-activation graphs (eq. 1) against per-token loops (goal >= 100x).

Run: ``python benchmarks/bench_coactivation.py [--cpu N] [--rounds R]``.

Size: one checkpoint's probe at paper scale, 26 MoE layers x 5,000 probe tokens per domain,
64 routed experts, top-6 (DeepSeek-V2-Lite-like), stored as the probe writes it: a contiguous
(L, N, k) int16 array. Two kinds of per-token loop are timed:

* the loop of eq. (1) as written, one token and one ordered pair at a time on numpy arrays:
  the tests' reference (``tests/coactivation_reference.py``); the goal is read against it;
* the fastest pure-Python loop found (ids as Python ints via ``tolist``, each unordered pair once
  with ``itertools.combinations``, counts in plain lists; two accumulator layouts, the faster
  one counts), a stricter yardstick printed beside it.

Every timing is the fastest of interleaved repeats (other load only ever adds time); the
process is pinned to one CPU. All results are checked equal before any ratio is printed.
"""

from __future__ import annotations

import os

# One thread everywhere before numpy loads, so both sides run on one core.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from single_core import add_cpu_argument, pin  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.coactivation_reference import naive_coactivation  # noqa: E402
from workflow_scripts.routing_metrics.graphs import coactivation_layers  # noqa: E402

N_LAYERS, N_TOKENS, K, N_EXPERTS = 26, 5_000, 6, 64
GOAL = 100.0


def loop_eq1(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """The tests' reference loop of eq. (1), layer by layer."""
    return np.stack([naive_coactivation(rows, num_experts) for rows in topk])


def loop_flat(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """Per-token loop: Python ints, ``itertools.combinations`` pairs, one flat list of E*E counts."""
    out = np.empty((len(topk), num_experts, num_experts))
    pairs = itertools.combinations
    for layer, rows in enumerate(topk.tolist()):
        counts = [0] * (num_experts * num_experts)
        for row in rows:
            for i, j in pairs(row, 2):
                counts[i * num_experts + j] += 1
        c = np.asarray(counts, dtype=np.float64).reshape(num_experts, num_experts)
        out[layer] = (c + c.T) / len(rows)
    return out


def loop_nested(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """Per-token loop: Python ints, ``itertools.combinations`` pairs, a list of E row lists."""
    out = np.empty((len(topk), num_experts, num_experts))
    pairs = itertools.combinations
    for layer, rows in enumerate(topk.tolist()):
        counts = [[0] * num_experts for _ in range(num_experts)]
        for row in rows:
            for i, j in pairs(row, 2):
                counts[i][j] += 1
        c = np.asarray(counts, dtype=np.float64)
        out[layer] = (c + c.T) / len(rows)
    return out


def synthetic_topk(rng: np.random.Generator, n_layers: int, n_tokens: int) -> np.ndarray:
    """(L, N, k) int16 distinct expert ids per row with skewed expert popularity, C-contiguous."""
    scores = rng.random((n_layers, n_tokens, N_EXPERTS)) * np.linspace(0.2, 1.0, N_EXPERTS)
    return np.ascontiguousarray(np.argsort(-scores, axis=-1)[..., :K].astype(np.int16))


def fastest(fns: dict[str, Callable[[], object]], repeats: dict[str, int], rounds: int) -> dict[str, float]:
    """Fastest wall time of each function over ``rounds`` interleaved rounds of ``repeats`` calls."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(repeats[name]):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: float(np.min(t)) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_cpu_argument(parser)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (fastest call counts)")
    parser.add_argument("--tokens", type=int, default=N_TOKENS, help="probe tokens per layer (paper scale)")
    args = parser.parse_args()
    cpu = pin(args.cpu)

    topk = synthetic_topk(np.random.default_rng(0), N_LAYERS, args.tokens)
    ref = coactivation_layers(topk, N_EXPERTS)
    python_loops = {"loop_flat": loop_flat, "loop_nested": loop_nested}
    loops = {"loop_eq1": loop_eq1, **python_loops}
    if not all(np.array_equal(ref, loop(topk, N_EXPERTS)) for loop in loops.values()):
        raise SystemExit("a loop disagrees with the vectorised co-activation")
    fns = {"vectorised": lambda: coactivation_layers(topk, N_EXPERTS)}
    fns.update({name: (lambda f=loop: f(topk, N_EXPERTS)) for name, loop in loops.items()})
    t = fastest(fns, {"vectorised": 20, **dict.fromkeys(loops, 1)}, args.rounds)
    print(
        f"layers={N_LAYERS} tokens/layer={args.tokens} experts={N_EXPERTS} k={K} (int16 ids); "
        f"pinned to CPU {cpu}; all results identical"
    )
    labels = {
        "vectorised": "vectorised (bincount of pair codes)",
        "loop_eq1": "per-token loop of eq. (1) (tests' reference)",
        **{name: f"per-token loop, pure Python ({name})" for name in python_loops},
    }
    for name, label in labels.items():
        print(f"{label:<48} {t[name] * 1e3:9.2f} ms")
    ratio = t["loop_eq1"] / t["vectorised"]
    verdict = "met" if ratio >= GOAL else "NOT met"
    print(f"ratio {ratio:.0f}x against the per-token loop of eq. (1); goal >= {GOAL:.0f}x {verdict}")
    strict = min(t[name] for name in python_loops) / t["vectorised"]
    print(f"ratio {strict:.0f}x against the fastest pure-Python loop (stricter yardstick, no goal)")


if __name__ == "__main__":
    main()
