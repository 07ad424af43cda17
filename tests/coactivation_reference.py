"""Eq. (1) and the rho edge cut written pair by pair: references for the vectorised graph code."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def naive_coactivation(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """``w_ij = (1/N) sum_t 1{i, j in top_k(x_t)}`` for ``i != j``, one token and one pair at a time."""
    w = np.zeros((num_experts, num_experts))
    for row in topk:
        for i in row:
            for j in row:
                if i != j:
                    w[i, j] += 1
    return w / len(topk)


def naive_kept_edges(w: np.ndarray, rho: float, pairs: Sequence[tuple[int, int]]) -> set[tuple[int, int]]:
    """The (i, j) pairs the rho cut keeps: heaviest first, ties by (i, j), positive weights only.

    ``pairs`` lists every i < j in any order; the budget is rho * E(E-1)/2 rounded half up.
    """
    budget = int(rho * len(pairs) + 0.5)
    ranked = sorted(pairs, key=lambda pair: (-w[pair], pair))
    return {pair for pair in ranked[:budget] if w[pair] > 0}
