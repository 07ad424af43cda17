"""Routing retention of a probed checkpoint against its base (§2, Appendix B, F.9-F.10).

Composes the graph, community and distribution primitives into the per-layer and
layer-mean numbers the tables report: community NMI, modularity Q and Delta Q,
TVD/JSD of the expert marginals, top-k overlap and sharpness (§2, D.2); the
edge-fraction / detector / seed sweeps of B.2; the null-model margins of B.1.
All inputs are top-k arrays of the same probe tokens, (L, N, k).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workflow_scripts.routing_metrics import communities, graphs, metrics
from workflow_scripts.routing_metrics.communities import Detector


def layer_partitions(topk: np.ndarray, num_experts: int, detector: Detector) -> tuple[np.ndarray, np.ndarray]:
    """Thresholded co-activation graphs (L, E, E) and their partitions (L, E) (eq. 1, F.9)."""
    raw = graphs.coactivation_layers(topk, num_experts)  # (L, E, E)
    kept = np.stack([graphs.threshold_top_fraction(w, detector.rho) for w in raw])
    labels = np.stack([detector.detect(w) for w in kept])
    return kept, labels


def modularities(kept: np.ndarray, labels: np.ndarray, resolution: float) -> np.ndarray:
    """Modularity Q of each layer's thresholded graph under its partition, (L,)."""
    return np.array([communities.modularity(w, lab, resolution) for w, lab in zip(kept, labels, strict=True)])


def retention(
    base_topk: np.ndarray, run_topk: np.ndarray, num_experts: int, detector: Detector, log_base: float = 2.0
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Per-layer rows (with the run's communities) and unweighted layer means (F.10) of the §2 metrics."""
    if base_topk.shape != run_topk.shape:
        raise ValueError(f"base and run probes differ in shape: {base_topk.shape} vs {run_topk.shape}")
    base_kept, base_labels = layer_partitions(base_topk, num_experts, detector)
    run_kept, run_labels = layer_partitions(run_topk, num_experts, detector)
    q_base = modularities(base_kept, base_labels, detector.resolution)
    q_run = modularities(run_kept, run_labels, detector.resolution)
    p_base = metrics.expert_marginals(base_topk, num_experts)  # (L, E)
    p_run = metrics.expert_marginals(run_topk, num_experts)  # (L, E)
    k = base_topk.shape[-1]
    rows = [
        {
            "layer": layer,
            "nmi": metrics.community_nmi(run_labels[layer], base_labels[layer]),
            "q": float(q_run[layer]),
            "q_base": float(q_base[layer]),
            "delta_q": float(q_run[layer] - q_base[layer]),
            "tvd": float(metrics.tvd(p_run[layer], p_base[layer])),
            "jsd": float(metrics.jsd(p_run[layer], p_base[layer], base=log_base)),
            "topk_overlap": metrics.topk_overlap(base_topk[layer], run_topk[layer], k),
            "communities": int(run_labels[layer].max() + 1),
            "labels": run_labels[layer].tolist(),  # (E,), the run's communities, for figure 1
        }
        for layer in range(base_topk.shape[0])
    ]
    means = [key for key in rows[0] if key not in ("layer", "labels")]
    summary = {key: float(np.mean([row[key] for row in rows])) for key in means}
    summary["sharpness_l1"] = float(metrics.sharpness(p_run.mean(axis=0)))
    return rows, summary


def nmi_sweep(
    base_topk: np.ndarray,
    run_topk: np.ndarray,
    num_experts: int,
    rhos: Sequence[float],
    detectors: Sequence[str],
    seeds: Sequence[int],
    resolution: float = 1.0,
    tolerance: float = 1e-6,
    max_iterations: int = communities.LOUVAIN_MAX_LEVEL,
) -> list[dict[str, Any]]:
    """Layer-mean community NMI for every (detector, rho, detector seed) of Appendix B.2.

    Every detector runs at the main detector's resolution and Louvain stopping rule
    (``tolerance``, ``max_iterations``), i.e. at matched parameters (F.9).
    """
    rows = []
    for name in detectors:
        for rho in rhos:
            for seed in seeds:
                detector = Detector(name, resolution, seed, tolerance, rho, max_iterations)
                _, base_labels = layer_partitions(base_topk, num_experts, detector)
                _, run_labels = layer_partitions(run_topk, num_experts, detector)
                nmi = metrics.layer_mean_nmi(list(run_labels), list(base_labels))
                rows.append({"detector": name, "rho": rho, "seed": seed, "nmi": nmi})
    return rows


def null_model(
    run_topk: np.ndarray,
    base_labels: np.ndarray,
    num_experts: int,
    detector: Detector,
    samples: int,
    seed: int,
) -> tuple[list[dict[str, float]], dict[str, float]]:
    """Per-layer margins of the observed graph over its marginal-preserving null (Appendix B.1)."""
    from workflow_scripts.probe.null_model import null_margins

    rows = []
    for layer, topk in enumerate(run_topk):
        observed = graphs.coactivation(topk, num_experts)  # unthresholded: the null reads its marginals
        margins = null_margins(
            observed,
            base_labels[layer],
            num_tokens=topk.shape[0],
            samples=samples,
            seed=seed + layer,
            rho=detector.rho,
            resolution=detector.resolution,
            detector_seed=detector.seed,
            threshold=detector.tolerance,
            max_level=detector.max_iterations,
        )
        rows.append(
            {
                "layer": layer,
                "q_margin": margins.q_margin,
                "nmi_margin": margins.nmi_margin,
                "q_beat_share": margins.q_beat_share,
                "nmi_beat_share": margins.nmi_beat_share,
            }
        )
    summary = {key: float(np.mean([row[key] for row in rows])) for key in rows[0] if key != "layer"}
    summary["layers_beating_null_q"] = float(np.mean([row["q_beat_share"] == 1.0 for row in rows]))
    return rows, summary


def span_profile(topk: np.ndarray, spans: np.ndarray, num_experts: int) -> dict[str, Any]:
    """Per-span mean top-k activation frequency P_topk (L, E) and effective expert fraction (Table 11)."""
    profile = {}
    for span, name in ((0, "Q"), (1, "A")):
        chosen = topk[:, spans == span]  # (L, N_span, k)
        if chosen.shape[1] == 0:
            continue
        p_topk = metrics.expert_marginals(chosen, num_experts) * topk.shape[-1]  # (L, E), rows sum to k
        profile[name] = {
            "p_topk": p_topk.tolist(),
            "effective_expert_fraction": metrics.layer_mean_effective_fraction(p_topk),
            "tokens": int(chosen.shape[1]),
        }
    return profile
