"""Figure 3: the soft/hard x within/global design of §5.2.2 with Overall@9 and community NMI per cell
(Table 5)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from workflow_scripts import registry
from workflow_scripts.report.figures.common import MATRIX_CMAP, groups, performance_and_nmi, require_columns
from workflow_scripts.report.table import ReportInputs


def _mean_sd(mean: float, sd: float, digits: int) -> str:
    """``mean +- sd`` (sd omitted for a single seed), or ``n/a`` for an absent cell."""
    if pd.isna(mean):
        return "n/a"
    return f"{mean:.{digits}f}" if pd.isna(sd) else f"{mean:.{digits}f} ± {sd:.{digits}f}"


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
    frame = performance_and_nmi(inputs)
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
    require_columns(data, columns, "figure3")
    cmap = colormaps[MATRIX_CMAP]
    norm = Normalize(vmin=float(np.nanmin(data["overall9"])), vmax=float(np.nanmax(data["overall9"])))
    blocks = groups(data, ("model", "corpus"))
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
