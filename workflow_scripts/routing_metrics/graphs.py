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


def check_topk(topk: np.ndarray, num_experts: int, distinct: bool = True, cast: bool = True) -> np.ndarray:
    """Validate a top-k id array of shape (..., N, k) and return it as int64.

    Rows must hold ``k`` distinct expert ids in ``[0, num_experts)``: a router's top-k is a set,
    and a repeated id would otherwise be miscounted as a co-activation of an expert with itself.
    ``distinct=False`` skips the (sort-based) distinctness check for callers that verify it
    more cheaply themselves; ``cast=False`` returns the validated array in its own integer dtype
    (callers that convert it themselves save a full copy).
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
    if cast:
        arr = arr.astype(np.int64, copy=False)
    if distinct and arr.shape[-1] > 1:
        srt = np.sort(arr, axis=-1)  # (..., N, k)
        if np.any(srt[..., 1:] == srt[..., :-1]):
            raise ValueError("each token's top-k row must hold distinct expert ids")
    return arr


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

    Implements eq. (1) of the paper per layer. Each token's k(k-1)/2 unordered position pairs
    (p < q) are encoded as integer codes ``topk[t, p] * E + topk[t, q]`` and counted by one
    ``np.bincount`` per layer (minlength E*E), so no Python loop runs over tokens; the count
    matrix C holds each pair in the orientation it appeared in, and ``C + C^T`` is the symmetric
    pair count regardless of the order of ids within a row. Counts are exact integers, divided by
    N once. The code buffers are sized for one layer and reused, so they stay cache-resident.

    A repeated id within a row (p < q with topk[t, p] == topk[t, q]) lands on the diagonal of C,
    which is otherwise empty, so distinctness is checked for free.
    """
    arr = np.ascontiguousarray(topk)
    if arr.ndim != 3:
        raise ValueError(f"coactivation_layers expects (L, N, k), got {arr.shape}")
    # Validates dtype and id range; distinctness is verified below from the diagonal of C.
    check_topk(arr, num_experts, distinct=False, cast=False)
    n_layers, n_tokens, k = arr.shape
    first, second = (idx.tolist() for idx in np.triu_indices(k, k=1))  # the M = k(k-1)/2 position pairs
    out = np.empty((n_layers, num_experts, num_experts))  # (L, E, E)
    ids = np.empty((k, n_tokens), dtype=np.intp)  # one layer's ids, position-major (contiguous columns)
    rows = np.empty((k, n_tokens), dtype=np.intp)  # ids * E: the row part of a pair code
    codes = np.empty((len(first), n_tokens), dtype=np.intp)  # (M, N) pair codes i*E + j
    diag = np.arange(num_experts)
    for layer in range(n_layers):
        ids[...] = arr[layer].T
        np.multiply(ids, num_experts, out=rows)
        for m, (p, q) in enumerate(zip(first, second, strict=True)):
            np.add(rows[p], ids[q], out=codes[m])
        counts = np.bincount(codes.ravel(), minlength=num_experts * num_experts)
        counts = counts.reshape(num_experts, num_experts)  # (E, E) ordered-by-position pair counts
        if np.any(counts[diag, diag]):
            raise ValueError("each token's top-k row must hold distinct expert ids")
        # Eq. (1) excludes self-loops: the diagonal of C + C^T is zero after the check above.
        np.add(counts, counts.T, out=out[layer])
    out /= n_tokens
    return out


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

    Rule at the cut (config ``probe.edge_fraction``): candidate pairs (i < j) are ordered by
    weight descending, then by (i, j) ascending, and exactly the first ``budget`` are kept. The
    order is a function of w alone, so neither token order nor the order pairs are enumerated in
    can move it. Ties at the cut are broken by expert id rather than all kept because eq. (1)
    weights are counts / N, so ties are common at small N (at toy scale, keeping every tied edge
    would turn a 12-edge budget into up to 18 edges): an exact budget keeps the graph density
    equal to rho at every point of the B.2 sweep and identical across base and trained runs,
    which share their expert ids.

    Args:
        w: (E, E) symmetric, non-negative co-activation matrix (diagonal ignored), or a stack
            (..., E, E) of them, each thresholded independently (identically to one at a time).
        rho: retained fraction in (0, 1].

    Returns:
        float64 array of w's shape, symmetric with zero diagonals.
    """
    w = np.asarray(w, dtype=np.float64)
    if w.ndim < 2 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"w must be a square (E, E) matrix or a stack of them, got {w.shape}")
    if not np.allclose(w, np.swapaxes(w, -1, -2), rtol=0.0, atol=1e-12):
        raise ValueError("w must be symmetric")
    n_experts = w.shape[-1]
    budget = num_kept_edges(n_experts, rho)
    iu, ju = np.triu_indices(n_experts, k=1)  # (M,), row-major (i, j) order
    flat = w.reshape(-1, n_experts, n_experts)  # (B, E, E)
    weights = flat[:, iu, ju]  # (B, M)
    if np.any(weights < 0):
        raise ValueError("co-activation weights must be non-negative")
    # Negation is exact for floats, and a stable sort preserves the (i, j) order among ties.
    order = np.argsort(-weights, axis=-1, kind="stable")[:, :budget]  # (B, budget)
    kept = np.take_along_axis(weights, order, axis=-1)  # (B, budget); zero weights stay zero
    out = np.zeros_like(flat)  # (B, E, E)
    batch = np.arange(flat.shape[0])[:, None]  # (B, 1)
    out[batch, iu[order], ju[order]] = kept
    out[batch, ju[order], iu[order]] = kept
    return out.reshape(w.shape)
