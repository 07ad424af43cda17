"""Co-activation graphs, edge thresholding and community detection against independent references."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from workflow_scripts.probe.communities import canonical_labels, leiden, louvain, modularity
from workflow_scripts.probe.graphs import (
    coactivation,
    coactivation_layers,
    num_edges,
    num_kept_edges,
    threshold_top_fraction,
)
from workflow_scripts.probe.metrics import community_nmi


def random_topk(rng: np.random.Generator, shape: tuple[int, ...], num_experts: int, k: int) -> np.ndarray:
    """(..., N, k) distinct expert ids with a skewed popularity so weights vary."""
    scores = rng.random((*shape, num_experts)) * np.linspace(0.2, 1.0, num_experts)
    return np.argsort(-scores, axis=-1)[..., :k]


def naive_coactivation(topk: np.ndarray, num_experts: int) -> np.ndarray:
    w = np.zeros((num_experts, num_experts))
    for row in topk:
        for i in row:
            for j in row:
                if i != j:
                    w[i, j] += 1
    return w / len(topk)


@pytest.mark.parametrize(("n_tokens", "num_experts", "k"), [(500, 64, 6), (300, 16, 2), (1, 8, 8)])
def test_coactivation_matches_naive_loop(n_tokens, num_experts, k):
    topk = random_topk(np.random.default_rng(n_tokens), (n_tokens,), num_experts, k)
    w = coactivation(topk, num_experts)
    np.testing.assert_allclose(w, naive_coactivation(topk, num_experts), rtol=0, atol=1e-12)
    assert w.dtype == np.float64
    assert np.array_equal(w, w.T)
    assert np.all(np.diag(w) == 0)
    # Each token contributes k(k-1)/2 unordered pairs, so the upper triangle sums to that.
    assert np.triu(w).sum() == pytest.approx(k * (k - 1) / 2)


def test_coactivation_layers_equals_per_layer():
    topk = random_topk(np.random.default_rng(1), (3, 200), 32, 4)
    stacked = coactivation_layers(topk, 32)
    assert stacked.shape == (3, 32, 32)
    for layer in range(3):
        np.testing.assert_array_equal(stacked[layer], coactivation(topk[layer], 32))


@pytest.mark.parametrize(
    "bad",
    [np.array([[0, 0, 1]]), np.array([[0, 9, 1]]), np.array([[0.0, 1.0, 2.0]]), np.zeros((0, 3), int)],
)
def test_coactivation_rejects_invalid_topk(bad):
    with pytest.raises((ValueError, TypeError)):
        coactivation(bad, 8)


def test_threshold_keeps_largest_edges_with_round_half_up_budget():
    rng = np.random.default_rng(2)
    for num_experts, rho in [(64, 0.10), (64, 0.05), (64, 0.2), (10, 0.5), (20, 1.0)]:
        w = np.triu(rng.random((num_experts, num_experts)) + 0.01, 1)
        w = w + w.T
        kept = threshold_top_fraction(w, rho)
        m = num_edges(num_experts)
        expected = int(np.floor(rho * m + 0.5))
        assert num_kept_edges(num_experts, rho) == expected
        upper = np.triu(kept, 1)
        assert np.count_nonzero(upper) == expected
        assert np.array_equal(kept, kept.T) and np.all(np.diag(kept) == 0)
        # Raw weights survive and every kept edge outweighs every dropped one.
        mask = upper > 0
        np.testing.assert_array_equal(upper[mask], w[mask])
        dropped = np.triu(w, 1)[~mask & np.triu(np.ones_like(w, bool), 1)]
        assert dropped.size == 0 or upper[mask].min() > dropped.max()
    assert num_kept_edges(64, 0.10) == 202  # 201.6 rounds up
    assert num_kept_edges(5, 0.25) == 3  # 2.5: half rounds up, not to even


def test_threshold_ties_and_zero_weights():
    w = np.zeros((4, 4))
    for i, j in [(0, 1), (0, 2), (1, 3), (2, 3)]:
        w[i, j] = w[j, i] = 1.0
    # Budget 3 of 6 edges among four equal weights: the lexicographically first pairs win.
    kept = threshold_top_fraction(w, 0.5)
    assert {(i, j) for i, j in zip(*np.nonzero(np.triu(kept)), strict=True)} == {(0, 1), (0, 2), (1, 3)}
    # Budget 6 but only 4 positive edges: zero-weight pairs are never kept.
    assert np.count_nonzero(np.triu(threshold_top_fraction(w, 1.0))) == 4
    with pytest.raises(ValueError):
        threshold_top_fraction(w, 0.0)
    with pytest.raises(ValueError):
        threshold_top_fraction(np.triu(w), 0.5)


def planted_graph(seed: int, n_blocks: int = 4, block: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = n_blocks * block
    truth = np.repeat(np.arange(n_blocks), block)
    same = truth[:, None] == truth[None, :]
    w = np.where(same, rng.uniform(0.5, 1.0, (n, n)), rng.uniform(0.0, 0.1, (n, n)))
    w = np.triu(w, 1)
    return w + w.T, truth


@pytest.mark.parametrize("seed", [0, 1, 42])
@pytest.mark.parametrize("detector", [louvain, leiden])
def test_planted_partition_recovered(detector, seed):
    w, truth = planted_graph(seed)
    labels = detector(w, seed=seed)
    assert community_nmi(labels, truth) == 1.0
    np.testing.assert_array_equal(labels, truth)  # canonical numbering by smallest expert id
    # Thresholded to exactly the 4 * 28 intra-block edges (all heavier than any inter-block edge).
    thr = threshold_top_fraction(w, 112 / num_edges(32))
    assert np.count_nonzero(np.triu(thr)) == 112
    assert community_nmi(detector(thr, seed=seed), truth) == 1.0


def test_detectors_are_deterministic_and_agree_on_modularity():
    w = coactivation(random_topk(np.random.default_rng(3), (2000,), 32, 4), 32)
    thr = threshold_top_fraction(w, 0.2)
    a, b = louvain(thr, seed=0), louvain(thr, seed=0)
    np.testing.assert_array_equal(a, b)
    lei = leiden(thr, seed=0)
    np.testing.assert_array_equal(lei, leiden(thr, seed=0))
    assert abs(modularity(thr, a) - modularity(thr, lei)) < 0.05
    # Experts without any retained edge stay singleton communities.
    isolated = np.flatnonzero(thr.sum(axis=1) == 0)
    for expert in isolated:
        assert np.sum(a == a[expert]) == 1


@pytest.mark.parametrize("resolution", [1.0, 0.5, 1.7])
def test_modularity_matches_networkx(resolution):
    rng = np.random.default_rng(4)
    w = threshold_top_fraction(coactivation(random_topk(rng, (1000,), 24, 3), 24), 0.3)
    graph = nx.Graph()
    graph.add_nodes_from(range(24))
    for i, j in zip(*np.nonzero(np.triu(w, 1)), strict=True):
        graph.add_edge(int(i), int(j), weight=w[i, j])
    for labels in [louvain(w), rng.integers(0, 5, 24), np.zeros(24, int), np.arange(24)]:
        comms = [set(np.flatnonzero(labels == c).tolist()) for c in np.unique(labels)]
        expected = nx.community.modularity(graph, comms, weight="weight", resolution=resolution)
        assert modularity(w, labels, resolution) == pytest.approx(expected, abs=1e-12)
    assert np.isnan(modularity(np.zeros((3, 3)), np.zeros(3, int)))


def test_canonical_labels():
    np.testing.assert_array_equal(canonical_labels(np.array([7, 7, 3, 9, 3])), [0, 0, 1, 2, 1])
