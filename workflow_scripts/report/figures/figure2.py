"""Figure 2: a frozen-base prior per span and its zero-mean log-prior bias, with the entries held
at the clamp bounds (eq. 2 and 3, §3.1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from workflow_scripts import registry
from workflow_scripts.layout import PRIOR_FILES, PRIOR_META, prior_file
from workflow_scripts.report.figures.common import (
    OTHER_COLOUR,
    block_figures,
    figure_layer,
    groups,
    require_columns,
)
from workflow_scripts.report.inputs import ResultFiles
from workflow_scripts.report.routing_frames import ResultFileError, field, read_json
from workflow_scripts.report.table import ReportInputs

SPAN_COLOURS = {"Q": "#332288", "A": "#44AA99"}


SPANS = ("Q", "A")


def _prior_sample(token_counts: Mapping[str, Sequence[int]], path: Path) -> int:
    """The prior row shown: the first in split order whose Q and A spans both hold tokens."""
    counts = np.stack([np.asarray(token_counts[span]) for span in SPANS], axis=1)  # (N, 2)
    both = np.flatnonzero((counts > 0).all(axis=1))
    if both.size == 0:
        raise ResultFileError(f"{path}: key 'token_counts': no row has tokens in both the Q and the A span")
    return int(both[0])


def _bias_at_bounds(prior: np.ndarray, lower: float, upper: float) -> tuple[np.ndarray, np.ndarray]:
    """Where eq. (3) maps a prior entry held at the clamp bounds, per row of ``prior`` (S, E).

    ``b_e = log clamp(pi_e) - mean_e' log clamp(pi_e')`` (the renormalisation of the clamp
    cancels in the centring), so an entry at a bound gets ``log bound`` minus that row mean.
    Only marks the bounds on the plot; the bias itself comes from ``prior_to_bias``.
    """
    offset = np.log(np.clip(prior, lower, upper)).mean(axis=-1)  # (S,)
    return np.log(lower) - offset, np.log(upper) - offset


def _prior_rows(prior_id: registry.Prior, results: ResultFiles) -> pd.DataFrame:
    """Figure 2's rows of one prior: its sample's Q and A rows at the figure layer, with the bias."""
    import torch

    from workflow_scripts.file_formats.prior import load_prior
    from workflow_scripts.routing.core import prior_to_bias

    meta_path = results.path(prior_file, prior_id.model, prior_id.corpus, PRIOR_META)
    meta = read_json(meta_path)
    row_ids, counts, moe_layers, clip_eps, clip_c = (
        field(meta, (key,), meta_path)
        for key in ("row_ids", "token_counts", "moe_layers", "clip_eps", "clip_c")
    )
    prior_path = results.path(prior_file, prior_id.model, prior_id.corpus, PRIOR_FILES[registry.BASE])
    prior = load_prior(prior_path)  # (N, 2, L, E)
    if prior.shape[0] != len(row_ids) or prior.shape[2] != len(moe_layers):
        raise ResultFileError(
            f"{meta_path}: {len(row_ids)} row ids and {len(moe_layers)} MoE layers "
            f"for a prior of shape {prior.shape}"
        )
    row, layer = _prior_sample(counts, meta_path), figure_layer(prior.shape[2])
    pi = np.array(prior[row, :, layer], dtype=np.float32)  # (2, E)
    bias = prior_to_bias(torch.from_numpy(pi), clip_eps, clip_c).numpy()  # (2, E), eq. (3)
    experts = pi.shape[-1]
    lower, upper = clip_eps / experts, clip_c / experts
    bias_lower, bias_upper = _bias_at_bounds(pi.astype(np.float64), lower, upper)
    frames = [
        pd.DataFrame(
            {
                "model": prior_id.model,
                "corpus": prior_id.corpus,
                "row_id": int(row_ids[row]),
                "span": span,
                "tokens": int(counts[span][row]),
                "layer": layer,
                "moe_layer": int(moe_layers[layer]),
                "expert": np.arange(experts),
                "prior": pi[s],
                "bias": bias[s],
                "prior_lower": lower,
                "prior_upper": upper,
                "bias_lower": bias_lower[s],
                "bias_upper": bias_upper[s],
                "clip_eps": float(clip_eps),
                "clip_c": float(clip_c),
            }
        )
        for s, span in enumerate(SPANS)
    ]
    return pd.concat(frames, ignore_index=True)


def figure2_data(inputs: ReportInputs) -> pd.DataFrame:
    """The Q and A prior of one training sample at one layer and its zero-mean bias (eq. 2, eq. 3).

    One row per (prior, span, expert): ``prior`` (pi of eq. (2)), ``bias`` (b of eq. (3) from
    ``routing.core.prior_to_bias`` with the clamp the prior was built with, read from its
    meta.json as training reads it), the clamp bounds ``prior_lower`` = eps/E and
    ``prior_upper`` = C/E, and ``bias_lower`` / ``bias_upper``, the bias an entry at a bound
    receives. The sample is the first split row whose two spans both hold tokens.
    """
    ranks = (inputs.rank("models"), inputs.rank("corpora"))
    priors = [p for p in inputs.closure.priors if p.kind == registry.BASE]
    priors.sort(key=lambda p: (ranks[0][p.model], ranks[1][p.corpus]))
    return pd.concat([_prior_rows(prior_id, inputs.results) for prior_id in priors], ignore_index=True)


def _bars(ax: Any, rows: pd.DataFrame, column: str) -> None:
    """Bars of ``column`` per expert in the span's colour; entries held at a clamp bound are hatched."""
    prior = rows["prior"].to_numpy(dtype=float)
    clamped = (prior <= rows["prior_lower"].to_numpy(dtype=float)) | (
        prior >= rows["prior_upper"].to_numpy(dtype=float)
    )
    colour = SPAN_COLOURS.get(rows["span"].iloc[0], OTHER_COLOUR)
    bars = ax.bar(
        rows["expert"], rows[column].astype(float), width=0.8, color=colour, edgecolor="black", linewidth=0.3
    )
    for bar, hatch in zip(bars, clamped, strict=True):
        if hatch:
            bar.set_hatch("////")
            bar.set_facecolor("white")
            bar.set_edgecolor(colour)


