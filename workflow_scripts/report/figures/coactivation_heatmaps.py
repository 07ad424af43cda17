"""Co-activation matrices of the base and each trained run at the figure layer, experts ordered by
the base partition's communities, community blocks outlined."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from workflow_scripts.layout import routes_path
from workflow_scripts.report.figures.common import (
    MATRIX_CMAP,
    base_partition,
    base_probes,
    community_order,
    condition_colour,
    condition_label,
    draw_matrix,
    groups,
    layer_topk,
    pivot,
    require_columns,
    run_title,
    trained_probes,
)
from workflow_scripts.report.table import ReportInputs
from workflow_scripts.routing_metrics import graphs


def coactivation_heatmaps_data(inputs: ReportInputs) -> pd.DataFrame:
    """The eq. (1) matrix of the base and of each trained run at one layer, experts in base-community order.

    One row per (checkpoint, matrix entry): ``row``/``col`` (position in the ordering),
    ``expert_i``/``expert_j`` (expert ids), ``community_i``/``community_j`` (base communities)
    and ``weight`` (``w_ij``). The ordering is ``community_order`` of the base partition.
    """
    frames = []
    for base in base_probes(inputs):
        runs = [base] + [
            p for p in trained_probes(inputs) if (p.model, p.corpus) == (base.model, base.corpus)
        ]
        _, experts, layer, moe_layer = layer_topk(inputs.results.path(routes_path, base))
        labels = base_partition(inputs.results, base.model, base.corpus, layer, experts)["labels"]
        order = community_order(labels)
        rows, cols = np.indices((experts, experts))
        for probe in runs:
            topk, _, _, _ = layer_topk(inputs.results.path(routes_path, probe), layer)
            w = graphs.coactivation(topk, experts)[np.ix_(order, order)]  # (E, E), community order
            frames.append(
                pd.DataFrame(
                    {
                        "model": probe.model,
                        "corpus": probe.corpus,
                        "condition": probe.condition,
                        "seed": probe.seed,
                        "label": condition_label(inputs.config, probe.condition),
                        "layer": layer,
                        "moe_layer": moe_layer,
                        "row": rows.ravel(),
                        "col": cols.ravel(),
                        "expert_i": order[rows.ravel()],
                        "expert_j": order[cols.ravel()],
                        "community_i": labels[order[rows.ravel()]],
                        "community_j": labels[order[cols.ravel()]],
                        "weight": w.ravel(),
                    }
                )
            )
    data = pd.concat(frames, ignore_index=True)
    data["seed"] = data["seed"].astype("Int64")
    return data


def _outline_communities(ax: Any, communities: np.ndarray) -> None:
    """A box around each diagonal block of one community (``communities`` in matrix order)."""
    cuts = np.flatnonzero(np.diff(communities)) + 0.5
    starts = np.concatenate([[-0.5], cuts])
    ends = np.concatenate([cuts, [communities.size - 0.5]])
    for start, end in zip(starts, ends, strict=True):
        size = end - start
        ax.add_patch(Rectangle((start, start), size, size, fill=False, edgecolor="white", linewidth=0.9))


def _draw_ordered_matrix(ax: Any, run: pd.DataFrame, vmax: float) -> Any:
    """One community-ordered matrix, its community boxes and, for up to 32 experts, expert-id ticks."""
    image = draw_matrix(
        ax, pivot(run.rename(columns={"row": "i", "col": "j", "weight": "value"})), MATRIX_CMAP, vmax
    )
    diagonal = run[run["row"] == run["col"]].sort_values("row")
    _outline_communities(ax, diagonal["community_i"].to_numpy())
    ids = diagonal["expert_i"].astype(int).astype(str).tolist() if len(diagonal) <= 32 else []
    ax.set_xticks(range(len(ids)), ids, fontsize=6)
    ax.set_yticks(range(len(ids)), ids, fontsize=6)
    return image


def coactivation_heatmaps_plot(data: pd.DataFrame) -> Figure:
    """One heatmap per checkpoint on a shared colour scale, base-community blocks outlined."""
    columns = (
        "model",
        "corpus",
        "condition",
        "seed",
        "label",
        "layer",
        "row",
        "col",
        "expert_i",
        "community_i",
    )
    require_columns(data, (*columns, "weight"), "coactivation_heatmaps")
    blocks = groups(data, ("model", "corpus"))
    runs = [groups(block, ("condition", "seed")) for _, block in blocks]
    panels = max(len(block_runs) for block_runs in runs)
    vmax = float(data["weight"].max())
    fig = Figure(figsize=(3.3 * panels + 1.0, 3.5 * len(blocks)), layout="constrained")
    axes = fig.subplots(len(blocks), panels, squeeze=False)
    for r, (((model, corpus), _), block_runs) in enumerate(zip(blocks, runs, strict=True)):
        for c, ((condition, seed), run) in enumerate(block_runs):
            image = _draw_ordered_matrix(axes[r, c], run, vmax)
            axes[r, c].set_title(run_title(run["label"].iloc[0], seed), color=condition_colour(condition))
            axes[r, c].set_xlabel("experts in base-community order")
        layer = int(block_runs[0][1]["layer"].iloc[0])
        axes[r, 0].set_ylabel(f"{model} / {corpus}, MoE layer {layer}\nexperts in base-community order")
        for ax in axes[r, len(block_runs) :]:
            ax.set_axis_off()
    fig.colorbar(image, ax=axes.ravel().tolist(), label="co-activation $w_{ij}$ (fraction of probe tokens)")
    fig.suptitle(
        "Co-activation matrices (eq. 1), experts ordered by base community (boxes: base communities)"
    )
    return fig
