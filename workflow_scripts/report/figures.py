"""The paper's figures 1-3 and three appendix views, each as tidy data plus a plot of that data.

Every figure is a pair in ``FIGURES``: a data function ``(ReportInputs) -> pd.DataFrame`` that
reads the figure's declared result files (rule ``figure_data`` writes the frame to CSV), and a
plot function ``(pd.DataFrame) -> Figure`` that draws only what that frame holds (rule
``figure``), so restyling never recomputes. Plots use matplotlib's object API, no pyplot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from workflow_scripts import registry
from workflow_scripts.file_formats.routes import load_routes
from workflow_scripts.layout import (
    PRIOR_FILES,
    PRIOR_META,
    layers_path,
    partition_path,
    prior_file,
    routes_path,
)
from workflow_scripts.report.frames import aggregate_frame, performance_frame
from workflow_scripts.report.inputs import ResultFiles
from workflow_scripts.report.routing_frames import (
    ResultFileError,
    field,
    read_json,
    retention_frame,
    sweep_frame,
)
from workflow_scripts.report.table import ReportInputs, summarize_seeds
from workflow_scripts.routing_metrics import graphs
from workflow_scripts.routing_metrics.communities import Detector

__all__ = [
    "CONDITION_COLOURS",
    "FIGURES",
    "community_layout",
    "community_order",
    "condition_beta",
    "design_cell",
    "figure_layer",
    "match_communities",
]

# Okabe-Ito (Okabe & Ito 2008) for the main conditions, Paul Tol's muted scheme for the rest: one
# colour per condition in every figure, colour-blind safe.
CONDITION_COLOURS: dict[str, str] = {
    "base": "#000000",
    "sft": "#E69F00",
    "lbl": "#D55E00",
    "rpb": "#0072B2",
    "rpb_beta050": "#0072B2",
    "rpb_beta075": "#0072B2",
    "router_l2": "#009E73",
    "rpb_hard": "#CC79A7",
    "within_soft": "#56B4E9",
    "within_hard": "#882255",
    "global_hard": "#999933",
}
OTHER_COLOUR = "#999999"
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
SPAN_COLOURS = {"Q": "#332288", "A": "#44AA99"}
MATRIX_CMAP = "cividis"
SELECTION_TOKENS = 24  # probe tokens shown in figure 1's top-k selection panel
SPANS = ("Q", "A")


# ------------------------------------------------------------------ shared helpers


def figure_layer(num_layers: int) -> int:
    """The MoE layer figures 1, 2 and the heatmaps show: the middle one, index ``L // 2``."""
    if num_layers < 1:
        raise ValueError(f"need at least one MoE layer, got {num_layers}")
    return num_layers // 2


def community_order(labels: np.ndarray) -> np.ndarray:
    """Expert ids sorted by community, then by id: the axis order of a community-ordered matrix."""
    labels = np.asarray(labels)
    return np.lexsort((np.arange(labels.size), labels))


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


def _label(config: Mapping[str, Any], condition: str) -> str:
    return "Base" if condition == registry.BASE else str(config["conditions"][condition]["label"])


def _layer_topk(path: Path, layer: int | None = None) -> tuple[np.ndarray, int, int, int]:
    """One layer's top-k (N, k) of a routes file, with E, the layer index and its decoder layer."""
    routes, _ = load_routes(path)
    layer = figure_layer(routes.topk.shape[0]) if layer is None else layer
    return routes.topk[layer], routes.num_experts, layer, int(routes.moe_layers[layer])


def _base_partition(
    results: ResultFiles, model: str, corpus: str, layer: int, experts: int
) -> dict[str, Any]:
    """The base partition's labels at ``layer`` and the detector they were found with."""
    path = results.path(partition_path, model, corpus)
    partition = read_json(path)
    labels = np.asarray(field(partition, ("labels",), path))
    if labels.ndim != 2 or labels.shape[1] != experts or not 0 <= layer < labels.shape[0]:
        raise ResultFileError(
            f"{path}: key 'labels' of shape {labels.shape} does not cover layer {layer} of {experts} experts"
        )
    try:
        detector = Detector(**field(partition, ("detector",), path))
    except TypeError as error:
        raise ResultFileError(f"{path}: key 'detector' is not a detector setting ({error})") from None
    return {"labels": labels[layer], "detector": detector}


