"""Routing metrics and the marginal-preserving null model against independent references."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cityblock, jensenshannon
from sklearn.metrics import normalized_mutual_info_score

from workflow_scripts.probe.null_model import (
    expected_null_graph,
    graph_marginals,
    null_graphs,
    null_graphs_from_topk,
    null_margins,
)
from workflow_scripts.routing_metrics.communities import louvain, modularity
from workflow_scripts.routing_metrics.graphs import coactivation, threshold_top_fraction
from workflow_scripts.routing_metrics.metrics import (
    centroid_cosine,
    community_nmi,
    cross_domain_l1,
    effective_expert_fraction,
    expert_marginals,
    jsd,
    layer_mean_effective_fraction,
    layer_mean_nmi,
    sharpness,
    topk_overlap,
    tvd,
)


def random_dist(rng: np.random.Generator, n: int, zeros: int = 0) -> np.ndarray:
    p = rng.random(n) ** 3
    p[rng.choice(n, zeros, replace=False)] = 0.0
    return p / p.sum()


# --- community NMI -------------------------------------------------------------------------------


def test_community_nmi_matches_sklearn():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(2, 80))
        a = rng.integers(0, int(rng.integers(1, 10)), n)
        b = a.copy() if trial % 5 == 0 else rng.integers(0, int(rng.integers(1, 10)), n)
        expected = normalized_mutual_info_score(a, b, average_method="arithmetic")
        assert community_nmi(a, b) == pytest.approx(expected, abs=1e-12)


def test_community_nmi_conventions():
    assert community_nmi(np.zeros(5, int), np.full(5, 3)) == 1.0  # both single-community
    assert community_nmi(np.zeros(4, int), np.array([0, 0, 1, 1])) == 0.0  # only one trivial
    assert community_nmi(np.array([0, 0, 1, 1]), np.array([5, 5, 2, 2])) == 1.0  # relabelling
    a, b = [np.array([0, 0, 1, 1]), np.zeros(4, int)], [np.array([1, 1, 0, 0]), np.array([0, 0, 1, 1])]
    assert layer_mean_nmi(a, b) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        layer_mean_nmi(a, b[:1])


# --- marginal shift, overlap, probe statistics --------------------------------------------------


def test_expert_marginals_batched():
    topk = np.array([[[0, 1], [1, 2]], [[3, 0], [3, 1]]])  # (L=2, N=2, k=2)
    np.testing.assert_allclose(expert_marginals(topk, 4), [[0.25, 0.5, 0.25, 0.0], [0.25, 0.25, 0.0, 0.5]])
    np.testing.assert_allclose(expert_marginals(topk[0], 4), [0.25, 0.5, 0.25, 0.0])


def test_tvd_matches_scipy_cityblock():
    """TVD = 0.5 * L1 distance, against scipy's independent L1 (``cityblock``) implementation."""
    rng = np.random.default_rng(7)
    for trial in range(50):
        p, q = random_dist(rng, 64, zeros=trial % 5), random_dist(rng, 64, zeros=(trial + 2) % 4)
        assert tvd(p, q) == pytest.approx(0.5 * cityblock(p, q), abs=1e-15)
    batch_p = np.stack([random_dist(rng, 16, zeros=0) for _ in range(6)])
    batch_q = np.stack([random_dist(rng, 16, zeros=3) for _ in range(6)])
    expected = [0.5 * cityblock(a, b) for a, b in zip(batch_p, batch_q, strict=True)]
    np.testing.assert_allclose(tvd(batch_p, batch_q), expected, rtol=0, atol=1e-15)
    one_hot = np.eye(8)
    assert tvd(one_hot[0], one_hot[3]) == 0.5 * cityblock(one_hot[0], one_hot[3]) == 1.0


def test_tvd_and_jsd_match_references():
    rng = np.random.default_rng(1)
    for trial in range(50):
        p, q = random_dist(rng, 64, zeros=trial % 4), random_dist(rng, 64, zeros=(trial + 1) % 3)
        assert tvd(p, q) == pytest.approx(0.5 * np.sum(np.abs(p - q)), abs=1e-15)
        assert jsd(p, q) == pytest.approx(jensenshannon(p, q, base=2) ** 2, abs=1e-12)
        assert jsd(p, q, base=np.e) == pytest.approx(jensenshannon(p, q) ** 2, abs=1e-12)
    p = np.array([1.0, 0.0])
    assert jsd(p, p[::-1]) == pytest.approx(1.0)  # disjoint supports: 1 bit
    assert tvd(p, p[::-1]) == 1.0
    batch_p, batch_q = np.stack([p, [0.5, 0.5]]), np.stack([p[::-1], [0.5, 0.5]])
    np.testing.assert_allclose(jsd(batch_p, batch_q), [1.0, 0.0], atol=1e-15)
    with pytest.raises(ValueError):
        tvd(np.array([2.0, 1.0]), np.array([0.5, 0.5]))  # counts, not a distribution


