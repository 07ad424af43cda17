"""Eq. (1) of the paper written token by token: the reference for the vectorised co-activation."""

from __future__ import annotations

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
