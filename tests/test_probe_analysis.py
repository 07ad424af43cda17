"""Retention analysis on synthetic routes with planted structure, against the primitives' definitions."""

from __future__ import annotations

import numpy as np
import pytest

from workflow_scripts.probe import analysis
from workflow_scripts.routing_metrics.communities import Detector

E, K, L, N = 16, 4, 3, 2000


def planted_routes(seed: int, blocks: int = 4, noise: float = 0.05) -> np.ndarray:
    """(L, N, K) top-k sets drawn mostly inside one of ``blocks`` expert blocks per token."""
    rng = np.random.default_rng(seed)
    size = E // blocks
    layers = []
    for _ in range(L):
        block = rng.integers(blocks, size=N)
        rows = []
        for b in block:
            pool = np.arange(E) if rng.random() < noise else np.arange(b * size, (b + 1) * size)
            rows.append(rng.choice(pool, size=K, replace=False))
        layers.append(np.array(rows))
    return np.stack(layers)


@pytest.fixture(scope="module")
def base():
    return planted_routes(0)


def test_identical_routes_retain_everything(base):
    rows, summary = analysis.retention(base, base.copy(), E, Detector(rho=0.2))
    assert len(rows) == L
    assert summary["nmi"] == pytest.approx(1.0)
    assert summary["delta_q"] == pytest.approx(0.0)
    assert summary["tvd"] == pytest.approx(0.0) and summary["jsd"] == pytest.approx(0.0)
    assert summary["topk_overlap"] == pytest.approx(1.0)
    assert summary["q"] > 0.3  # planted blocks are strong communities


def test_scrambled_routes_lose_structure_but_not_marginals(base):
    rng = np.random.default_rng(1)
    relabel = np.stack([rng.permutation(E) for _ in range(L)])  # scramble expert identities per layer
    scrambled = np.stack([relabel[layer][base[layer]] for layer in range(L)])
    _, summary = analysis.retention(base, scrambled, E, Detector(rho=0.2))
    assert summary["topk_overlap"] < 0.5
    assert summary["nmi"] < 0.9
    # Same block structure under new names: modularity is unchanged.
    assert summary["delta_q"] == pytest.approx(0.0, abs=0.05)


def test_sweep_covers_every_setting(base):
    rows = analysis.nmi_sweep(base, base, E, rhos=[0.1, 0.2], detectors=["louvain", "leiden"], seeds=[0, 1])
    assert len(rows) == 8
    assert all(row["nmi"] == pytest.approx(1.0) for row in rows)


def test_null_model_is_beaten_by_planted_structure(base):
    _, labels = analysis.layer_partitions(base, E, Detector(rho=0.2))
    rows, summary = analysis.null_model(base, labels, E, Detector(rho=0.2), samples=10, seed=0)
    assert len(rows) == L
    assert summary["q_margin"] > 0.1
    assert summary["layers_beating_null_q"] == 1.0


def test_span_profile(base):
    spans = np.r_[np.zeros(N // 2, int), np.ones(N // 2, int)]
    profile = analysis.span_profile(base, spans, E)
    assert set(profile) == {"Q", "A"}
    assert np.allclose(np.array(profile["Q"]["p_topk"]).sum(axis=-1), K)
    assert 0 < profile["A"]["effective_expert_fraction"] <= 1


def test_span_profile_effective_fraction_is_the_layer_mean():
    # Layer 0 routes every token to experts 0-3, layer 1 to experts 8-11: each layer uses 4 of
    # 16 experts (exp(H_l)/E = 0.25), while the layer-averaged frequency spreads over 8 (0.5).
    topk = np.stack([np.tile(np.arange(4), (10, 1)), np.tile(np.arange(8, 12), (10, 1))])  # (2, 10, 4)
    profile = analysis.span_profile(topk, np.zeros(10, int), E)
    assert set(profile) == {"Q"}
    assert profile["Q"]["effective_expert_fraction"] == pytest.approx(0.25, rel=1e-12)