def _draw_prior(ax: Any, rows: pd.DataFrame) -> None:
    """One span's prior pi over experts (log scale) with eps/E, 1/E and C/E marked."""
    _bars(ax, rows, "prior")
    ax.set_yscale("log")
    lower, upper, experts = float(rows["prior_lower"].iloc[0]), float(rows["prior_upper"].iloc[0]), len(rows)
    ax.axhline(upper, color="black", linestyle="--", linewidth=1, label=f"C/E = {upper:.3g}")
    ax.axhline(
        1.0 / experts, color="black", linestyle=":", linewidth=1, label=f"uniform 1/E = {1 / experts:.3g}"
    )
    ax.axhline(lower, color="black", linestyle="-.", linewidth=1, label=f"ε/E = {lower:.3g}")
    ax.set_title(f"{rows['span'].iloc[0]} span ({int(rows['tokens'].iloc[0])} tokens): prior π, eq. (2)")
    ax.set_ylabel("π (mean gate probability)")
    ax.legend(fontsize=7, loc="upper right")


def _draw_bias(ax: Any, rows: pd.DataFrame) -> None:
    """One span's bias b over experts with the bias an entry at either clamp bound receives."""
    _bars(ax, rows, "bias")
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.axhline(
        float(rows["bias_upper"].iloc[0]), color="black", linestyle="--", linewidth=1, label="bias at C/E"
    )
    ax.axhline(
        float(rows["bias_lower"].iloc[0]), color="black", linestyle="-.", linewidth=1, label="bias at ε/E"
    )
    ax.set_title(f"{rows['span'].iloc[0]} span: zero-mean log-prior bias b, eq. (3)")
    ax.set_ylabel("b (logit units)")
    ax.set_xlabel("expert id")
    ax.legend(fontsize=7, loc="lower right")


def figure2_plot(data: pd.DataFrame) -> Figure:
    """Figure 2: prior pi (top, log scale) and bias b (bottom) over experts, Q and A side by side."""
    columns = ("model", "corpus", "row_id", "span", "tokens", "layer", "expert", "prior", "bias")
    require_columns(data, (*columns, "prior_lower", "prior_upper", "bias_lower", "bias_upper"), "figure2")
    blocks = groups(data, ("model", "corpus"))
    fig = Figure(figsize=(11, 5.2 * len(blocks)), layout="constrained")
    for subfig, ((model, corpus), block) in zip(block_figures(fig, len(blocks)), blocks, strict=True):
        spans = groups(block, ("span",))
        axes = subfig.subplots(2, len(spans), sharex=True, sharey="row", squeeze=False)
        for col, (_, rows) in enumerate(spans):
            rows = rows.sort_values("expert")
            _draw_prior(axes[0, col], rows)
            _draw_bias(axes[1, col], rows)
        subfig.suptitle(
            f"{model} / {corpus}: frozen-base prior of training row {int(block['row_id'].iloc[0])}, "
            f"MoE layer {int(block['layer'].iloc[0])} (hatched: held at a clamp bound)",
            fontsize=10,
        )
    fig.suptitle("Frozen-base Q/A prior π (eq. 2) and its clipped, zero-mean log-prior bias b (eq. 3)")
    return fig
