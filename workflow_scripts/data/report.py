"""The data report of one corpus: what the filter, the penalties and the selection did.

It lets a reader check a build against F.2 (e.g. 22,097 rows in, 20,000 kept)
without opening the parquet files.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.data.scoring import PENALTIES
from workflow_scripts.data.selection import Selection

QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def distribution(values: np.ndarray) -> dict[str, float | None]:
    """min, quantiles, max and mean of ``values`` (all None when empty)."""
    keys = ["min", *(f"q{q:g}" for q in QUANTILES), "max", "mean"]
    if len(values) == 0:
        return dict.fromkeys(keys)
    stats = [np.min(values), *np.quantile(values, QUANTILES), np.max(values), np.mean(values)]
    return {key: round(float(value), 6) for key, value in zip(keys, stats, strict=True)}


def build_report(scored: pd.DataFrame, selection: Selection, corpus: str) -> dict[str, Any]:
    """Counts at each step, penalty counts and score distributions (all rows and kept rows)."""
    score = scored["score"].to_numpy()
    return {
        "corpus": corpus,
        "rows_in": int(len(scored)),
        "rows_passing_filter": int(selection.passes_filter.sum()),
        "rows_eligible": int(selection.eligible.sum()),
        "rows_train": int(selection.train.sum()),
        "rows_probe": int(selection.probe.sum()),
        # Eligible rows on neither side, because the other side holds the same prompt text.
        "rows_withheld_shared_prompt": int(selection.shared_prompt.sum()),
        "probe_tokens_estimated": round(float(selection.tokens[selection.probe].sum()), 3),
        "penalty_counts": {name: int(scored[f"p_{name}"].sum()) for name in PENALTIES},
        "rows_with_any_penalty": int((scored["n_penalties"] > 0).sum()),
        "score_all": distribution(score),
        "score_train": distribution(score[selection.train]),
    }
