"""Co-activation graphs, edge thresholding and community detection against independent references."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from tests.coactivation_reference import naive_coactivation, naive_kept_edges
from workflow_scripts.routing_metrics.communities import canonical_labels, leiden, louvain, modularity
from workflow_scripts.routing_metrics.graphs import (
    coactivation,
    coactivation_layers,
    num_edges,
    num_kept_edges,
    threshold_top_fraction,
)
from workflow_scripts.routing_metrics.metrics import community_nmi


def random_topk(rng: np.random.Generator, shape: tuple[int, ...], num_experts: int, k: int) -> np.ndarray:
    """(..., N, k) distinct expert ids with a skewed popularity so weights vary."""
    scores = rng.random((*shape, num_experts)) * np.linspace(0.2, 1.0, num_experts)
    return np.argsort(-scores, axis=-1)[..., :k]


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


def kept_pairs(kept: np.ndarray) -> set[tuple[int, int]]:
    return {(int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(kept, 1)), strict=True)}


@pytest.mark.parametrize("rho", [0.05, 0.10, 0.20])
def test_threshold_cut_rule_under_ties_is_independent_of_order(rho):
    rng = np.random.default_rng(4)
    num_experts, n_tokens = 16, 60  # toy scale: small N makes equal counts at the cut likely
    topk = random_topk(rng, (n_tokens,), num_experts, 4)
    w = coactivation(topk, num_experts)
    budget = num_kept_edges(num_experts, rho)
    ranked = np.sort(w[np.triu_indices(num_experts, 1)])[::-1]
    cut = ranked[budget - 1]
    assert ranked[budget] == cut  # a tie straddles the cut, so the rule there is exercised
    kept = kept_pairs(threshold_top_fraction(w, rho))
    assert len(kept) == budget
    pairs = [(int(i), int(j)) for i, j in zip(*np.triu_indices(num_experts, 1), strict=True)]
    for _ in range(3):
        # Neither token order nor the order pairs are listed in moves the cut.
        shuffled = coactivation(rng.permutation(topk), num_experts)
        assert kept_pairs(threshold_top_fraction(shuffled, rho)) == kept
        assert naive_kept_edges(w, rho, [pairs[i] for i in rng.permutation(len(pairs))]) == kept
    # Relabelled experts: edges above the cut follow their experts; tied ones go by the new ids.
    new_id = rng.permutation(num_experts)
    w_new = coactivation(new_id[topk], num_experts)
    kept_new = kept_pairs(threshold_top_fraction(w_new, rho))
    above = {tuple(sorted((int(new_id[i]), int(new_id[j])))) for i, j in kept if w[i, j] > cut}
    assert above == {pair for pair in kept_new if w_new[pair] > cut}
    assert kept_new == naive_kept_edges(w_new, rho, pairs)


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


# --- vectorised co-activation, fast Louvain, batched threshold/modularity (issue 4 audit) ----------


def itertools_coactivation(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """Per-token reference: Python ints, itertools.permutations over each token's ordered pairs."""
    import itertools

    w = np.zeros((num_experts, num_experts))
    for row in np.asarray(topk).tolist():
        for i, j in itertools.permutations(row, 2):
            w[i, j] += 1
    return w / len(topk)


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.uint8])
def test_coactivation_layers_matches_per_token_loop_for_any_id_order_and_dtype(dtype):
    rng = np.random.default_rng(11)
    topk = random_topk(rng, (4, 700), 64, 6)
    topk = np.take_along_axis(topk, rng.permuted(np.tile(np.arange(6), (4, 700, 1)), axis=-1), axis=-1)
    stacked = coactivation_layers(topk.astype(dtype), 64)
    assert stacked.dtype == np.float64 and stacked.shape == (4, 64, 64)
    for layer in range(4):
        np.testing.assert_array_equal(stacked[layer], itertools_coactivation(topk[layer], 64))
    # The probe stores ids ascending and as a non-contiguous view must give the same graph.
    np.testing.assert_array_equal(coactivation_layers(np.sort(topk, axis=-1)[:, ::2], 64)[0],
                                  itertools_coactivation(np.sort(topk[0], axis=-1)[::2], 64))  # fmt: skip


def test_coactivation_single_expert_rows_have_no_edges():
    assert not coactivation(np.array([[3], [1], [3]]), 5).any()


@pytest.mark.parametrize("position", [(0, 1), (2, 5), (4, 5)])
def test_coactivation_rejects_a_repeated_id_at_any_positions(position):
    topk = random_topk(np.random.default_rng(3), (2, 50), 16, 6)
    topk[1, 17, position[1]] = topk[1, 17, position[0]]
    with pytest.raises(ValueError, match="distinct"):
        coactivation_layers(topk, 16)


def test_louvain_level_cap_binds_and_is_validated():
    from workflow_scripts.probe.null_model import null_graphs

    # A thresholded null graph on which Louvain runs more than one level.
    p = np.random.default_rng(0).dirichlet(np.full(64, 3.0))
    w = threshold_top_fraction(null_graphs(p, 3000, 6, samples=1, seed=0)[0], 0.1)
    one, full = louvain(w, max_level=1), louvain(w)
    assert one.max() > full.max()  # the cap stopped before the second level merged communities
    from workflow_scripts.routing_metrics.communities import Detector

    np.testing.assert_array_equal(Detector(max_iterations=1).detect(w), one)
    np.testing.assert_array_equal(Detector().detect(w), full)
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="max_level"):
            louvain(w, max_level=bad)


def test_batched_threshold_and_modularities_equal_one_at_a_time():
    from workflow_scripts.routing_metrics.communities import modularities

    rng = np.random.default_rng(8)
    raw = np.stack([coactivation(random_topk(rng, (400,), 24, 4), 24) for _ in range(5)])
    raw[2] = np.round(raw[2], 2)  # ties: the stable order must match the single-graph path
    for rho in (0.05, 0.1, 0.5, 1.0):
        kept = threshold_top_fraction(raw, rho)
        for graph, one in zip(raw, kept, strict=True):
            np.testing.assert_array_equal(one, threshold_top_fraction(graph, rho))
        labels = np.stack([louvain(g) for g in kept])
        labels[3] = labels[3] * 7 + 2  # arbitrary label values
        for resolution in (0.5, 1.0):
            q = modularities(kept, labels, resolution)
            expected = [modularity(g, lab, resolution) for g, lab in zip(kept, labels, strict=True)]
            np.testing.assert_allclose(q, expected, rtol=0, atol=1e-12)
    assert np.isnan(modularities(np.zeros((2, 3, 3)), np.zeros((2, 3), int))).all()