def _probes(inputs: ReportInputs, base: bool) -> list[registry.Probe]:
    """The figure's base probes, or its probed trained checkpoints, in the figure's order."""
    models, corpora, conditions = (inputs.rank(key) for key in ("models", "corpora", "conditions"))
    chosen = [p for p in inputs.closure.probes if (p.condition == registry.BASE) == base]
    return sorted(
        chosen,
        key=lambda p: (models[p.model], corpora[p.corpus], conditions.get(p.condition, -1), p.seed or 0),
    )


def _trained_probes(inputs: ReportInputs) -> list[registry.Probe]:
    return _probes(inputs, base=False)


def _base_probes(inputs: ReportInputs) -> list[registry.Probe]:
    return _probes(inputs, base=True)


def _condition_colour(condition: str) -> str:
    return CONDITION_COLOURS.get(condition, OTHER_COLOUR)


def _run_title(label: str, seed: Any) -> str:
    return label if pd.isna(seed) else f"{label} s{int(seed)}"


def _mean_sd(mean: float, sd: float, digits: int) -> str:
    """``mean +- sd`` (sd omitted for a single seed), or ``n/a`` for an absent cell."""
    if pd.isna(mean):
        return "n/a"
    return f"{mean:.{digits}f}" if pd.isna(sd) else f"{mean:.{digits}f} ± {sd:.{digits}f}"


def _groups(data: pd.DataFrame, keys: Sequence[str]) -> list[tuple[tuple[Any, ...], pd.DataFrame]]:
    """``data`` split by ``keys`` in order of first appearance."""
    return [(key, group) for key, group in data.groupby(list(keys), sort=False, dropna=False)]


def _require(data: pd.DataFrame, columns: Iterable[str], figure_id: str) -> None:
    missing = [column for column in columns if column not in data.columns]
    if missing:
        raise ValueError(f"{figure_id}: data lacks columns {missing}")
    if data.empty:
        raise ValueError(f"{figure_id}: no data to plot")


# ------------------------------------------------------------------ figure 1: graph construction


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
    for base in _base_probes(inputs):
        topk, experts, layer, moe_layer = _layer_topk(inputs.results.path(routes_path, base))
        partition = _base_partition(inputs.results, base.model, base.corpus, layer, experts)
        detector, labels = partition["detector"], partition["labels"]
        common = {"model": base.model, "corpus": base.corpus, "layer": layer, "moe_layer": moe_layer}
        common["rho"] = detector.rho
        rows = _base_rows(topk, labels, detector)
        frames.append(
            rows.assign(**common, condition=registry.BASE, seed=pd.NA, label=_label(inputs.config, "base"))
        )
        for run in _trained_probes(inputs):
            if (run.model, run.corpus) != (base.model, base.corpus):
                continue
            run_topk = _layer_topk(inputs.results.path(routes_path, run), layer)[0]
            retained = _retained_layer(inputs.results, run, layer, experts)
            rows = _run_rows(run_topk, retained, labels, detector.rho)
            label = _label(inputs.config, run.condition)
            frames.append(rows.assign(**common, condition=run.condition, seed=run.seed, label=label))
    data = pd.concat(frames, ignore_index=True)
    data["seed"] = data["seed"].astype("Int64")
    return data


def _draw_matrix(ax: Any, matrix: np.ndarray, cmap: str, vmax: float | None = None) -> Any:
    """A matrix as an image with integer ticks (expert ids, token or ordering positions)."""
    image = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest", aspect="auto")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return image


def _pivot(rows: pd.DataFrame) -> np.ndarray:
    """The 2-D array behind ``part`` rows (i, j, value)."""
    i, j = rows["i"].astype(int).to_numpy(), rows["j"].astype(int).to_numpy()
    matrix = np.zeros((i.max() + 1, j.max() + 1))
    matrix[i, j] = rows["value"].to_numpy(dtype=float)
    return matrix


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


def _block_figures(fig: Figure, count: int) -> list[Any]:
    """One subfigure per (model, corpus) block, stacked."""
    return list(np.atleast_1d(fig.subfigures(count, 1, squeeze=False).ravel()))


