"""Benchmark: vectorised co-activation graph (eq. 1) against a per-token Python loop.

Run: ``python benchmarks/bench_coactivation.py``. Prints timings and the speed ratio (goal >= 100x).
"""

from __future__ import annotations

import time

import numpy as np

from workflow_scripts.probe.graphs import coactivation

N_TOKENS, K, N_EXPERTS = 20_000, 6, 64


def coactivation_loop(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """Naive eq. (1): iterate tokens as numpy rows and ordered expert pairs one by one."""
    w = np.zeros((num_experts, num_experts))
    for row in topk:
        for i in row:
            for j in row:
                if i != j:
                    w[i, j] += 1.0
    return w / len(topk)


def coactivation_loop_tuned(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """The same per-token loop on plain Python ints and nested lists (a stronger baseline)."""
    w = [[0] * num_experts for _ in range(num_experts)]
    for row in topk.tolist():
        for i in row:
            w_i = w[i]
            for j in row:
                w_i[j] += 1
    out = np.asarray(w, dtype=np.float64)
    np.fill_diagonal(out, 0.0)
    return out / len(topk)


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    rng = np.random.default_rng(0)
    topk = np.argsort(rng.random((N_TOKENS, N_EXPERTS)), axis=1)[:, :K]  # (N, k) distinct ids
    fast = _best_of(lambda: coactivation(topk, N_EXPERTS), repeats=20)
    slow = _best_of(lambda: coactivation_loop(topk, N_EXPERTS), repeats=3)
    tuned = _best_of(lambda: coactivation_loop_tuned(topk, N_EXPERTS), repeats=3)
    ref = coactivation(topk, N_EXPERTS)
    same = all(
        np.allclose(ref, loop(topk, N_EXPERTS), rtol=0, atol=1e-12)
        for loop in (coactivation_loop, coactivation_loop_tuned)
    )
    print(f"tokens={N_TOKENS} k={K} experts={N_EXPERTS}; results identical: {same}")
    print(f"vectorised:                {fast * 1e3:9.2f} ms")
    print(f"per-token loop (numpy):    {slow * 1e3:9.2f} ms -> ratio {slow / fast:6.0f}x (goal >= 100x)")
    print(f"per-token loop (pure py):  {tuned * 1e3:9.2f} ms -> ratio {tuned / fast:6.0f}x")


if __name__ == "__main__":
    main()
