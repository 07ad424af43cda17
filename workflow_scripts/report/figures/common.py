"""What the figures share: colours, the layer shown, community order, probe lists and plot helpers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from workflow_scripts import registry
from workflow_scripts.file_formats.routes import load_routes
from workflow_scripts.layout import partition_path
from workflow_scripts.report.frames import aggregate_frame, performance_frame
from workflow_scripts.report.inputs import ResultFiles
from workflow_scripts.report.routing_frames import ResultFileError, field, read_json, retention_frame
from workflow_scripts.report.table import ReportInputs, summarize_seeds
from workflow_scripts.routing_metrics.communities import Detector

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


MATRIX_CMAP = "cividis"


def figure_layer(num_layers: int) -> int:
    """The MoE layer figures 1, 2 and the heatmaps show: the middle one, index ``L // 2``."""
    if num_layers < 1:
        raise ValueError(f"need at least one MoE layer, got {num_layers}")
    return num_layers // 2


def community_order(labels: np.ndarray) -> np.ndarray:
    """Expert ids sorted by community, then by id: the axis order of a community-ordered matrix."""
    labels = np.asarray(labels)
    return np.lexsort((np.arange(labels.size), labels))


def condition_label(config: Mapping[str, Any], condition: str) -> str:
    return "Base" if condition == registry.BASE else str(config["conditions"][condition]["label"])


def layer_topk(path: Path, layer: int | None = None) -> tuple[np.ndarray, int, int, int]:
    """One layer's top-k (N, k) of a routes file, with E, the layer index and its decoder layer."""
    routes, _ = load_routes(path)
    layer = figure_layer(routes.topk.shape[0]) if layer is None else layer
    return routes.topk[layer], routes.num_experts, layer, int(routes.moe_layers[layer])


def base_partition(results: ResultFiles, model: str, corpus: str, layer: int, experts: int) -> dict[str, Any]:
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


def trained_probes(inputs: ReportInputs) -> list[registry.Probe]:
    return _probes(inputs, base=False)


def base_probes(inputs: ReportInputs) -> list[registry.Probe]:
    return _probes(inputs, base=True)


def condition_colour(condition: str) -> str:
    return CONDITION_COLOURS.get(condition, OTHER_COLOUR)


def run_title(label: str, seed: Any) -> str:
    return label if pd.isna(seed) else f"{label} s{int(seed)}"


def groups(data: pd.DataFrame, keys: Sequence[str]) -> list[tuple[tuple[Any, ...], pd.DataFrame]]:
    """``data`` split by ``keys`` in order of first appearance."""
    return [(key, group) for key, group in data.groupby(list(keys), sort=False, dropna=False)]


def require_columns(data: pd.DataFrame, columns: Iterable[str], figure_id: str) -> None:
    missing = [column for column in columns if column not in data.columns]
    if missing:
        raise ValueError(f"{figure_id}: data lacks columns {missing}")
    if data.empty:
        raise ValueError(f"{figure_id}: no data to plot")


def draw_matrix(ax: Any, matrix: np.ndarray, cmap: str, vmax: float | None = None) -> Any:
    """A matrix as an image with integer ticks (expert ids, token or ordering positions)."""
    image = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest", aspect="auto")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return image


def pivot(rows: pd.DataFrame) -> np.ndarray:
    """The 2-D array behind ``part`` rows (i, j, value)."""
    i, j = rows["i"].astype(int).to_numpy(), rows["j"].astype(int).to_numpy()
    matrix = np.zeros((i.max() + 1, j.max() + 1))
    matrix[i, j] = rows["value"].to_numpy(dtype=float)
    return matrix


def block_figures(fig: Figure, count: int) -> list[Any]:
    """One subfigure per (model, corpus) block, stacked."""
    return list(np.atleast_1d(fig.subfigures(count, 1, squeeze=False).ravel()))


def performance_and_nmi(inputs: ReportInputs) -> pd.DataFrame:
    """Overall@9 and community NMI per (model, corpus, condition): mean, sample sd and n over seeds (F.5).

    Overall@9 is averaged over the figure's evaluated seeds, NMI over its probed seeds (the two
    can differ, as in Table 5).
    """
    keys = ["model", "corpus", "condition"]
    performance = performance_frame(inputs.results, inputs.closure.evaluations)
    overall = aggregate_frame(performance, inputs.config, suite="overall9")
    nmi = retention_frame(inputs.results, trained_probes(inputs))
    merged = summarize_seeds(overall, keys, ["overall9"]).merge(
        summarize_seeds(nmi, keys, ["nmi"]), on=keys, how="outer"
    )
    merged["label"] = [condition_label(inputs.config, c) for c in merged["condition"]]
    return sort_conditions(merged, inputs)


def sort_conditions(frame: pd.DataFrame, inputs: ReportInputs, then: Sequence[str] = ()) -> pd.DataFrame:
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