def _draw_inputs(subfig: Any, axes: Sequence[Any], base: pd.DataFrame) -> None:
    """Figure 1 (a) the base's top-k selections and (b) its eq. (1) matrix."""
    selection = _pivot(base[base["part"] == "selection"])
    _draw_matrix(axes[0], selection, "Greys", 1.0)
    axes[0].set_title(f"(a) top-{int(selection[0].sum())} experts of each token")
    axes[0].set_xlabel("expert id")
    axes[0].set_ylabel(f"probe token (first {selection.shape[0]})")
    image = _draw_matrix(axes[1], _pivot(base[base["part"] == "coactivation"]), MATRIX_CMAP)
    subfig.colorbar(image, ax=axes[1], label="$w_{ij}$ (fraction of probe tokens)", shrink=0.85)
    axes[1].set_title("(b) co-activation $w_{ij}$, eq. (1)")
    axes[1].set_xlabel("expert id")
    axes[1].set_ylabel("expert id")


def figure1_plot(data: pd.DataFrame) -> Figure:
    """Figure 1: (a) top-k selections, (b) eq. (1) matrix, (c) base graph, (d...) each run's communities."""
    columns = ("model", "corpus", "condition", "seed", "label", "part", "layer", "moe_layer", "rho", "value")
    _require(data, columns, "figure1")
    blocks = _groups(data, ("model", "corpus"))
    trained = [
        _groups(block[block["condition"] != registry.BASE], ("condition", "seed")) for _, block in blocks
    ]
    panels = 3 + max(len(runs) for runs in trained)
    fig = Figure(figsize=(3.3 * panels, 3.9 * len(blocks)), layout="constrained")
    for subfig, ((model, corpus), block), runs in zip(
        _block_figures(fig, len(blocks)), blocks, trained, strict=True
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
            title = _run_title(run["label"].iloc[0], seed)
            axes[3 + col].set_title(
                f"({chr(ord('d') + col)}) {title}: own communities\nlayer NMI vs base = {nmi:.3f}"
            )
        for ax in axes[3 + len(runs) :]:
            ax.set_axis_off()
        layer, moe_layer = int(base["layer"].iloc[0]), int(base["moe_layer"].iloc[0])
        subfig.suptitle(f"{model} / {corpus}, MoE layer {layer} (decoder layer {moe_layer})", fontsize=10)
    fig.suptitle("Expert co-activation graph: top-k routes → eq. (1) weights → ρ threshold → Louvain → NMI")
    return fig


# ------------------------------------------------------------------ figure 2: prior and bias


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
    _require(data, (*columns, "prior_lower", "prior_upper", "bias_lower", "bias_upper"), "figure2")
    blocks = _groups(data, ("model", "corpus"))
    fig = Figure(figsize=(11, 5.2 * len(blocks)), layout="constrained")
    for subfig, ((model, corpus), block) in zip(_block_figures(fig, len(blocks)), blocks, strict=True):
        spans = _groups(block, ("span",))
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


# ------------------------------------------------------------------ performance and NMI per condition


def _performance_and_nmi(inputs: ReportInputs) -> pd.DataFrame:
    """Overall@9 and community NMI per (model, corpus, condition): mean, sample sd and n over seeds (F.5).

    Overall@9 is averaged over the figure's evaluated seeds, NMI over its probed seeds (the two
    can differ, as in Table 5).
    """
    keys = ["model", "corpus", "condition"]
    performance = performance_frame(inputs.results, inputs.closure.evaluations)
    overall = aggregate_frame(performance, inputs.config, suite="overall9")
    nmi = retention_frame(inputs.results, _trained_probes(inputs))
    merged = summarize_seeds(overall, keys, ["overall9"]).merge(
        summarize_seeds(nmi, keys, ["nmi"]), on=keys, how="outer"
    )
    merged["label"] = [_label(inputs.config, c) for c in merged["condition"]]
    return _sort_conditions(merged, inputs)


def _sort_conditions(frame: pd.DataFrame, inputs: ReportInputs, then: Sequence[str] = ()) -> pd.DataFrame:
    """Rows in the figure's model, corpus and condition order, then by the columns ``then``."""
    ranks = {
        "model": inputs.rank("models"),
        "corpus": inputs.rank("corpora"),
        "condition": inputs.rank("conditions"),
    }
    return frame.sort_values(
        ["model", "corpus", "condition", *then],
        key=lambda column: column.map(ranks[column.name]) if column.name in ranks else column,
        kind="stable",
    ).reset_index(drop=True)


# ------------------------------------------------------------------ figure 3: soft/hard x within/global

ENFORCEMENT = {"rpb": "soft", "rpb_hard": "hard"}  # intervention -> enforcement axis (§3.1, §5.2.2)
SCOPE = {"shuffled_within": "within", "shuffled_global": "global", "base": "global"}  # prior -> shuffle axis


def design_cell(config: Mapping[str, Any], condition: str) -> tuple[str, str]:
    """(enforcement, scope) of a condition in the §5.2.2 design.

    Enforcement is soft for the logit bias of eq. (4) and hard for the top-k override; scope is
    the prior's shuffle (within or across communities). The unshuffled base prior sits in the
    global column as the soft reference (RPB), following Figure 3.
    """
    entry = config["conditions"][condition]
    intervention, prior = entry["intervention"], entry.get("prior")
    if intervention not in ENFORCEMENT or prior not in SCOPE:
        raise ValueError(
            f"conditions.{condition}: intervention {intervention!r} with prior {prior!r} has no design cell"
        )
    return ENFORCEMENT[intervention], SCOPE[prior]


def figure3_data(inputs: ReportInputs) -> pd.DataFrame:
    """One row per (corpus, condition): design cell, Overall@9 and NMI with sd and seed counts (Table 5)."""
    frame = _performance_and_nmi(inputs)
    cells = [design_cell(inputs.config, c) for c in frame["condition"]]
    frame["enforcement"] = [cell[0] for cell in cells]
    frame["scope"] = [cell[1] for cell in cells]
    frame["prior"] = [inputs.config["conditions"][c]["prior"] for c in frame["condition"]]
    clash = frame.duplicated(["model", "corpus", "enforcement", "scope"], keep=False)
    if clash.any():
        raise ValueError(
            f"figure3: several conditions share a design cell: {sorted(set(frame.loc[clash, 'condition']))}"
        )
    return frame


def _text_colour(cmap: Any, value: float) -> str:
    """Black or white, whichever reads on a ``cmap`` tile of normalised ``value``."""
    r, g, b, _ = cmap(value)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _count(value: Any) -> int:
    """A seed count read back from a frame or CSV (NaN for a cell a side does not have)."""
    return 0 if pd.isna(value) else int(value)


def _design_text(cell: pd.Series) -> str:
    """The annotation of one design cell: condition, Overall@9 and NMI with their seed counts."""
    reference = "\n(unshuffled reference)" if cell["prior"] == registry.BASE else ""
    return (
        f"{cell['label']}{reference}\n"
        f"Overall@9 {_mean_sd(cell['overall9'], cell['overall9_sd'], 2)} (n={_count(cell['overall9_n'])})\n"
        f"NMI {_mean_sd(cell['nmi'], cell['nmi_sd'], 3)} (n={_count(cell['nmi_n'])})"
    )


def figure3_plot(data: pd.DataFrame) -> Figure:
    """Figure 3: per corpus a 2x2 grid (rows soft/hard, columns within/global) coloured by Overall@9."""
    columns = ("model", "corpus", "condition", "label", "prior", "enforcement", "scope", "overall9", "nmi")
    _require(data, columns, "figure3")
    cmap = colormaps[MATRIX_CMAP]
    norm = Normalize(vmin=float(np.nanmin(data["overall9"])), vmax=float(np.nanmax(data["overall9"])))
    blocks = _groups(data, ("model", "corpus"))
    fig = Figure(figsize=(6.4 * len(blocks) + 1.0, 5.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(blocks), squeeze=False).ravel())
    rows, cols = ("soft", "hard"), ("within", "global")
    for ax, ((model, corpus), block) in zip(axes, blocks, strict=True):
        for _, cell in block.iterrows():
            r, c = rows.index(cell["enforcement"]), cols.index(cell["scope"])
            value = cell["overall9"]
            face = "#DDDDDD" if pd.isna(value) else cmap(norm(value))
            ax.add_patch(Rectangle((c, r), 1, 1, facecolor=face, edgecolor="white", linewidth=3))
            colour = "black" if pd.isna(value) else _text_colour(cmap, norm(value))
            ax.text(c + 0.5, r + 0.5, _design_text(cell), ha="center", va="center", fontsize=9, color=colour)
        ax.set_xlim(0, 2)
        ax.set_ylim(2, 0)
        ax.set_xticks([0.5, 1.5], ["within-community", "global"])
        ax.set_yticks([0.5, 1.5], ["soft\n(logit bias)", "hard\n(top-k override)"])
        ax.set_xlabel("prior shuffle scope")
        ax.set_ylabel("enforcement")
        ax.set_title(f"{model} / {corpus}")
        ax.tick_params(length=0)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes), label="Overall@9 (%, mean over seeds)")
    fig.suptitle(
        "Soft vs hard enforcement × within vs global prior shuffle (§5.2.2): Overall@9 and community NMI"
    )
    return fig


