"""Expert co-activation graphs and the retained-edge-fraction threshold.

Implements eq. (1) and the edge-fraction threshold of §2 / Appendix B.2 and F.9 of the paper.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "check_topk",
    "coactivation",
    "coactivation_layers",
    "num_edges",
    "num_kept_edges",
    "threshold_top_fraction",
]


def check_topk(topk: np.ndarray, num_experts: int, distinct: bool = True) -> np.ndarray:
    """Validate a top-k id array of shape (..., N, k) and return it as int64.

    Rows must hold ``k`` distinct expert ids in ``[0, num_experts)``: a router's top-k is a set,
    and a repeated id would otherwise be silently de-duplicated by the one-hot construction.
    ``distinct=False`` skips the (sort-based) distinctness check for callers that verify it
    more cheaply themselves.
    """
    # Contiguous input keeps every later reduction and flat index a single linear pass.
    arr = np.ascontiguousarray(topk)
    if arr.ndim < 2:
        raise ValueError(f"topk must have shape (..., N, k), got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"topk must hold integer expert ids, got dtype {arr.dtype}")
    if num_experts < 1:
        raise ValueError(f"num_experts must be positive, got {num_experts}")
    if arr.shape[-2] == 0:
        raise ValueError("topk holds no tokens (N == 0); co-activation frequencies are undefined")
    if arr.size and (arr.min() < 0 or arr.max() >= num_experts):
        raise ValueError(f"expert ids must lie in [0, {num_experts}), got [{arr.min()}, {arr.max()}]")
    arr = arr.astype(np.int64, copy=False)
    if distinct and arr.shape[-1] > 1:
        srt = np.sort(arr, axis=-1)  # (..., N, k)
        if np.any(srt[..., 1:] == srt[..., :-1]):
            raise ValueError("each token's top-k row must hold distinct expert ids")
    return arr


# float32 holds every integer up to 2**24 exactly, so a float32 Gram product of 0/1 indicators is
# exact while no count can exceed that; beyond it fall back to float64 (exact to 2**53).
_FLOAT32_EXACT_COUNTS = 2**24


def _one_hot(topk: np.ndarray, num_experts: int, dtype: type = np.float64) -> np.ndarray:
    """Indicator X[..., t, e] = 1{e in topk[..., t, :]}, shape (..., N, E)."""
    lead = topk.shape[:-1]  # (..., N)
    x = np.zeros((*lead, num_experts), dtype=dtype)  # (..., N, E)
    # Flat fancy indexing into the contiguous buffer is faster than put_along_axis.
    row_start = (np.arange(int(np.prod(lead)), dtype=np.int64) * num_experts).reshape(*lead, 1)
    x.reshape(-1)[(row_start + topk).ravel()] = 1
    return x


def coactivation(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """Co-activation graph of one layer: w_ij = fraction of tokens whose top-k holds both i and j.

    Implements eq. (1) of the paper: ``w_ij = (1/N) sum_t 1{i, j in top_k(x_t)}`` for ``i != j``,
    with the diagonal set to zero (self-loops excluded, §2).

    Args:
        topk: (N, k) integer expert ids of one layer, distinct within a row.
        num_experts: E, the number of routed experts.

    Returns:
        (E, E) symmetric float64 matrix with zero diagonal. Off-diagonal entries are integer counts
        divided by N, so they are exact (float64 represents counts up to 2**53 exactly).
    """
    arr = np.asarray(topk)
    if arr.ndim != 2:
        raise ValueError(f"coactivation expects (N, k); use coactivation_layers for {arr.shape}")
    # coactivation_layers validates ids and distinctness.
    return coactivation_layers(arr[None], num_experts)[0]


def coactivation_layers(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """Co-activation graphs of every layer at once, (L, N, k) -> (L, E, E).

    Implements eq. (1) of the paper per layer. The pair counts come from one batched Gram
    product X^T X of the token-by-expert indicator X, so no Python loop runs over tokens.
    """
    # Distinctness is verified below from the Gram diagonal, which is cheaper than sorting rows.
    arr = check_topk(topk, num_experts, distinct=False)
    if arr.ndim != 3:
        raise ValueError(f"coactivation_layers expects (L, N, k), got {arr.shape}")
    n_layers, n_tokens, k = arr.shape
    dtype = np.float32 if n_tokens < _FLOAT32_EXACT_COUNTS else np.float64
    x = _one_hot(arr, num_experts, dtype)  # (L, N, E)
    # Entries of X^T X are sums of 0/1 products, i.e. exact integer pair counts.
    counts = np.matmul(x.transpose(0, 2, 1), x).astype(np.float64)  # (L, E, E)
    idx = np.arange(num_experts)
    # The diagonal counts distinct (token, expert) memberships; it totals N*k per layer only if
    # no row repeats an id (a repeat would be silently collapsed by the one-hot indicator).
    if not np.array_equal(counts[:, idx, idx].sum(axis=1), np.full(n_layers, float(n_tokens * k))):
        raise ValueError("each token's top-k row must hold distinct expert ids")
    # Eq. (1) excludes self-loops.
    counts[:, idx, idx] = 0.0
    return counts / n_tokens


def num_edges(num_experts: int) -> int:
    """Number of unordered expert pairs E(E-1)/2 (the candidate edges of §2's threshold)."""
    return num_experts * (num_experts - 1) // 2


def num_kept_edges(num_experts: int, rho: float) -> int:
    """Edge budget of the rho-threshold: round-half-up of rho * E(E-1)/2.

    Round-half-up (``floor(x + 0.5)``) is used instead of Python's ``round`` because banker's
    rounding would make the budget depend on the parity of the integer part at exact halves.
    """
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"rho must lie in (0, 1], got {rho}")
    m = num_edges(num_experts)
    return min(m, int(np.floor(rho * m + 0.5)))


def threshold_top_fraction(w: np.ndarray, rho: float) -> np.ndarray:
    """Keep the top rho fraction of the off-diagonal edges by weight, zeroing all others.

    Implements the retained-edge-fraction threshold of §2 (default rho = 0.10; sweeps in
    Appendix B.2 and F.9). The budget is ``num_kept_edges(E, rho)`` = round-half-up of
    rho * E(E-1)/2 over unordered pairs; edges of weight 0 are never kept, so fewer edges survive
    when the graph has fewer positive edges than the budget. Kept edges retain their raw weights
    (F.9: no row normalisation).

    Tie-breaking is deterministic: pairs (i < j) are enumerated in row-major order and stably
    sorted by weight descending, so among equal weights the lexicographically smallest (i, j)
    is kept first.

    Args:
        w: (E, E) symmetric, non-negative co-activation matrix (diagonal ignored).
        rho: retained fraction in (0, 1].

    Returns:
        (E, E) symmetric float64 matrix with zero diagonal.
    """
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"w must be a square (E, E) matrix, got {w.shape}")
    if not np.allclose(w, w.T, rtol=0.0, atol=1e-12):
        raise ValueError("w must be symmetric")
    n_experts = w.shape[0]
    budget = num_kept_edges(n_experts, rho)
    iu, ju = np.triu_indices(n_experts, k=1)  # (M,), row-major (i, j) order
    weights = w[iu, ju]  # (M,)
    if np.any(weights < 0):
        raise ValueError("co-activation weights must be non-negative")
    # Negation is exact for floats, and a stable sort preserves the (i, j) order among ties.
    order = np.argsort(-weights, kind="stable")[:budget]  # (budget,)
    order = order[weights[order] > 0]
    out = np.zeros_like(w)  # (E, E)
    out[iu[order], ju[order]] = weights[order]
    out[ju[order], iu[order]] = weights[order]
    return out
