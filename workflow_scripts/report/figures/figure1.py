"""Figure 1: construction of the layer-wise expert co-activation graph (base routing, its top-k
selection, co-activation counts, the kept graph and its communities, and each trained run's graph)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from workflow_scripts import registry
from workflow_scripts.layout import layers_path, routes_path
from workflow_scripts.report.figures.common import (
    MATRIX_CMAP,
    base_partition,
    base_probes,
    block_figures,
    community_order,
    condition_label,
    draw_matrix,
    groups,
    layer_topk,
    pivot,
    require_columns,
    run_title,
    trained_probes,
)
from workflow_scripts.report.inputs import ResultFiles
from workflow_scripts.report.routing_frames import ResultFileError
from workflow_scripts.report.table import ReportInputs
from workflow_scripts.routing_metrics import graphs
from workflow_scripts.routing_metrics.communities import Detector

# Paul Tol's muted qualitative scheme, for communities (cycled past ten).
COMMUNITY_COLOURS = (
    "#332288",
    "#88CCEE",
    "#44AA99",
    "#117733",
    "#999933",
    "#DDCC77",
    "#CC6677",
    "#882255",
    "#AA4499",
    "#BBBBBB",
)


SELECTION_TOKENS = 24  # probe tokens shown in figure 1's top-k selection panel


def community_layout(labels: np.ndarray) -> np.ndarray:
    """Circle positions (E, 2) with each community on one arc and an empty slot between communities.

    Both graphs of figure 1 use the base partition's layout, so a run's communities are read
    against the same node positions.
    """
    order = community_order(labels)
    ordered = np.asarray(labels)[order]
    gaps = np.concatenate([[0], np.cumsum(ordered[1:] != ordered[:-1])])  # communities passed so far
    slots = np.arange(order.size) + gaps  # (E,)
    angles = np.pi / 2 - 2 * np.pi * slots / (order.size + gaps[-1] + 1)
    positions = np.empty((order.size, 2))
    positions[order] = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    return positions


def match_communities(labels: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Renumber ``labels`` so each community takes the id of the ``reference`` community it overlaps most.

    One-to-one matching maximising the shared experts (Hungarian assignment), so a trained run's
    communities are drawn in the colour of the base community they continue; communities left
    unmatched are numbered after the reference's, in order of their smallest expert id. NMI is
    invariant under this renumbering.
    """
    from scipy.optimize import linear_sum_assignment

    _, run = np.unique(labels, return_inverse=True)
    _, ref = np.unique(reference, return_inverse=True)
    overlap = np.zeros((run.max() + 1, ref.max() + 1))  # (C_run, C_ref)
    np.add.at(overlap, (run, ref), 1.0)
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    new = np.full(run.max() + 1, -1)
    new[rows] = np.unique(reference)[cols]
    unmatched = sorted(np.flatnonzero(new < 0), key=lambda c: int(np.argmax(run == c)))
    new[unmatched] = int(np.max(reference)) + 1 + np.arange(len(unmatched))
    return new[run]


def _matrix_rows(matrix: np.ndarray, part: str) -> pd.DataFrame:
    """Every entry of a 2-D array as rows (part, i, j, value)."""
    i, j = np.indices(matrix.shape)
    return pd.DataFrame({"part": part, "i": i.ravel(), "j": j.ravel(), "value": matrix.ravel()})


def _graph_rows(kept: np.ndarray, labels: np.ndarray, positions: np.ndarray) -> pd.DataFrame:
    """Node rows (i, community, x, y) and kept-edge rows (i < j, value) of one thresholded graph."""
    nodes = pd.DataFrame(
        {
            "part": "node",
            "i": np.arange(labels.size),
            "community": labels,
            "x": positions[:, 0],
            "y": positions[:, 1],
        }
    )
    ii, jj = np.nonzero(np.triu(kept, k=1))
    edges = pd.DataFrame({"part": "edge", "i": ii, "j": jj, "value": kept[ii, jj]})
    return pd.concat([nodes, edges], ignore_index=True)