# ------------------------------------------------------------------ beta sweep (Table 6)


def condition_beta(config: Mapping[str, Any], condition: str) -> float:
    """The prior strength beta of a condition: 0 without an intervention (SFT), NaN for RPB-hard."""
    entry = config["conditions"][condition]
    if entry["intervention"] == "none":
        return 0.0
    if entry["intervention"] == "rpb":
        return float(entry["params"]["beta"])
    if entry["intervention"] == "rpb_hard":
        return float("nan")
    raise ValueError(f"conditions.{condition}: intervention {entry['intervention']!r} has no beta")


def condition_variant(config: Mapping[str, Any], condition: str) -> str:
    """The training settings a condition overrides (``key=value``, sorted), ``""`` for the sweep itself."""
    settings = config["conditions"][condition].get("settings") or {}
    return " ".join(f"{key}={json.dumps(value)}" for key, value in sorted(settings.items()))


def beta_sweep_data(inputs: ReportInputs) -> pd.DataFrame:
    """One row per (corpus, condition): beta (NaN and ``hard`` true for RPB-hard), NMI and Overall@9.

    ``variant`` names the settings a sensitivity condition overrides (SFT with the expert-bias
    update frozen, RPB with the bias in selection only); the sweep's own points have none.
    """
    frame = _performance_and_nmi(inputs)
    frame["beta"] = [condition_beta(inputs.config, c) for c in frame["condition"]]
    frame["hard"] = frame["beta"].isna()
    frame["variant"] = [condition_variant(inputs.config, c) for c in frame["condition"]]
    return frame


