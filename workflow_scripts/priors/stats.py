"""Statistics of a prior tensor (Appendix F.7 and the clamp column of Table 13 of the paper).

The spread of the eq. (3) bias and the clamp saturation over every (row, span, layer) cell of an
``N x 2 x L x E`` prior, in chunks of rows so memory does not grow with ``N``; the bias is the
training-time conversion's (``routing.core.prior_to_bias``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workflow_scripts.routing.core import DEFAULT_CLIP_C, DEFAULT_CLIP_EPS

SPAN_NAMES = ("Q", "A")
DEFAULT_CHUNK_ROWS = 1024


def prior_stats(
    prior: np.ndarray,
    clip_eps: float = DEFAULT_CLIP_EPS,
    clip_c: float = DEFAULT_CLIP_C,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> dict[str, Any]:
    """Bias spread and clamp saturation of ``prior`` (``(N, 2, L, E)``, e.g. a ``load_prior`` map).

    Returns ``{"shape", "clip_eps", "clip_c", "sd_ddof": 0, "cells", "entries",
    "bias_sd", "bias_range", "clamp_upper_fraction", "clamp_lower_fraction",
    "spans": {"Q": {...same four...}, "A": {...}}}``.

    Over every (row, span, layer) cell, and again per span (Q, A):

    * ``bias_sd``: the standard deviation over experts (population, ``ddof=0``) of the
      zero-mean log-prior bias ``b`` of eq. (3) of each cell, averaged over cells (the
      "per-row bias standard deviation", 0.616 / 0.654 in F.7);
    * ``bias_range``: ``max_e b - min_e b`` per cell, averaged over cells (~3.03 in F.7);
    * ``clamp_upper_fraction``: share of entries with ``pi >= C/E``, i.e. held at the clamp's
      upper bound (1-2 % in Table 13);
    * ``clamp_lower_fraction``: share of entries with ``pi <= eps/E`` (held at the lower bound).

    The bias comes from ``workflow_scripts.routing.core.prior_to_bias`` (the training-time
    conversion). Cells of empty spans hold the uniform row (see ``priors.compute``), whose
    bias is zero: they are counted like every other cell (their number is in the prior's
    meta.json).
    """
    import torch

    from workflow_scripts.routing.core import prior_to_bias

    if prior.ndim != 4 or prior.shape[1] != 2:
        raise ValueError(f"expected a prior of shape (N, 2, L, E), got {prior.shape}")
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    num_rows, _, num_layers, num_experts = prior.shape
    if num_rows == 0 or num_layers == 0 or num_experts == 0:
        raise ValueError(f"empty prior of shape {prior.shape}")
    upper, lower = clip_c / num_experts, clip_eps / num_experts
    # Per span: sum of cell sds, sum of cell ranges, entries at the upper / lower bound.
    sums = np.zeros((2, 4), dtype=np.float64)
    for start in range(0, num_rows, chunk_rows):
        chunk = np.array(prior[start : start + chunk_rows], dtype=np.float32)  # (n, 2, L, E)
        bias = prior_to_bias(torch.from_numpy(chunk), clip_eps, clip_c).double()  # (n, 2, L, E)
        sd = bias.std(dim=-1, correction=0)  # (n, 2, L)
        spread = bias.amax(dim=-1) - bias.amin(dim=-1)  # (n, 2, L)
        sums[:, 0] += sd.sum(dim=(0, 2)).numpy()
        sums[:, 1] += spread.sum(dim=(0, 2)).numpy()
        sums[:, 2] += (chunk >= np.float32(upper)).sum(axis=(0, 2, 3))
        sums[:, 3] += (chunk <= np.float32(lower)).sum(axis=(0, 2, 3))
    cells_per_span = num_rows * num_layers
    entries_per_span = cells_per_span * num_experts

    def values(total: np.ndarray, cells: int, entries: int) -> dict[str, float]:
        return {
            "bias_sd": float(total[0] / cells),
            "bias_range": float(total[1] / cells),
            "clamp_upper_fraction": float(total[2] / entries),
            "clamp_lower_fraction": float(total[3] / entries),
        }

    return {
        "shape": [int(d) for d in prior.shape],
        "clip_eps": float(clip_eps),
        "clip_c": float(clip_c),
        "clamp_bounds": {"lower": lower, "upper": upper},
        "sd_ddof": 0,
        "cells": 2 * cells_per_span,
        "entries": 2 * entries_per_span,
        **values(sums.sum(axis=0), 2 * cells_per_span, 2 * entries_per_span),
        "spans": {
            name: values(sums[s], cells_per_span, entries_per_span) for s, name in enumerate(SPAN_NAMES)
        },
    }
