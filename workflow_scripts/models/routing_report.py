"""How much structure a base router has: sharpness and cross-domain divergence (Appendix D.2).

A toy base is only a useful stand-in if, like Moonlight's router, it routes
non-uniformly and differently per domain. This report measures that on held-out
rows per domain, from the experts each gate actually selects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np


def selected_experts(
    model: Any, tokenizer: Any, rows: Sequence[tuple[str, str]], max_length: int
) -> np.ndarray:
    """Top-k experts of every Q/A-span token of ``rows``, per MoE layer: (L, N, k).

    Rows run one at a time (no padding to mask) through the stock gates with a
    recorder attached; template and special tokens are left out.
    """
    import torch

    from workflow_scripts.modeling.tokenizer import answer_span_mask
    from workflow_scripts.routing.hf import RoutingContext, attach

    context = RoutingContext()
    handle = attach(model, context)
    per_row = []
    try:
        model.eval()
        with torch.inference_mode():
            for prompt, answer in rows:
                ids, spans = answer_span_mask(tokenizer, prompt, answer)
                keep = torch.tensor(spans[:max_length]) >= 0  # (T,)
                context.set_batch(None, None)
                model(input_ids=torch.tensor([ids[:max_length]]))
                layers = context.recorder.layer_indices()  # L x (T, k)
                per_row.append(np.stack([indices[keep].numpy() for indices in layers]))  # (L, T_span, k)
    finally:
        handle.detach()
    return np.concatenate(per_row, axis=1)


def routing_structure(topk_by_domain: Mapping[str, np.ndarray], num_experts: int) -> dict[str, Any]:
    """Sharpness ||p - U||_1 per domain and ||p_a - p_b||_1 per domain pair (Appendix D.2).

    ``p`` is the layer-averaged expert distribution (share of token-slots per expert,
    averaged over MoE layers), as in D.2; the effective expert fraction is Table 11's, taken
    per layer and then averaged.
    """
    from workflow_scripts.routing_metrics.metrics import (
        cross_domain_l1,
        expert_marginals,
        layer_mean_effective_fraction,
        sharpness,
    )

    per_layer = {d: expert_marginals(topk, num_experts) for d, topk in topk_by_domain.items()}
    averaged = {d: p.mean(axis=0) for d, p in per_layer.items()}
    return {
        "domains": {
            domain: {
                "tokens": int(topk_by_domain[domain].shape[1]),
                "sharpness_l1": float(sharpness(p)),
                "effective_expert_fraction": layer_mean_effective_fraction(per_layer[domain]),
            }
            for domain, p in averaged.items()
        },
        "divergence_l1": {
            f"{a}-{b}": float(cross_domain_l1(averaged[a], averaged[b]))
            for a, b in combinations(sorted(averaged), 2)
        },
    }