def _errorbar(ax: Any, x: float, row: pd.Series, column: str, marker: str, **style: Any) -> None:
    sd = row[f"{column}_sd"]
    ax.errorbar(
        x,
        row[column],
        yerr=None if pd.isna(sd) else sd,
        fmt=marker,
        markersize=7,
        capsize=3,
        color=_condition_colour(row["condition"]),
        markeredgecolor="black",
        zorder=3,
        **style,
    )


def beta_sweep_plot(data: pd.DataFrame) -> Figure:
    """Community NMI (top) and Overall@9 (bottom) against beta per corpus, RPB-hard right of a divider.

    Sensitivity variants (a ``variant`` set) are open squares at their beta, off the sweep's line.
    """
    _require(
        data,
        ("model", "corpus", "condition", "label", "beta", "hard", "variant", "nmi", "overall9"),
        "beta_sweep",
    )
    blocks = _groups(data, ("model", "corpus"))
    fig = Figure(figsize=(4.2 * len(blocks), 6.2), layout="constrained")
    axes = fig.subplots(2, len(blocks), squeeze=False, sharex=True)
    metrics_shown = (("nmi", "community NMI (layer mean)"), ("overall9", "Overall@9 (%)"))
    for col, ((model, corpus), block) in enumerate(blocks):
        hard = block["hard"].astype(str).str.lower() == "true"
        variant = block["variant"].fillna("") != ""
        soft, hard_rows = block[~hard & ~variant].sort_values("beta"), block[hard]
        variants = block[~hard & variant]
        soft_max = float(soft["beta"].max()) if not soft.empty else 1.0
        hard_x = soft_max + 0.3
        for row, (column, ylabel) in enumerate(metrics_shown):
            ax = axes[row, col]
            ax.plot(soft["beta"], soft[column], color=_condition_colour("rpb"), linewidth=1.5, zorder=2)
            for _, point in soft.iterrows():
                _errorbar(ax, float(point["beta"]), point, column, "o")
            for _, point in variants.iterrows():
                _errorbar(
                    ax, float(point["beta"]), point, column, "s", markerfacecolor="none", label=point["label"]
                )
            for _, point in hard_rows.iterrows():
                _errorbar(ax, hard_x, point, column, "D")
            ax.axvline(soft_max + 0.15, color="black", linestyle=":", linewidth=0.8)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        if not variants.empty:
            axes[0, col].legend(fontsize=7, loc="best")
        axes[0, col].set_title(f"{model} / {corpus}")
        ticks = [float(b) for b in soft["beta"]] + [hard_x] * len(hard_rows)
        labels = [
            f"0\n{label}" if b == 0 else f"{b:g}"
            for b, label in zip(soft["beta"], soft["label"], strict=True)
        ]
        labels += [f"hard\n{label}" for label in hard_rows["label"]]
        axes[1, col].set_xticks(ticks, labels)
        axes[1, col].set_xlabel("β (prior strength of eq. 4)")
    fig.suptitle("RPB operating range: community NMI and Overall@9 against β, RPB-hard at the hard end")
    return fig