def _base_rows(topk: np.ndarray, labels: np.ndarray, detector: Detector) -> pd.DataFrame:
    """Figure 1's base rows: the first tokens' selections, the eq. (1) matrix and the thresholded graph."""
    experts = labels.size
    selection = np.zeros((min(SELECTION_TOKENS, topk.shape[0]), experts))  # (T, E)
    np.put_along_axis(selection, topk[: selection.shape[0]].astype(np.int64), 1.0, axis=1)
    w = graphs.coactivation(topk, experts)  # (E, E), eq. (1)
    parts = [
        _matrix_rows(selection, "selection"),
        _matrix_rows(w, "coactivation"),
        _graph_rows(graphs.threshold_top_fraction(w, detector.rho), labels, community_layout(labels)),
    ]
    return pd.concat(parts, ignore_index=True)


def _retained_layer(results: ResultFiles, probe: registry.Probe, layer: int, experts: int) -> pd.Series:
    """A trained run's row of its retention ``layers.parquet`` at ``layer``: its ``labels`` and ``nmi``.

    The retention stage found these communities and their NMI; the figure reads them rather
    than running the detector again, so figure and tables show one computation.
    """
    path = results.path(layers_path, probe)
    try:
        layers = pd.read_parquet(path, columns=["layer", "labels", "nmi"])
    except (OSError, ValueError, KeyError) as error:
        raise ResultFileError(f"{path}: not a retention layers file with labels and nmi ({error})") from None
    row = layers[layers["layer"] == layer]
    if len(row) != 1 or len(row["labels"].iloc[0]) != experts:
        raise ResultFileError(f"{path}: no single row of {experts} labels for layer {layer}")
    return row.iloc[0]


def _run_rows(topk: np.ndarray, retained: pd.Series, base_labels: np.ndarray, rho: float) -> pd.DataFrame:
    """Figure 1's rows of a trained run: its thresholded graph, the communities retention found, their NMI."""
    kept = graphs.threshold_top_fraction(graphs.coactivation(topk, base_labels.size), rho)
    labels = np.asarray(retained["labels"], dtype=np.int64)
    graph = _graph_rows(kept, match_communities(labels, base_labels), community_layout(base_labels))
    nmi = pd.DataFrame({"part": ["nmi"], "value": [float(retained["nmi"])]})
    return pd.concat([graph, nmi], ignore_index=True)


def figure1_data(inputs: ReportInputs) -> pd.DataFrame:
    """Figure 1 on real probes of one layer: selections, eq. (1) matrix, thresholded graphs, NMI.

    Rows carry ``part``: ``selection`` (i = probe token, j = expert, value 1 if selected, the
    first ``SELECTION_TOKENS`` tokens of the base), ``coactivation`` (the base's eq. (1)
    ``w_ij``), ``node`` (expert i, its community, circle position x, y on the base layout) and
    ``edge`` (i < j kept at rho, value ``w_ij``) of the base and of every trained run, and
    ``nmi`` (value: the run's community NMI against the base partition at this layer, F.10).
    The base communities are the base partition's; a run's, and its NMI, are the retention
    stage's (``layers.parquet``), renumbered by ``match_communities`` so matching communities
    share a colour.
    """
    frames = []
    for base in base_probes(inputs):
        topk, experts, layer, moe_layer = layer_topk(inputs.results.path(routes_path, base))
        partition = base_partition(inputs.results, base.model, base.corpus, layer, experts)
        detector, labels = partition["detector"], partition["labels"]
        common = {"model": base.model, "corpus": base.corpus, "layer": layer, "moe_layer": moe_layer}
        common["rho"] = detector.rho
        rows = _base_rows(topk, labels, detector)
        frames.append(
            rows.assign(
                **common, condition=registry.BASE, seed=pd.NA, label=condition_label(inputs.config, "base")
            )
        )
        for run in trained_probes(inputs):
            if (run.model, run.corpus) != (base.model, base.corpus):
                continue
            run_topk = layer_topk(inputs.results.path(routes_path, run), layer)[0]
            retained = _retained_layer(inputs.results, run, layer, experts)
            rows = _run_rows(run_topk, retained, labels, detector.rho)
            label = condition_label(inputs.config, run.condition)
            frames.append(rows.assign(**common, condition=run.condition, seed=run.seed, label=label))
    data = pd.concat(frames, ignore_index=True)
    data["seed"] = data["seed"].astype("Int64")
    return data


def _community_colour(community: Any) -> str:
    return COMMUNITY_COLOURS[int(community) % len(COMMUNITY_COLOURS)]