def test_topk_overlap_matches_naive_loop():
    rng = np.random.default_rng(2)
    a = np.argsort(rng.random((3, 400, 64)), axis=-1)[..., :6]
    b = np.where(rng.random((3, 400, 1)) < 0.5, a, np.argsort(rng.random((3, 400, 64)), axis=-1)[..., :6])
    naive = np.mean(
        [
            len(set(x) & set(y)) / 6
            for la, lb in zip(a, b, strict=True)
            for x, y in zip(la.tolist(), lb.tolist(), strict=True)
        ]
    )
    assert topk_overlap(a, b, 6) == pytest.approx(naive, abs=1e-12)
    assert topk_overlap(a, a) == 1.0
    assert topk_overlap(np.array([[0, 1]]), np.array([[1, 0]]), k=2) == 1.0
    assert topk_overlap(np.array([[0, 1]]), np.array([[2, 3]]), k=2) == 0.0


def test_sharpness_cross_domain_and_effective_fraction_by_hand():
    p = np.array([0.5, 0.25, 0.25, 0.0])
    # |0.5-.25| + 0 + 0 + |0-.25| = 0.5
    assert sharpness(p) == pytest.approx(0.5)
    assert sharpness(np.full(8, 1 / 8)) == pytest.approx(0.0)
    assert sharpness(np.array([1.0, 0, 0, 0])) == pytest.approx(2 - 2 / 4)
    assert cross_domain_l1(p, np.array([0.25, 0.25, 0.25, 0.25])) == pytest.approx(0.5)
    # H = 0.5 ln 2 + 2 * 0.25 ln 4 = 1.5 ln 2 nats, exp(H) = 2**1.5.
    assert effective_expert_fraction(p) == pytest.approx(2**1.5 / 4)
    assert effective_expert_fraction(6 * p) == pytest.approx(2**1.5 / 4)  # P_topk scale is irrelevant
    assert effective_expert_fraction(np.full(64, 1 / 64)) == pytest.approx(1.0)
    assert effective_expert_fraction(np.eye(4)[0]) == pytest.approx(0.25)


def test_layer_mean_effective_fraction_averages_per_layer_values():
    # Two layers, each concentrated on different experts (k = 2): each layer alone is sharp,
    # their mean is flat, so averaging before exp(H) would give a much broader fraction.
    p_topk = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.6, 0.4]])
    per_layer = []
    for row in p_topk:
        prob = row[row > 0] / row.sum()
        per_layer.append(np.exp(-np.sum(prob * np.log(prob))) / row.size)
    expected = np.mean(per_layer)  # (0.5 + exp(H(0.8, 0.2)) / 4) / 2
    assert layer_mean_effective_fraction(p_topk) == pytest.approx(expected, rel=1e-12)
    assert expected == pytest.approx(0.456, abs=1e-3)
    # The layer-averaged distribution (0.25, 0.25, 0.4, 0.1) gives 0.908 instead.
    assert effective_expert_fraction(p_topk.mean(axis=0)) == pytest.approx(0.908, abs=1e-3)
    with pytest.raises(ValueError, match="shape"):
        layer_mean_effective_fraction(p_topk[0])


def test_centroid_cosine():
    a = np.array([[[1.0, 0.0]], [[1.0, 2.0]]])  # (samples, layers, E) -> centroid [1, 1]
    b = np.array([2.0, 0.0])
    assert centroid_cosine(a, b) == pytest.approx(1 / np.sqrt(2))
    assert centroid_cosine(b, b) == pytest.approx(1.0)


# --- null model ----------------------------------------------------------------------------------


