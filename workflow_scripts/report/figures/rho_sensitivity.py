"""Community NMI against the edge fraction ρ per condition (Appendix B.2, Table 10)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from workflow_scripts.report.figures.common import (
    condition_colour,
    condition_label,
    groups,
    require_columns,
    run_title,
    sort_conditions,
    trained_probes,
)
from workflow_scripts.report.routing_frames import ResultFileError, sweep_frame
from workflow_scripts.report.table import ReportInputs


def rho_sensitivity_data(inputs: ReportInputs) -> pd.DataFrame:
    """The B.2 sweep of every probed checkpoint: NMI per (rho, detector, detector seed), ``main`` marked.

    ``main`` is true for the detector and seed of the main text (``probe.detector``), the
    setting Table 10 reports; the other seeds of that detector give the dispersion band.
    """
    sweep = sweep_frame(inputs.results, trained_probes(inputs))
    detector = inputs.config["probe"]["detector"]
    sweep["main"] = (sweep["detector"] == detector["name"]) & (sweep["detector_seed"] == detector["seed"])
    runs = sweep.groupby(["model", "corpus", "condition", "seed"])["main"].any()
    if not runs.all():
        raise ResultFileError(
            f"rho_sensitivity: no sweep rows of detector {detector['name']!r} seed {detector['seed']} "
            f"for {runs[~runs].index.tolist()}"
        )
    sweep["label"] = [condition_label(inputs.config, c) for c in sweep["condition"]]
    return sort_conditions(sweep, inputs, ("seed", "detector", "detector_seed", "rho"))


def rho_sensitivity_plot(data: pd.DataFrame) -> Figure:
    """Community NMI against rho per condition and corpus; band = range over the main detector's seeds."""
    require_columns(
        data,
        ("model", "corpus", "condition", "seed", "label", "rho", "detector", "main", "nmi"),
        "rho_sensitivity",
    )
    blocks = groups(data, ("model", "corpus"))
    fig = Figure(figsize=(4.6 * len(blocks), 4.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(blocks), squeeze=False, sharey=True).ravel())
    for ax, ((model, corpus), block) in zip(axes, blocks, strict=True):
        main = block["main"].astype(str).str.lower() == "true"
        detector = block.loc[main, "detector"].iloc[0]
        for (condition, seed), run in groups(block, ("condition", "seed")):
            colour = condition_colour(condition)
            line = run[main.loc[run.index]].sort_values("rho")
            band = run[run["detector"] == detector].groupby("rho")["nmi"].agg(["min", "max"])
            ax.fill_between(band.index, band["min"], band["max"], color=colour, alpha=0.15, linewidth=0)
            ax.plot(line["rho"], line["nmi"], "o-", color=colour, label=run_title(run["label"].iloc[0], seed))
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
