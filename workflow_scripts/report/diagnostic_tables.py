"""Diagnostics of this reproduction's own choices, rendered as tables beside the paper's.

``diagnostic_prior_topk``: eq. (2)'s prior takes the softmax of the frozen base router's logits for
every family, while Moonlight-16B-A3B's router selects by sigmoid scores with a correction bias and
group-limited top-k (docs/choices.md, "The prior's gate on Moonlight-16B-A3B"). Per base model,
corpus and MoE layer, how often the experts the base actually selected on the probe pool are the
top-k of that softmax gate, read from the bias-free base routes the probe records.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from workflow_scripts.file_formats.routes import load_routes
from workflow_scripts.layout import routes_path
from workflow_scripts.registry import BASE
from workflow_scripts.report.routing_tables import without_seeds
from workflow_scripts.report.table import ReportInputs, Table
from workflow_scripts.routing_metrics.metrics import gate_topk_agreement

COLUMNS = ("tokens", "topk_equal", "topk_overlap")
LABELS = {
    "tokens": "Probed tokens",
    "topk_equal": "Selection = gate top-k",
    "topk_overlap": "Selected inside gate top-k",
}


def prior_topk(inputs: ReportInputs) -> Table:
    """Per (model, corpus, MoE layer): the share of probe tokens whose base selection is the top-k
    of the prior's softmax gate, and the mean share of selected experts inside it; no seeds."""
    models, corpora = inputs.rank("models"), inputs.rank("corpora")
    probes = sorted(
        (p for p in inputs.closure.probes if p.condition == BASE),
        key=lambda p: (models[p.model], corpora[p.corpus]),
    )
    rows = []
    for probe in probes:
        routes, tokens = load_routes(inputs.results.path(routes_path, probe))
        equal, overlap = gate_topk_agreement(routes.topk, routes.probs)
        for index, layer in enumerate(routes.moe_layers.tolist()):
            rows.append(
                {
                    "model": probe.model,
                    "corpus": probe.corpus,
                    "layer": int(layer),
                    "tokens": len(tokens),
                    "topk_equal": float(equal[index]),
                    "topk_overlap": float(overlap[index]),
                }
            )
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=("model", "corpus", "layer"),
        columns=COLUMNS,
        rows=without_seeds(pd.DataFrame(rows, columns=["model", "corpus", "layer", *COLUMNS]), COLUMNS),
        labels=LABELS,
        block="model",
        notes=(
            "Frozen base routers on the probe pool: no training seeds are involved. layer: the decoder "
            "layer of each MoE layer.",
            "Gate: softmax of the unbiased router logits, the prior's p_base for every family (eq. (2)). "
            "Selection: the experts the stock router selected (Moonlight-16B-A3B: sigmoid scores, "
            "correction bias and group-limited top-k; DeepSeek-V2-Lite and Qwen3-30B-A3B-Base: the "
            "softmax's own top-k, so 1 by construction). An expert tied with the gate's k-th largest "
            "probability counts as inside its top-k.",
        ),
        digits={"tokens": 0, "topk_equal": 3, "topk_overlap": 3},
    )


TABLES: dict[str, Callable[[ReportInputs], Table]] = {"diagnostic_prior_topk": prior_topk}
