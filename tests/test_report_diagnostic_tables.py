"""The prior-gate top-k diagnostic: the metric against a per-token reference, and the table from
the declared base routes files alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.report_files import report_in_sandbox
from tests.test_report_claims import _config
from workflow_scripts.file_formats.routes import ProbeTokens, Routes, save_routes
from workflow_scripts.layout import routes_path
from workflow_scripts.registry import BASE, closure
from workflow_scripts.routing_metrics.metrics import gate_topk_agreement


def _reference(topk: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token by token: the gate's top-k as the k largest by a sort (distinct probabilities only)."""
    layers, tokens, k = topk.shape
    equal, overlap = np.zeros(layers), np.zeros(layers)
    for layer in range(layers):
        for token in range(tokens):
            gate = set(np.argsort(probs[layer, token])[::-1][:k].tolist())
            selected = set(topk[layer, token].tolist())
            equal[layer] += gate == selected
            overlap[layer] += len(gate & selected) / k
    return equal / tokens, overlap / tokens


def _sigmoid_router(logits: np.ndarray, bias: np.ndarray, k: int, groups: int, top_groups: int) -> np.ndarray:
    """DeepSeek-V3's selection: sigmoid scores plus a correction bias, top-k within the best groups
    (a group scores the sum of its two best biased scores)."""
    scores = 1 / (1 + np.exp(-logits)) + bias  # (L, N, E)
    shape = (*scores.shape[:2], groups, scores.shape[-1] // groups)
    grouped = scores.reshape(shape)
    group_score = np.sort(grouped, axis=-1)[..., -2:].sum(axis=-1)  # (L, N, G)
    kept = np.argsort(-group_score, axis=-1)[..., :top_groups]
    mask = np.zeros(shape[:3], dtype=bool)
    np.put_along_axis(mask, kept, True, axis=-1)
    masked = np.where(np.repeat(mask, shape[-1], axis=-1), scores, -np.inf)
    return np.sort(np.argsort(-masked, axis=-1)[..., :k], axis=-1)


def test_the_agreement_equals_a_per_token_reference_on_a_sigmoid_router():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 200, 16))
    probs = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)  # the prior's softmax gate
    bias = rng.normal(size=(3, 1, 16)) * np.array([0.0, 0.05, 0.5])[:, None, None]  # layer 0: no bias
    topk = _sigmoid_router(logits, bias, k=4, groups=4, top_groups=4)
    equal, overlap = gate_topk_agreement(topk, probs)
    expected = _reference(topk, probs)
    np.testing.assert_allclose(equal, expected[0])
    np.testing.assert_allclose(overlap, expected[1])
    assert equal[0] == 1.0  # sigmoid is monotone: without a bias or a group limit the sets agree
    assert equal[2] < equal[1] < 1.0 and overlap[2] < overlap[1] < 1.0  # the larger bias moves it more
    grouped = _sigmoid_router(logits, np.zeros_like(bias), k=4, groups=4, top_groups=1)
    assert gate_topk_agreement(grouped, probs)[0].max() < 1.0  # the group limit alone moves it


def test_a_softmax_top_k_agrees_everywhere_and_ties_at_the_cut_count_in():
    probs = np.array([[[0.4, 0.2, 0.2, 0.2], [0.1, 0.2, 0.3, 0.4]]], dtype=np.float16)  # (1, 2, 4)
    topk = np.array([[[0, 3], [2, 3]]])  # token 0: expert 3 tied with 1 and 2 at the cut
    equal, overlap = gate_topk_agreement(topk, probs)
    assert equal.tolist() == [1.0] and overlap.tolist() == [1.0]
    equal, overlap = gate_topk_agreement(np.array([[[0, 3], [0, 3]]]), probs)
    assert equal.tolist() == [0.5] and overlap.tolist() == [0.75]
    with pytest.raises(ValueError, match="share L and N"):
        gate_topk_agreement(topk[:, :1], probs)


def _write_base_routes(root, config) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """A base routes file per base probe of the table: 2 MoE layers, 50 tokens, 8 experts; layer 1
    of Moonlight selects the gate's bottom-2 on every other token."""
    rng = np.random.default_rng(1)
    written = {}
    for probe in closure(config, "diagnostic_prior_topk").probes:
        assert probe.condition == BASE
        probs = rng.dirichlet(np.ones(8), size=(2, 50)).astype(np.float16)  # (L, N, E)
        order = np.argsort(-probs.astype(np.float64), axis=-1, kind="stable")
        topk = np.sort(order[..., :2], axis=-1)
        if probe.model == "moonlight":
            topk[1, ::2] = np.sort(order[1, ::2, -2:], axis=-1)
        tokens = ProbeTokens(np.zeros(50, np.int64), np.arange(50, dtype=np.int32), np.zeros(50, np.int8))
        path = routes_path(root, probe)
        path.parent.mkdir(parents=True, exist_ok=True)
        routes = Routes(topk.astype(np.int16), probs, np.array([1, 3]))
        save_routes(path, routes, tokens, {}, path.with_suffix(".json"))
        written[(probe.model, probe.corpus)] = (topk, probs)
    return written


def test_the_table_reports_every_base_model_corpus_and_layer_from_its_routes(tmp_path):
    config = _config(toy=False, cells=False)
    written = _write_base_routes(tmp_path / "results", config)
    long = pd.read_csv(report_in_sandbox(config, "diagnostic_prior_topk", tmp_path / "results", tmp_path))
    table = long.pivot(index=["model", "corpus", "layer"], columns="column", values="value").reset_index()
    assert len(table) == len(written) * 2
    for (model, corpus), (topk, probs) in written.items():
        rows = table[(table["model"] == model) & (table["corpus"] == corpus)]
        assert rows["layer"].tolist() == [1, 3] and (rows["tokens"] == 50).all()
        equal, overlap = _reference(topk, probs.astype(np.float64))
        np.testing.assert_allclose(rows["topk_equal"], equal, atol=1e-3)
        np.testing.assert_allclose(rows["topk_overlap"], overlap, atol=1e-3)
    moonlight = table[(table["model"] == "moonlight") & (table["layer"] == 3)]
    assert (moonlight["topk_equal"] == 0.5).all()
    assert (table[table["model"] != "moonlight"]["topk_equal"] == 1.0).all()