def block_topk(seed: int, n_tokens: int = 4000, n_blocks: int = 4, block: int = 8, k: int = 4) -> np.ndarray:
    """Tokens that mostly route inside one of n_blocks expert groups (planted co-activation)."""
    rng = np.random.default_rng(seed)
    n = n_blocks * block
    group = rng.integers(0, n_blocks, (n_tokens, 1))
    scores = rng.gumbel(size=(n_tokens, n)) + 3.0 * ((np.arange(n) // block)[None, :] == group)
    scores += np.linspace(0.0, 1.0, n)  # non-uniform marginals
    return np.argsort(-scores, axis=1)[:, :k]


def test_null_graph_mean_approaches_product_of_marginals():
    topk = block_topk(0)
    n_tokens, k = topk.shape
    p = expert_marginals(topk, 32)
    nulls = null_graphs(p, n_tokens, k, samples=2000, seed=0)
    assert nulls.shape == (2000, 32, 32)
    assert np.all(nulls == nulls.transpose(0, 2, 1)) and np.all(nulls[:, np.arange(32), np.arange(32)] == 0)
    # Every sample carries exactly the observed total edge mass.
    observed = coactivation(topk, 32)
    np.testing.assert_allclose(np.triu(nulls).sum(axis=(1, 2)), np.triu(observed).sum(), rtol=1e-12)
    expected = expected_null_graph(p, k)
    off = ~np.eye(32, dtype=bool)
    ratio = expected[off] / np.outer(p, p)[off]
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)  # E[w_ij] ∝ p_i p_j
    # Monte-Carlo mean within 5 standard errors of the expectation, entry-wise.
    stderr = nulls.std(axis=0)[off] / np.sqrt(2000)
    assert np.all(np.abs(nulls.mean(axis=0)[off] - expected[off]) < 5 * stderr + 1e-12)


def test_null_graph_preserves_marginals_in_expectation():
    topk = block_topk(1)
    n_tokens, k = topk.shape
    observed = coactivation(topk, 32)
    p_rec, k_rec = graph_marginals(observed)
    p = expert_marginals(topk, 32)
    np.testing.assert_allclose(p_rec, p, atol=1e-12)  # s_i = k(k-1) p_i is exact
    assert k_rec == k
    nulls = null_graphs_from_topk(topk, 32, samples=1000, seed=3)
    null_p = nulls.mean(axis=0).sum(axis=1) / (k * (k - 1))  # (E,) mean null strength share
    # Exact expectation: p_i (1 - p_i) / (1 - sum p^2), i.e. p up to the self-pair exclusion.
    analytic = p * (1 - p) / (1 - np.sum(p**2))
    np.testing.assert_allclose(null_p, analytic, rtol=0.01)
    np.testing.assert_allclose(null_p, p, rtol=2 * p.max())
    assert null_p.sum() == pytest.approx(1.0)


def test_planted_graph_beats_null_on_modularity():
    topk = block_topk(2)
    observed = coactivation(topk, 32)
    base = louvain(threshold_top_fraction(observed, 0.10))
    result = null_margins(observed, base, topk.shape[0], samples=30, seed=0, rho=0.10)
    assert result.q_null.shape == (30,) and result.nmi_null.shape == (30,)
    assert result.beats_all_q and result.q_beat_share == 1.0
    assert result.q_margin > 0.1
    assert result.nmi_observed == 1.0  # observed partition compared with itself as the base
    assert result.nmi_margin == pytest.approx(1.0 - result.nmi_null.mean())
    thr = threshold_top_fraction(observed, 0.10)
    assert result.q_observed == pytest.approx(modularity(thr, louvain(thr)))
    # Deterministic given the seeds.
    again = null_margins(observed, base, topk.shape[0], samples=30, seed=0, rho=0.10)
    np.testing.assert_array_equal(result.q_null, again.q_null)
    with pytest.raises(ValueError):
        null_margins(threshold_top_fraction(observed, 0.10), base, topk.shape[0], samples=2)


def test_null_margins_equal_the_one_graph_at_a_time_pipeline():
    """The vectorised null model scores exactly the B.1 graphs: same draws, same per-graph pipeline."""
    topk = block_topk(3)
    observed = coactivation(topk, 32)
    base = louvain(threshold_top_fraction(observed, 0.10), seed=1)
    result = null_margins(observed, base, topk.shape[0], samples=12, seed=4, rho=0.15, detector_seed=1)
    p, k = graph_marginals(observed)
    nulls = null_graphs(p, topk.shape[0], k, samples=12, seed=4)  # the same 12 multinomial draws
    q_null, nmi_null = [], []
    for graph in nulls:
        thr = threshold_top_fraction(graph, 0.15)
        labels = louvain(thr, seed=1)
        q_null.append(modularity(thr, labels))
        nmi_null.append(community_nmi(labels, base))
    np.testing.assert_allclose(result.q_null, q_null, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(result.nmi_null, nmi_null)
    assert result.q_beat_share == np.mean(result.q_observed > np.asarray(q_null))
    # A level cap of 1 is passed through to every Louvain run.
    capped = null_margins(observed, base, topk.shape[0], samples=12, seed=4, rho=0.15, max_level=1)
    thr = threshold_top_fraction(nulls[0], 0.15)
    assert capped.q_null[0] == pytest.approx(modularity(thr, louvain(thr, max_level=1)), abs=1e-12)
