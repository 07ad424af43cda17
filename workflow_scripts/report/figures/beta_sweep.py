"""RPB's operating range (Appendix A.1, Table 6): community NMI and Overall@9 against β, with RPB-hard
at the hard end."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from workflow_scripts.report.figures.common import (
    condition_colour,
    groups,
    performance_and_nmi,
    require_columns,
)
from workflow_scripts.report.table import ReportInputs


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
    frame = performance_and_nmi(inputs)
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
        color=condition_colour(row["condition"]),
        markeredgecolor="black",
        zorder=3,
        **style,
    )


def beta_sweep_plot(data: pd.DataFrame) -> Figure:
    """Community NMI (top) and Overall@9 (bottom) against beta per corpus, RPB-hard right of a divider.

    Sensitivity variants (a ``variant`` set) are open squares at their beta, off the sweep's line.
    """
    require_columns(
        data,
        ("model", "corpus", "condition", "label", "beta", "hard", "variant", "nmi", "overall9"),
        "beta_sweep",
    )
    blocks = groups(data, ("model", "corpus"))
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
            ax.plot(soft["beta"], soft[column], color=condition_colour("rpb"), linewidth=1.5, zorder=2)
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
