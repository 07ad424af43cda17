"""Layer-wise community detection on co-activation graphs and Newman modularity.

Implements the detector configuration of Appendix F.9 (Louvain, Leiden at matched parameters)
and the modularity Q of §2 of the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "LOUVAIN_MAX_LEVEL",
    "Detector",
    "canonical_labels",
    "leiden",
    "louvain",
    "modularities",
    "modularity",
]

# F.9 caps Louvain at "a maximum of 100 iterations" (config probe.detector.max_iterations); the
# default of `louvain`'s max_level, see there for how it maps to networkx.
LOUVAIN_MAX_LEVEL = 100


def _check_graph(w: np.ndarray) -> np.ndarray:
    """Validate a symmetric, non-negative (E, E) weight matrix and return it as float64."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        raise ValueError(f"w must be a square (E, E) matrix, got {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("w must be finite and non-negative")
    if np.abs(w - w.T).max(initial=0.0) > 1e-12:
        raise ValueError("w must be symmetric")
    if w.min(initial=0.0) < 0:
        raise ValueError("w must be finite and non-negative")
    return w


def _edge_list(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positive off-diagonal edges (i < j) in row-major order: (ii, jj, weights), each (M,)."""
    iu, ju = np.triu_indices(w.shape[0], k=1)
    weights = w[iu, ju]
    keep = weights > 0
    return iu[keep], ju[keep], weights[keep]


def canonical_labels(labels: np.ndarray) -> np.ndarray:
    """Renumber a partition so communities are numbered 0, 1, ... in order of their smallest expert id.

    Detectors return communities in arbitrary (seed-dependent) order; canonical numbering makes
    identical partitions compare equal element-wise and keeps outputs deterministic.
    """
    labels = np.asarray(labels)
    # np.unique's return_index gives each label's first (= smallest) expert id.
    uniq, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(uniq))
    return rank[inverse.reshape(-1)]


def _sets_to_labels(communities: list, n_nodes: int) -> np.ndarray:
    """Convert a list of node collections into an (E,) canonical label vector."""
    labels = np.full(n_nodes, -1, dtype=np.int64)
    for c, members in enumerate(communities):
        labels[list(members)] = c
    if np.any(labels < 0):
        raise RuntimeError("community detector left some experts unassigned")
    return canonical_labels(labels)


def louvain(
    w: np.ndarray,
    resolution: float = 1.0,
    seed: int = 0,
    threshold: float = 1e-6,
    max_level: int = LOUVAIN_MAX_LEVEL,
) -> np.ndarray:
    """Louvain communities of a weighted co-activation graph, as canonical (E,) labels.

    Implements the Louvain detector of §2 / Appendix F.9 of the paper (resolution gamma = 1.0,
    raw weights, seed 0 in the main rows) via ``networkx.community.louvain_communities``.

    Mapping of F.9's stopping rule ("a maximum of 100 iterations or convergence within
    dQ < 1e-6") onto networkx:

    - ``threshold=1e-6`` is networkx's modularity-gain stopping rule: after each level
      (local moving + aggregation) it stops once the modularity gained over the previous level is
      ``<= threshold``, which is the dQ < 1e-6 convergence criterion (equality has measure zero).
    - ``max_level`` (config ``probe.detector.max_iterations``, default 100) caps the number of
      such levels. networkx exposes no cap on the sweeps inside one level (local moving repeats
      until no node moves, which always terminates), so the outer Louvain iteration is the only
      one an "iterations" cap can refer to. A level is only continued after at least one node
      moved, which empties a community, so an E-node graph has at most E levels and a cap of 100
      never binds for E <= 100 (64 and 128 routed experts here); smaller caps do bind.

    Every expert is a node, including experts with no retained edge (they stay singletons), and
    nodes/edges are inserted in id order, so the result depends only on (w, resolution, seed).

    Args:
        w: (E, E) symmetric, non-negative, zero-diagonal weights (typically thresholded).
        resolution: modularity resolution gamma.
        seed: detector seed (node visiting order).
        threshold: modularity-gain stopping threshold between levels.
        max_level: the most Louvain levels (F.9's iteration cap), a positive integer.

    Returns:
        (E,) int64 community labels, numbered by each community's smallest expert id.
    """
    if int(max_level) != max_level or max_level < 1:
        raise ValueError(f"max_level must be a positive integer, got {max_level}")
    import networkx as nx

    w = _check_graph(w)
    n_nodes = w.shape[0]
    ii, jj, weights = _edge_list(w)
    graph = nx.Graph()
    graph.add_nodes_from(range(n_nodes))
    graph.add_weighted_edges_from(zip(ii.tolist(), jj.tolist(), weights.tolist(), strict=True))
    communities = nx.community.louvain_communities(
        graph,
        weight="weight",
        resolution=resolution,
        threshold=threshold,
        max_level=int(max_level),
        seed=seed,
    )
    return _sets_to_labels(communities, n_nodes)


def leiden(w: np.ndarray, resolution: float = 1.0, seed: int = 0, n_iterations: int = -1) -> np.ndarray:
    """Leiden communities of a weighted co-activation graph, as canonical (E,) labels.

    Implements the Leiden robustness detector of Appendix B.2 / F.9 of the paper "at otherwise
    matched parameters": ``leidenalg.RBConfigurationVertexPartition`` optimises the same
    resolution-gamma Newman modularity as Louvain on the same raw weights, and
    ``n_iterations=-1`` iterates until a pass no longer improves the partition, mirroring
    Louvain's run-to-convergence rule.

    Args:
        w: (E, E) symmetric, non-negative, zero-diagonal weights.
        resolution: modularity resolution gamma (``resolution_parameter``).
        seed: leidenalg's random seed.
        n_iterations: passes of the Leiden algorithm; negative means until convergence.

    Returns:
        (E,) int64 community labels, numbered by each community's smallest expert id.
    """
    import igraph as ig
    import leidenalg

    w = _check_graph(w)
    n_nodes = w.shape[0]
    ii, jj, weights = _edge_list(w)
    graph = ig.Graph(n=n_nodes, edges=list(zip(ii.tolist(), jj.tolist(), strict=True)))
    graph.es["weight"] = weights.tolist()
    partition = leidenalg.find_partition(
        graph,
        leidenalg.RBConfigurationVertexPartition,
        weights="weight",
        resolution_parameter=resolution,
        n_iterations=n_iterations,
        seed=seed,
    )
    return canonical_labels(np.asarray(partition.membership, dtype=np.int64))


def modularity(w: np.ndarray, labels: np.ndarray, resolution: float = 1.0) -> float:
    """Newman modularity Q of a partition of a weighted graph.

    Implements the modularity Q of §2 / Appendix F.9 of the paper (Newman, 2006):
    ``Q = sum_c [ W_cc / (2m) - gamma * (d_c / (2m))**2 ]`` where ``2m = sum_ij w_ij``, ``W_cc`` is
    the summed weight of ordered pairs inside community c and ``d_c`` its total strength. This is
    the same quantity as ``networkx.community.modularity`` on the undirected weighted graph.

    Returns NaN for a graph with no edges, where Q is undefined (0/0).
    """
    w = _check_graph(w)
    labels = np.asarray(labels)
    if labels.shape != (w.shape[0],):
        raise ValueError(f"labels must have shape ({w.shape[0]},), got {labels.shape}")
    two_m = w.sum()
    if two_m <= 0:
        return float("nan")
    _, comm = np.unique(labels, return_inverse=True)
    onehot = np.zeros((w.shape[0], comm.max() + 1))  # (E, C)
    onehot[np.arange(w.shape[0]), comm.reshape(-1)] = 1.0
    within = np.einsum("ic,ij,jc->", onehot, w, onehot)  # sum_c W_cc
    strength = onehot.T @ w.sum(axis=1)  # (C,)
    return float(within / two_m - resolution * np.sum((strength / two_m) ** 2))


def modularities(w: np.ndarray, labels: np.ndarray, resolution: float = 1.0) -> np.ndarray:
    """`modularity` of a stack of graphs and partitions at once, (S, E, E) and (S, E) -> (S,).

    The same Newman Q per graph (NaN for a graph with no edges), vectorised over the stack:
    within-community weight from a same-label mask, community strengths from one offset
    ``bincount``. Values equal `modularity`'s up to float summation order.
    """
    w = np.asarray(w, dtype=np.float64)
    labels = np.asarray(labels)
    if w.ndim != 3 or w.shape[1] != w.shape[2] or labels.shape != w.shape[:2]:
        raise ValueError(f"need (S, E, E) graphs and (S, E) labels, got {w.shape} and {labels.shape}")
    for graph in w:
        _check_graph(graph)
    n_graphs, n_nodes = labels.shape
    two_m = w.sum(axis=(1, 2))  # (S,)
    same = labels[:, :, None] == labels[:, None, :]  # (S, E, E)
    within = np.where(same, w, 0.0).sum(axis=(1, 2))  # (S,) sum_c W_cc
    _, comm = np.unique(labels, return_inverse=True)
    comm = comm.reshape(n_graphs, n_nodes)
    n_comms = int(comm.max()) + 1
    offsets = (np.arange(n_graphs) * n_comms)[:, None]  # (S, 1)
    strength = np.bincount(
        (comm + offsets).ravel(), weights=w.sum(axis=2).ravel(), minlength=n_graphs * n_comms
    )
    strength = strength.reshape(n_graphs, n_comms)  # (S, C) d_c
    with np.errstate(divide="ignore", invalid="ignore"):
        q = within / two_m - resolution * np.sum((strength / two_m[:, None]) ** 2, axis=1)
    return np.where(two_m > 0, q, np.nan)


@dataclass(frozen=True)
class Detector:
    """Community detection settings (F.9): algorithm, resolution gamma, seed, edge fraction rho.

    ``tolerance`` and ``max_iterations`` are Louvain's stopping rule (config
    ``probe.detector.tolerance`` / ``max_iterations``: dQ < 1e-6 or at most 100 levels, see
    `louvain`); Leiden runs to convergence at otherwise matched parameters.
    """

    name: str = "louvain"
    resolution: float = 1.0
    seed: int = 0
    tolerance: float = 1e-6
    rho: float = 0.10
    max_iterations: int = LOUVAIN_MAX_LEVEL

    def detect(self, w: np.ndarray) -> np.ndarray:
        """Canonical (E,) labels of one thresholded layer graph."""
        if self.name == "louvain":
            return louvain(w, self.resolution, self.seed, self.tolerance, self.max_iterations)
        if self.name == "leiden":
            return leiden(w, self.resolution, self.seed)
        raise ValueError(f"unknown detector {self.name!r} (louvain or leiden)")
