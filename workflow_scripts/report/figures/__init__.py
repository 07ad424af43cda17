"""The paper's figures 1-3 and three appendix views, each as tidy data plus a plot of that data.

Every figure is a pair in ``FIGURES``, from its own module: a data function ``(ReportInputs) ->
pd.DataFrame`` that reads the figure's declared result files (rule ``figure_data`` writes the
frame to CSV), and a plot function ``(pd.DataFrame) -> Figure`` that draws only what that frame
holds (rule ``figure``), so restyling never recomputes. What several figures share is in
``common``; a figure module imports no other. Plots use matplotlib's object API, no pyplot.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from matplotlib.figure import Figure

from workflow_scripts.report.figures.beta_sweep import (
    beta_sweep_data,
    beta_sweep_plot,
    condition_beta,
    condition_variant,
)
from workflow_scripts.report.figures.coactivation_heatmaps import (
    coactivation_heatmaps_data,
    coactivation_heatmaps_plot,
)
from workflow_scripts.report.figures.common import CONDITION_COLOURS, community_order, figure_layer
from workflow_scripts.report.figures.figure1 import (
    SELECTION_TOKENS,
    community_layout,
    figure1_data,
    figure1_plot,
    match_communities,
)
from workflow_scripts.report.figures.figure2 import figure2_data, figure2_plot
from workflow_scripts.report.figures.figure3 import design_cell, figure3_data, figure3_plot
from workflow_scripts.report.figures.rho_sensitivity import rho_sensitivity_data, rho_sensitivity_plot
from workflow_scripts.report.table import ReportInputs

__all__ = [
    "CONDITION_COLOURS", "FIGURES", "SELECTION_TOKENS", "beta_sweep_data", "beta_sweep_plot",
    "coactivation_heatmaps_data", "coactivation_heatmaps_plot", "community_layout", "community_order",
    "condition_beta", "condition_variant", "design_cell", "figure1_data", "figure1_plot", "figure2_data",
    "figure2_plot", "figure3_data", "figure3_plot", "figure_layer", "match_communities",
    "rho_sensitivity_data", "rho_sensitivity_plot",
]  # fmt: skip

FIGURES: dict[str, tuple[Callable[[ReportInputs], pd.DataFrame], Callable[[pd.DataFrame], Figure]]] = {
    "figure1": (figure1_data, figure1_plot),
    "figure2": (figure2_data, figure2_plot),
    "figure3": (figure3_data, figure3_plot),
    "beta_sweep": (beta_sweep_data, beta_sweep_plot),
    "rho_sensitivity": (rho_sensitivity_data, rho_sensitivity_plot),
    "coactivation_heatmaps": (coactivation_heatmaps_data, coactivation_heatmaps_plot),
}