def _draw_graph(ax: Any, rows: pd.DataFrame) -> None:
    """Nodes coloured by community; kept edges as wide as their weight, coloured inside a community."""
    nodes = rows[rows["part"] == "node"].sort_values("i")
    xy = nodes[["x", "y"]].to_numpy(dtype=float)
    community = nodes["community"].astype(int).to_numpy()
    edges = rows[rows["part"] == "edge"]
    if not edges.empty:
        i, j = edges["i"].astype(int).to_numpy(), edges["j"].astype(int).to_numpy()
        weight = edges["value"].to_numpy(dtype=float)
        colours = [
            _community_colour(community[a]) if community[a] == community[b] else "#BBBBBB"
            for a, b in zip(i, j, strict=True)
        ]
        segments = np.stack([xy[i], xy[j]], axis=1)  # (M, 2, 2)
        widths = 0.4 + 2.6 * weight / weight.max()
        ax.add_collection(LineCollection(segments, linewidths=widths, colors=colours, alpha=0.8, zorder=1))
    ax.scatter(
        xy[:, 0],
        xy[:, 1],
        s=60,
        c=[_community_colour(c) for c in community],
        edgecolors="black",
        linewidths=0.5,
        zorder=2,
    )
    if len(nodes) <= 32:
        for expert, (x, y) in zip(nodes["i"].astype(int), xy, strict=True):
            ax.annotate(str(expert), (x * 1.16, y * 1.16), ha="center", va="center", fontsize=6)
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.3, 1.3)
    ax.set_aspect("equal")
    ax.set_axis_off()


def _draw_inputs(subfig: Any, axes: Sequence[Any], base: pd.DataFrame) -> None:
    """Figure 1 (a) the base's top-k selections and (b) its eq. (1) matrix."""
    selection = pivot(base[base["part"] == "selection"])
    draw_matrix(axes[0], selection, "Greys", 1.0)
    axes[0].set_title(f"(a) top-{int(selection[0].sum())} experts of each token")
    axes[0].set_xlabel("expert id")
    axes[0].set_ylabel(f"probe token (first {selection.shape[0]})")
    image = draw_matrix(axes[1], pivot(base[base["part"] == "coactivation"]), MATRIX_CMAP)
    subfig.colorbar(image, ax=axes[1], label="$w_{ij}$ (fraction of probe tokens)", shrink=0.85)
    axes[1].set_title("(b) co-activation $w_{ij}$, eq. (1)")
    axes[1].set_xlabel("expert id")
    axes[1].set_ylabel("expert id")


def figure1_plot(data: pd.DataFrame) -> Figure:
    """Figure 1: (a) top-k selections, (b) eq. (1) matrix, (c) base graph, (d...) each run's communities."""
    columns = ("model", "corpus", "condition", "seed", "label", "part", "layer", "moe_layer", "rho", "value")
    require_columns(data, columns, "figure1")
    blocks = groups(data, ("model", "corpus"))
    trained = [
        groups(block[block["condition"] != registry.BASE], ("condition", "seed")) for _, block in blocks
    ]
    panels = 3 + max(len(runs) for runs in trained)
    fig = Figure(figsize=(3.3 * panels, 3.9 * len(blocks)), layout="constrained")
    for subfig, ((model, corpus), block), runs in zip(
        block_figures(fig, len(blocks)), blocks, trained, strict=True
    ):
        axes = subfig.subplots(1, panels)
        base = block[block["condition"] == registry.BASE]
        _draw_inputs(subfig, axes, base)
        _draw_graph(axes[2], base)
        rho = float(base["rho"].iloc[0])
        axes[2].set_title(f"(c) Base: top ρ={rho:.2f} of pairs kept\ncolour = base community")
        for col, ((_, seed), run) in enumerate(runs):
            _draw_graph(axes[3 + col], run)
            nmi = float(run.loc[run["part"] == "nmi", "value"].iloc[0])
            title = run_title(run["label"].iloc[0], seed)
            axes[3 + col].set_title(
                f"({chr(ord('d') + col)}) {title}: own communities\nlayer NMI vs base = {nmi:.3f}"
            )
        for ax in axes[3 + len(runs) :]:
            ax.set_axis_off()
        layer, moe_layer = int(base["layer"].iloc[0]), int(base["moe_layer"].iloc[0])
        subfig.suptitle(f"{model} / {corpus}, MoE layer {layer} (decoder layer {moe_layer})", fontsize=10)
    fig.suptitle("Expert co-activation graph: top-k routes → eq. (1) weights → ρ threshold → Louvain → NMI")
    return fig
