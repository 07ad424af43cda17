"""Validation of the shuffled priors: prior-side strength (Table 13) and community preservation (B.2).

Implements Appendix E.1 / Table 13 and the within-community shuffle sweep of Appendix B.2 on the
``N x 2 x L x E`` prior tensors before any training, streamed in chunks of rows so memory does not
grow with ``N``; shuffles follow the convention of ``workflow_scripts.priors.shuffle``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workflow_scripts.priors.compute import gather_rows
from workflow_scripts.priors.shuffle import (
    DEFAULT_CHUNK_ROWS,
    global_permutations,
    permute_experts,
    within_community_permutations,
)
from workflow_scripts.routing_metrics.communities import louvain
from workflow_scripts.routing_metrics.graphs import coactivation_layers, threshold_top_fraction
from workflow_scripts.routing_metrics.metrics import layer_mean_nmi, topk_overlap

__all__ = [
    "ABS_DELTA_BINS",
    "B2_RHOS",
    "B2_SEEDS",
    "MAX_COMMUNITY_ROWS",
    "clipped_topk",
    "prior_side_strength",
    "within_shuffle_community_check",
]

ABS_DELTA_BINS = 1 << 16
P90 = 0.9
B2_RHOS = (0.05, 0.10, 0.15, 0.20)
B2_SEEDS = (0, 1, 2)
MAX_COMMUNITY_ROWS = 20_000


def _check_prior(prior: np.ndarray, name: str = "prior") -> None:
    """Raise ``ValueError`` unless ``prior`` is a non-empty ``(N, 2, L, E)`` array."""
    if prior.ndim != 4 or prior.shape[1] != 2 or 0 in prior.shape:
        raise ValueError(f"expected {name} of shape (N, 2, L, E), got {prior.shape}")


def clipped_topk(chunk: np.ndarray, top_k: int, clip_eps: float, clip_c: float) -> np.ndarray:
    """Top-k expert ids of the clipped log prior, ties broken by the lower expert id.

    Implements the prior top-k sets of Appendix E.1: ``topk(log c)`` with ``c = clip(pi)`` of
    eq. (3) (``pi`` = ``chunk``, ``eps`` = ``clip_eps``, ``C`` = ``clip_c``), computed in float64.

    Args:
        chunk: ``(..., E)`` prior rows.
        top_k: k, ``1 <= k <= E``.

    Returns:
        ``(..., k)`` int64 ids, in decreasing ``log c`` order.
    """
    import torch

    from workflow_scripts.routing.core import clipped_log_prior

    if not 1 <= top_k <= chunk.shape[-1]:
        raise ValueError(f"top_k must lie in [1, {chunk.shape[-1]}], got {top_k}")
    log_c = clipped_log_prior(torch.from_numpy(np.asarray(chunk, dtype=np.float64)), clip_eps, clip_c)
    return np.argsort(-log_c.numpy(), axis=-1, kind="stable")[..., :top_k]  # (..., k)


def _histogram_lower_quantile(counts: np.ndarray, width: float, q: float) -> float:
    """Lower edge of the bin holding the 0-based order statistic ``floor(q (n - 1))`` of a histogram."""
    rank = int(np.floor(q * (int(counts.sum()) - 1)))
    return float(np.searchsorted(np.cumsum(counts), rank, side="right") * width)


def prior_side_strength(
    prior: np.ndarray,
    shuffled: np.ndarray,
    top_k: int,
    clip_eps: float,
    clip_c: float,
    beta: float = 1.0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> dict[str, Any]:
    """Prior-side intervention strength of a shuffle: the columns of Table 13.

    Implements Appendix E.1: for every (sample, span, layer) cell of ``prior`` (``pi_base``)
    and ``shuffled``, the top-k overlap ``|topk(prior) ∩ topk(shuffled)| / k`` (``k`` =
    ``top_k``, the model's routing top-k) averaged over cells ("prior top-k overlap") and its
    complement ("top-k change rate"); the 90th percentile over all elements of ``|Δb|``, where
    ``b = beta * prior_to_bias(·)`` (eq. (3), clamp ``eps`` = ``clip_eps``, ``C`` = ``clip_c``)
    is the effective log-prior bias added to the logits (histogram method, see the module
    notes); and the share of entries of ``shuffled`` with ``p >= C/E`` (the clamp upper bound,
    as in ``priors.stats``).

    Percentile of |Δb|: the 90th percentile over all ``N * 2 * L * E`` elements comes from a
    fixed-bin histogram (``ABS_DELTA_BINS`` bins on ``[0, 2 |beta| log(C/eps)]``, the largest
    possible ``|Δb|``), so memory is constant in ``N``. The reported value is the LOWER edge of the
    bin holding the order statistic of 0-based rank ``floor(0.9 (n - 1))``, i.e. ``np.percentile``
    with ``method="lower"``, rounded down to the bin grid: it lies within one bin width
    (``abs_delta_bias_p90_resolution``, 1.4e-4 at the defaults eps = 0.05, C = 5, beta = 1) below
    the exact value, and is exactly 0 when no element changed.

    Returns:
        ``{"shape", "top_k", "beta", "clip_eps", "clip_c", "cells", "entries",
        "prior_topk_overlap", "topk_change_rate", "abs_delta_bias_p90",
        "abs_delta_bias_p90_resolution", "abs_delta_bias_p90_method", "abs_delta_bias_mean",
        "clamp_upper_fraction"}``.
    """
    import torch

    from workflow_scripts.routing.core import prior_to_bias

    _check_prior(prior)
    if shuffled.shape != prior.shape:
        raise ValueError(f"shuffled has shape {shuffled.shape}, prior {prior.shape}")
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    num_rows, _, num_layers, num_experts = prior.shape
    upper = np.float32(clip_c / num_experts)
    span = 2.0 * abs(beta) * float(np.log(clip_c / clip_eps))  # bound on |Δb|
    width = max(span, np.finfo(np.float64).tiny) / ABS_DELTA_BINS
    counts = np.zeros(ABS_DELTA_BINS, dtype=np.int64)
    overlap_sum = abs_sum = 0.0
    saturated = 0
    for start in range(0, num_rows, chunk_rows):
        a = np.array(prior[start : start + chunk_rows], dtype=np.float32)  # (n, 2, L, E)
        b = np.array(shuffled[start : start + chunk_rows], dtype=np.float32)  # (n, 2, L, E)
        cells = a.shape[0] * 2 * num_layers
        top_a = clipped_topk(a, top_k, clip_eps, clip_c).reshape(cells, top_k)  # (cells, k)
        top_b = clipped_topk(b, top_k, clip_eps, clip_c).reshape(cells, top_k)  # (cells, k)
        overlap_sum += topk_overlap(top_a, top_b, top_k) * cells
        bias_a = prior_to_bias(torch.from_numpy(a), clip_eps, clip_c).double().numpy()  # (n, 2, L, E)
        bias_b = prior_to_bias(torch.from_numpy(b), clip_eps, clip_c).double().numpy()  # (n, 2, L, E)
        delta = np.abs(beta * (bias_b - bias_a)).ravel()  # (n * 2 * L * E,)
        abs_sum += float(delta.sum())
        bins = np.minimum((delta / width).astype(np.int64), ABS_DELTA_BINS - 1)
        counts += np.bincount(bins, minlength=ABS_DELTA_BINS)
        saturated += int((b >= upper).sum())
    cells = num_rows * 2 * num_layers
    entries = cells * num_experts
    overlap = overlap_sum / cells
    return {
        "shape": [int(d) for d in prior.shape],
        "top_k": int(top_k),
        "beta": float(beta),
        "clip_eps": float(clip_eps),
        "clip_c": float(clip_c),
        "cells": cells,
        "entries": entries,
        "prior_topk_overlap": overlap,
        "topk_change_rate": 1.0 - overlap,
        "abs_delta_bias_p90": _histogram_lower_quantile(counts, width, P90),
        "abs_delta_bias_p90_resolution": width,
        "abs_delta_bias_p90_method": (
            f"histogram, {ABS_DELTA_BINS} bins on [0, 2|beta|log(C/eps)]; lower bin edge of "
            "np.percentile(method='lower')"
        ),
        "abs_delta_bias_mean": abs_sum / entries,
        "clamp_upper_fraction": saturated / entries,
    }


def _community_rows(num_rows: int, max_rows: int, sample_seed: int) -> np.ndarray:
    """Sorted row positions for the community check: all rows, or ``max_rows`` drawn without replacement."""
    if max_rows <= 0:
        raise ValueError(f"max_rows must be positive, got {max_rows}")
    if num_rows <= max_rows:
        return np.arange(num_rows)
    rng = np.random.Generator(np.random.PCG64(sample_seed))
    return np.sort(rng.choice(num_rows, size=max_rows, replace=False))


def _coactivation_graphs(
    prior: np.ndarray,
    positions: np.ndarray,
    variants: Sequence[np.ndarray | None],
    top_k: int,
    clip_eps: float,
    clip_c: float,
    chunk_rows: int,
) -> np.ndarray:
    """Eq. (1) co-activation graphs of the prior and of each shuffled variant, ``(V, L, E, E)``.

    The "tokens" are the (sample, span) rows at ``positions``; their top-k sets are
    ``clipped_topk`` of the prior (variant ``None``) or of the permuted prior. Pair counts are
    accumulated chunk by chunk (exact integers) and divided by the token count at the end.
    """
    num_layers, num_experts = prior.shape[2], prior.shape[3]
    pair_counts = np.zeros((len(variants), num_layers, num_experts, num_experts))  # (V, L, E, E)
    for start in range(0, positions.size, chunk_rows):
        chunk = gather_rows(prior, positions[start : start + chunk_rows])  # (n, 2, L, E)
        tokens = chunk.shape[0] * 2
        for v, perms in enumerate(variants):
            shuffled = chunk if perms is None else permute_experts(chunk, perms)  # (n, 2, L, E)
            top = clipped_topk(shuffled, top_k, clip_eps, clip_c)  # (n, 2, L, k)
            top = top.reshape(tokens, num_layers, top_k).transpose(1, 0, 2)  # (L, n*2, k)
            pair_counts[v] += np.rint(coactivation_layers(top, num_experts) * tokens)
    return pair_counts / (positions.size * 2)


def _layer_partitions(graphs: np.ndarray, rho: float, resolution: float, detector_seed: int) -> list:
    """Louvain partition of every layer's rho-thresholded graph, ``(L, E, E)`` -> ``L x (E,)``."""
    return [louvain(threshold_top_fraction(w, rho), resolution, detector_seed) for w in graphs]


def _summary(per_combination: list[dict[str, float]]) -> dict[str, Any]:
    """Mean, min and population sd (ddof 0) of the NMIs of all (rho, seed) combinations."""
    values = np.array([c["nmi"] for c in per_combination])
    return {
        "per_combination": per_combination,
        "mean": float(values.mean()),
        "min": float(values.min()),
        "sd": float(values.std()),
        "sd_ddof": 0,
    }


def within_shuffle_community_check(
    prior: np.ndarray,
    partition: np.ndarray,
    seeds: Sequence[int],
    rhos: Sequence[float],
    top_k: int,
    clip_eps: float,
    clip_c: float,
    resolution: float = 1.0,
    detector_seed: int = 0,
    max_rows: int = MAX_COMMUNITY_ROWS,
    sample_seed: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> dict[str, Any]:
    """Check that within-community shuffles keep community membership (sweep of Appendix B.2).

    Implements the within-community shuffle sweep of Appendix B.2 (``rhos`` = rho, the paper's
    ``B2_RHOS``; ``seeds`` = permutation seeds, the paper's ``B2_SEEDS``). Per MoE layer: a
    co-activation graph (eq. (1)) whose tokens are the (sample, span) rows of ``prior`` and
    whose top-k sets are ``clipped_topk`` (``k`` = ``top_k``), thresholded at edge fraction
    rho (§2) and partitioned by Louvain (``resolution`` gamma, ``detector_seed``); the same for
    the prior shuffled by ``within_community_permutations(partition, seed)``; their community
    NMI (layer mean, Appendix F.10) for each (rho, seed). A global shuffle with the same seeds
    is the contrast.

    At most ``max_rows`` rows are used: a larger prior is subsampled without replacement with
    ``PCG64(sample_seed)`` (rows are then read in ascending order), which bounds the run time;
    memory is bounded by ``chunk_rows`` either way.

    Args:
        prior: ``(N, 2, L, E)`` prior (``pi_base``), e.g. a ``load_prior`` memory map.
        partition: ``(L, E)`` base community labels that define the within-community shuffle.

    Returns:
        ``{"rows_total", "rows_used", "sample_seed", "top_k", "rhos", "seeds", "detector",
        "within": summary, "global": summary}``, each summary
        ``{"per_combination": [{"rho", "seed", "nmi"}, ...], "mean", "min", "sd", "sd_ddof"}``.
    """
    _check_prior(prior)
    num_rows, _, num_layers, num_experts = prior.shape
    if not seeds or not rhos:
        raise ValueError("need at least one seed and one rho")
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    if np.shape(partition) != (num_layers, num_experts):
        raise ValueError(f"partition must have shape {(num_layers, num_experts)}, got {np.shape(partition)}")
    scopes = {
        "within": [within_community_permutations(partition, s) for s in seeds],
        "global": [global_permutations(num_layers, num_experts, s) for s in seeds],
    }
    positions = _community_rows(num_rows, max_rows, sample_seed)
    variants = [None, *scopes["within"], *scopes["global"]]
    graphs = _coactivation_graphs(prior, positions, variants, top_k, clip_eps, clip_c, chunk_rows)
    results: dict[str, list[dict[str, float]]] = {"within": [], "global": []}
    for rho in rhos:
        base = _layer_partitions(graphs[0], rho, resolution, detector_seed)
        for offset, scope in enumerate(scopes):
            for i, seed in enumerate(seeds):
                graph = graphs[1 + offset * len(seeds) + i]
                other = _layer_partitions(graph, rho, resolution, detector_seed)
                nmi = layer_mean_nmi(base, other)
                results[scope].append({"rho": float(rho), "seed": int(seed), "nmi": nmi})
    return {
        "rows_total": int(num_rows),
        "rows_used": int(positions.size),
        "sample_seed": int(sample_seed),
        "top_k": int(top_k),
        "rhos": [float(r) for r in rhos],
        "seeds": [int(s) for s in seeds],
        "detector": {"method": "louvain", "resolution": float(resolution), "seed": int(detector_seed)},
        "within": _summary(results["within"]),
        "global": _summary(results["global"]),
    }