# ------------------------------------------------------------------ rho sensitivity (Table 10)


def rho_sensitivity_data(inputs: ReportInputs) -> pd.DataFrame:
    """The B.2 sweep of every probed checkpoint: NMI per (rho, detector, detector seed), ``main`` marked.

    ``main`` is true for the detector and seed of the main text (``probe.detector``), the
    setting Table 10 reports; the other seeds of that detector give the dispersion band.
    """
    sweep = sweep_frame(inputs.results, _trained_probes(inputs))
    detector = inputs.config["probe"]["detector"]
    sweep["main"] = (sweep["detector"] == detector["name"]) & (sweep["detector_seed"] == detector["seed"])
    runs = sweep.groupby(["model", "corpus", "condition", "seed"])["main"].any()
    if not runs.all():
        raise ResultFileError(
            f"rho_sensitivity: no sweep rows of detector {detector['name']!r} seed {detector['seed']} "
            f"for {runs[~runs].index.tolist()}"
        )
    sweep["label"] = [_label(inputs.config, c) for c in sweep["condition"]]
    return _sort_conditions(sweep, inputs, ("seed", "detector", "detector_seed", "rho"))


def rho_sensitivity_plot(data: pd.DataFrame) -> Figure:
    """Community NMI against rho per condition and corpus; band = range over the main detector's seeds."""
    _require(
        data,
        ("model", "corpus", "condition", "seed", "label", "rho", "detector", "main", "nmi"),
        "rho_sensitivity",
    )
    blocks = _groups(data, ("model", "corpus"))
    fig = Figure(figsize=(4.6 * len(blocks), 4.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(blocks), squeeze=False, sharey=True).ravel())
    for ax, ((model, corpus), block) in zip(axes, blocks, strict=True):
        main = block["main"].astype(str).str.lower() == "true"
        detector = block.loc[main, "detector"].iloc[0]
        for (condition, seed), run in _groups(block, ("condition", "seed")):
            colour = _condition_colour(condition)
            line = run[main.loc[run.index]].sort_values("rho")
            band = run[run["detector"] == detector].groupby("rho")["nmi"].agg(["min", "max"])
            ax.fill_between(band.index, band["min"], band["max"], color=colour, alpha=0.15, linewidth=0)
            ax.plot(
                line["rho"], line["nmi"], "o-", color=colour, label=_run_title(run["label"].iloc[0], seed)
            )
        ax.set_title(f"{model} / {corpus}")
        ax.set_xticks(sorted(block["rho"].astype(float).unique()))
        ax.set_xlabel("ρ (retained edge fraction of expert pairs)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("community NMI vs base (layer mean)")
    fig.legend(
        *axes[0].get_legend_handles_labels(),
        loc="outside lower center",
        ncol=4,
        fontsize=8,
        title=f"line: {detector} at the main detector seed; band: range over its detector seeds",
        title_fontsize=8,
    )
    fig.suptitle("Sensitivity of community NMI to the edge-fraction threshold ρ (Appendix B.2)")
    return fig


# ------------------------------------------------------------------ community-ordered co-activation


def coactivation_heatmaps_data(inputs: ReportInputs) -> pd.DataFrame:
    """The eq. (1) matrix of the base and of each trained run at one layer, experts in base-community order.

    One row per (checkpoint, matrix entry): ``row``/``col`` (position in the ordering),
    ``expert_i``/``expert_j`` (expert ids), ``community_i``/``community_j`` (base communities)
    and ``weight`` (``w_ij``). The ordering is ``community_order`` of the base partition.
    """
    frames = []
    for base in _base_probes(inputs):
        runs = [base] + [
            p for p in _trained_probes(inputs) if (p.model, p.corpus) == (base.model, base.corpus)
        ]
        _, experts, layer, moe_layer = _layer_topk(inputs.results.path(routes_path, base))
        labels = _base_partition(inputs.results, base.model, base.corpus, layer, experts)["labels"]
        order = community_order(labels)
        rows, cols = np.indices((experts, experts))
        for probe in runs:
            topk, _, _, _ = _layer_topk(inputs.results.path(routes_path, probe), layer)
            w = graphs.coactivation(topk, experts)[np.ix_(order, order)]  # (E, E), community order
            frames.append(
                pd.DataFrame(
                    {
                        "model": probe.model,
                        "corpus": probe.corpus,
                        "condition": probe.condition,
                        "seed": probe.seed,
                        "label": _label(inputs.config, probe.condition),
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
    image = _draw_matrix(
        ax, _pivot(run.rename(columns={"row": "i", "col": "j", "weight": "value"})), MATRIX_CMAP, vmax
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
    _require(data, (*columns, "weight"), "coactivation_heatmaps")
    blocks = _groups(data, ("model", "corpus"))
    runs = [_groups(block, ("condition", "seed")) for _, block in blocks]
    panels = max(len(block_runs) for block_runs in runs)
    vmax = float(data["weight"].max())
    fig = Figure(figsize=(3.3 * panels + 1.0, 3.5 * len(blocks)), layout="constrained")
    axes = fig.subplots(len(blocks), panels, squeeze=False)
    for r, (((model, corpus), _), block_runs) in enumerate(zip(blocks, runs, strict=True)):
        for c, ((condition, seed), run) in enumerate(block_runs):
            image = _draw_ordered_matrix(axes[r, c], run, vmax)
            axes[r, c].set_title(_run_title(run["label"].iloc[0], seed), color=_condition_colour(condition))
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


# figure1: the co-activation graph of §2 / Figure 1 on real probe routes (eq. (1), base communities,
#   each trained run's communities with their NMI). figure2: one sample's frozen-base prior (eq. (2))
#   and its bias (eq. (3)), clamp bounds marked. figure3: the soft/hard x within/global design of
#   §5.2.2 (Table 5's numbers). beta_sweep: NMI and Overall@9 against beta (Table 6).
#   rho_sensitivity: NMI against the edge fraction rho (Table 10). coactivation_heatmaps: base and
#   trained co-activation matrices ordered by base community, on one colour scale.
FIGURES: dict[str, tuple[Callable[[ReportInputs], pd.DataFrame], Callable[[pd.DataFrame], Figure]]] = {
    "figure1": (figure1_data, figure1_plot),
    "figure2": (figure2_data, figure2_plot),
    "figure3": (figure3_data, figure3_plot),
    "beta_sweep": (beta_sweep_data, beta_sweep_plot),
    "rho_sensitivity": (rho_sensitivity_data, rho_sensitivity_plot),
    "coactivation_heatmaps": (coactivation_heatmaps_data, coactivation_heatmaps_plot),
}
