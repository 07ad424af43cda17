"""Marginal-preserving multinomial null model for co-activation graphs.

Implements Appendix B.1 of the paper: 100 multinomial-resampled graphs per layer whose expected
edge weights are proportional to the product of expert marginals, used only as a validity check
of the community object (Table 9), never to rank methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workflow_scripts.routing_metrics.communities import LOUVAIN_MAX_LEVEL, louvain, modularities
from workflow_scripts.routing_metrics.graphs import check_topk, threshold_top_fraction
from workflow_scripts.routing_metrics.metrics import community_nmi, expert_marginals

__all__ = [
    "NullMargins",
    "expected_null_graph",
    "graph_marginals",
    "null_graphs",
    "null_graphs_from_topk",
    "null_margins",
]


def _pair_probabilities(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair indices (i < j, row-major) and multinomial probabilities pi_ij ∝ p_i p_j, each (M,)."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or p.size < 2 or np.any(p < 0) or not np.all(np.isfinite(p)):
        raise ValueError("p must be a finite, non-negative (E,) vector with E >= 2")
    iu, ju = np.triu_indices(p.size, k=1)
    prod = p[iu] * p[ju]  # (M,)
    total = prod.sum()
    if total <= 0:
        raise ValueError("p puts mass on fewer than two experts, so no pair can co-activate")
    return iu, ju, prod / total


def _check_k(k: int) -> int:
    k = int(k)
    if k < 2:
        raise ValueError(f"co-activation needs k >= 2 experts per token, got k={k}")
    return k


def expected_null_graph(p: np.ndarray, k: int) -> np.ndarray:
    """Expected (E, E) weights of the null model: (k(k-1)/2) * p_i p_j / sum_{a<b} p_a p_b, i != j.

    Implements the expectation of the Appendix B.1 null model (see `null_graphs`). Its total
    upper-triangle mass is k(k-1)/2, equal to that of any eq. (1) graph with top-k sets of size k.
    """
    k = _check_k(k)
    iu, ju, probs = _pair_probabilities(p)
    out = np.zeros((len(p), len(p)))  # (E, E)
    out[iu, ju] = 0.5 * k * (k - 1) * probs
    out[ju, iu] = out[iu, ju]
    return out


def null_graphs(p: np.ndarray, num_tokens: int, k: int, samples: int = 100, seed: int = 0) -> np.ndarray:
    """Draw marginal-preserving null co-activation graphs for one layer.

    Implements the null model of Appendix B.1 of the paper. Exact construction:

    1. Over the M = E(E-1)/2 unordered pairs (i < j) put probabilities
       ``pi_ij = p_i p_j / sum_{a<b} p_a p_b`` (products of expert marginals; no pair structure).
    2. An observed layer with N tokens and distinct top-k sets contains exactly
       ``n = N * k(k-1)/2`` co-activation pair events. Draw ``counts ~ Multinomial(n, pi)``
       independently ``samples`` times (one vectorised ``rng.multinomial`` call).
    3. Set ``w_ij = w_ji = counts_ij / N`` with a zero diagonal, the normalisation of eq. (1).

    Hence every null graph has exactly the observed total edge mass (sum_{i<j} w_ij = k(k-1)/2),
    and ``E[w_ij] ∝ p_i p_j``. Expert strengths are preserved in expectation up to the exclusion
    of self-pairs: ``E[s_i] = k(k-1) p_i (1 - p_i) / (1 - sum_a p_a**2)`` against the observed
    ``s_i = k(k-1) p_i``, a relative deviation of order max_i p_i (at most 1/k, and ~1/E for
    balanced routers). Pair co-selection structure is removed.

    Args:
        p: (E,) expert marginals (fraction of token-slots per expert, e.g. `expert_marginals`).
        num_tokens: N, the number of probe tokens of the observed layer.
        k: experts per token.
        samples: number of null graphs (the paper uses 100).
        seed: seed of ``numpy.random.default_rng``.

    Returns:
        (samples, E, E) float64 symmetric null graphs with zero diagonals.
    """
    k = _check_k(k)
    if num_tokens < 1 or samples < 1:
        raise ValueError("num_tokens and samples must be positive")
    iu, ju, probs = _pair_probabilities(p)
    n_events = num_tokens * k * (k - 1) // 2
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n_events, probs, size=samples)  # (S, M)
    n_experts = len(p)
    out = np.zeros((samples, n_experts, n_experts))  # (S, E, E)
    out[:, iu, ju] = counts / num_tokens
    out[:, ju, iu] = out[:, iu, ju]
    return out


def null_graphs_from_topk(
    topk: np.ndarray, num_experts: int, samples: int = 100, seed: int = 0
) -> np.ndarray:
    """Null graphs for one layer straight from its (N, k) top-k ids, (N, k) -> (samples, E, E).

    Implements Appendix B.1 of the paper via `expert_marginals` and `null_graphs`.
    """
    arr = check_topk(topk, num_experts)
    if arr.ndim != 2:
        raise ValueError(f"expected one layer of shape (N, k), got {arr.shape}")
    p = expert_marginals(arr, num_experts)  # (E,)
    return null_graphs(p, arr.shape[0], arr.shape[1], samples=samples, seed=seed)


def graph_marginals(w: np.ndarray) -> tuple[np.ndarray, int]:
    """Recover the expert marginals p (E,) and k from an unthresholded eq. (1) graph.

    Implements the inverse of eq. (1) needed by Appendix B.1: every token adds 1/N to w_ij for
    each of the k-1 partners of each of its k experts, so the strength ``s_i = k(k-1) p_i`` and
    ``sum_i s_i = k(k-1)``. Both identities are exact for distinct top-k sets, so the null model
    can be built from the stored graph without the top-k arrays.
    """
    w = np.asarray(w, dtype=np.float64)
    strength = w.sum(axis=1)  # (E,)
    total = strength.sum()
    if total <= 0:
        raise ValueError("graph has no edges; marginals cannot be recovered")
    k_float = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * total))  # root of k(k-1) = total
    k = int(round(k_float))
    if abs(k_float - k) > 1e-6:
        raise ValueError(f"total strength {total} is not k(k-1) for an integer k; is w thresholded?")
    return strength / total, k


@dataclass(frozen=True)
class NullMargins:
    """Margins of an observed co-activation graph over its null graphs (one layer, Table 9).

    Attributes:
        q_observed: modularity of the observed thresholded graph's Louvain partition.
        q_null: (samples,) the same for each null graph.
        q_margin: q_observed - mean(q_null) (Table 9's "Delta Q").
        q_beat_share: fraction of null graphs with strictly lower Q than observed.
        nmi_observed: NMI of the observed partition against the base partition.
        nmi_null: (samples,) NMI of each null graph's partition against the base partition.
        nmi_margin: nmi_observed - mean(nmi_null) (Table 9's "Delta NMI").
        nmi_beat_share: fraction of null graphs with strictly lower NMI than observed.
    """

    q_observed: float
    q_null: np.ndarray
    q_margin: float
    q_beat_share: float
    nmi_observed: float
    nmi_null: np.ndarray
    nmi_margin: float
    nmi_beat_share: float

    @property
    def beats_all_q(self) -> bool:
        """Whether the observed graph beats every null graph on modularity (a Table 9 "cell")."""
        return self.q_beat_share == 1.0


def null_margins(
    w_real: np.ndarray,
    labels_base: np.ndarray,
    num_tokens: int,
    samples: int = 100,
    seed: int = 0,
    rho: float = 0.10,
    resolution: float = 1.0,
    detector_seed: int = 0,
    threshold: float = 1e-6,
    max_level: int = LOUVAIN_MAX_LEVEL,
) -> NullMargins:
    """Modularity and NMI margins of one observed layer graph over its marginal-preserving null.

    Implements the Table 9 comparison of Appendix B.1 of the paper. What is compared:

    - Observed: ``w_real`` (unthresholded eq. (1) graph) is thresholded at ``rho``, partitioned by
      Louvain (``resolution``, ``detector_seed``, stopping rule ``threshold`` / ``max_level``),
      and scored by (a) the modularity Q of that partition on that thresholded graph and (b) the
      NMI of that partition against ``labels_base``, the base checkpoint's partition of the same
      layer (so a base-model row has NMI 1 by construction).
    - Null: ``samples`` graphs from `null_graphs`, with p and k recovered exactly from
      ``w_real`` (`graph_marginals`) and the same N, go through the identical threshold ->
      Louvain -> (Q, NMI against ``labels_base``) pipeline.
    - Margins are observed minus the mean over null graphs; beat shares count null graphs the
      observed value strictly exceeds (Table 9 reports Q beaten in 100% of cells).

    The observed graph and its null graphs are thresholded and scored as one (samples + 1)
    stack (`threshold_top_fraction` and `modularities` are vectorised over it); only Louvain
    runs once per graph.

    Args:
        w_real: (E, E) unthresholded co-activation graph of the evaluated checkpoint's layer.
        labels_base: (E,) base-checkpoint community labels for the same layer.
        num_tokens: N, the number of probe tokens behind ``w_real``.
        samples: null graphs per layer (the paper uses 100).
        seed: seed of the null-graph generator.
        rho: retained edge fraction (default 0.10, §2).
        resolution: modularity resolution gamma for Louvain and Q.
        detector_seed: Louvain seed (0 in the main rows, F.9).
        threshold: Louvain's modularity-gain stopping threshold (F.9's dQ < 1e-6).
        max_level: Louvain's level cap (F.9's 100 iterations).
    """
    w_real = np.asarray(w_real, dtype=np.float64)
    labels_base = np.asarray(labels_base)
    if labels_base.shape != (w_real.shape[0],):
        raise ValueError(f"labels_base must have shape ({w_real.shape[0]},), got {labels_base.shape}")
    p, k = graph_marginals(w_real)
    nulls = null_graphs(p, num_tokens, k, samples=samples, seed=seed)  # (S, E, E)
    kept = threshold_top_fraction(np.concatenate([w_real[None], nulls]), rho)  # (S+1, E, E)
    labels = np.stack(
        [louvain(g, resolution, detector_seed, threshold=threshold, max_level=max_level) for g in kept]
    )  # (S+1, E)
    q = modularities(kept, labels, resolution)  # (S+1,)
    nmi = np.array([community_nmi(lab, labels_base) for lab in labels])  # (S+1,)
    q_obs, q_null = float(q[0]), q[1:]
    nmi_obs, nmi_null = float(nmi[0]), nmi[1:]
    return NullMargins(
        q_observed=q_obs,
        q_null=q_null,
        q_margin=float(q_obs - q_null.mean()),
        q_beat_share=float(np.mean(q_obs > q_null)),
        nmi_observed=nmi_obs,
        nmi_null=nmi_null,
        nmi_margin=float(nmi_obs - nmi_null.mean()),
        nmi_beat_share=float(np.mean(nmi_obs > nmi_null)),
    )
