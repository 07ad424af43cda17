"""The routing-side tables of the paper (Tables 1, 5, 6, 9, 10, 11, 13, 15) as :class:`Table` objects.

Every table reads exactly its registry closure: probed seeds from ``closure.probes`` and trained
seeds from ``closure.evaluations``, so the two seed budgets of Appendix F.5 stay separate (e.g.
Table 5: shuffled controls probed on s42/s43, performance over s42-s44). Means and sample sds
across seeds come from :func:`summarize_seeds`; prior-side and base-router values have no seed
(``n`` = 0). Performance is the Overall@9 suite of Appendix F.4 read through
:mod:`workflow_scripts.report.frames`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import combinations, product
from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.registry import BASE, closure
from workflow_scripts.report.frames import aggregate_frame, performance_frame
from workflow_scripts.report.routing_frames import (
    PROBE_KEYS,
    SHUFFLE_SCOPES,
    null_model_frame,
    prior_frame,
    retention_frame,
    span_frame,
    sweep_frame,
)
from workflow_scripts.report.table import ReportInputs, Table, summarize_seeds
from workflow_scripts.routing_metrics.metrics import (
    centroid_cosine,
    cross_domain_l1,
    layer_mean_effective_fraction,
    sharpness,
)

ROW_KEYS = ("model", "corpus", "condition")
TABLE_KEYS = ("corpus", "condition")  # the tables below are each on one model, which the rows omit
SUITE = "overall9"
PERFORMANCE = ("overall9", "id", "ood")
CONDITION_TEXT = ("label", "role", "constrained_object", "token_conditioned_routing")
PRIOR_SIDE = (
    "prior_topk_overlap",
    "topk_change_rate",
    "abs_delta_bias_p90",
    "clamp_upper_fraction",
    "bias_sd",
    "community_nmi",
    "community_nmi_min",
)
COLUMN_LABELS = {
    "label": "method",
    "role": "role",
    "constrained_object": "constrained object",
    "token_conditioned_routing": "token-conditioned routing",
    "nmi": "Comm. NMI",
    "tvd": "TVD",
    "jsd": "JSD",
    "topk_overlap": "top-k",
    "overall9": "Overall@9",
    "id": "ID",
    "ood": "OOD",
    "q_margin": "ΔQ",
    "nmi_margin": "Δ NMI",
    "layers_beating_null_q": "layers beating null on Q",
    "sharpness_math": "‖p − U‖₁ (math)",
    "sharpness_code": "‖p − U‖₁ (code)",
    "cross_domain": "‖p_math − p_code‖₁",
    "eff_frac_min": "eff. expert frac. (min)",
    "eff_frac_math": "eff. expert frac. (math)",
    "eff_frac_code": "eff. expert frac. (code)",
    "eff_frac_max": "eff. expert frac. (max)",
    "prior_topk_overlap": "prior top-k overlap",
    "topk_change_rate": "top-k change rate",
    "abs_delta_bias_p90": "effective log-bias |Δb| p90",
    "clamp_upper_fraction": "clamp upper-bound frac.",
    "bias_sd": "per-row bias sd",
    "community_nmi": "B.2 community NMI",
    "community_nmi_min": "B.2 community NMI (min)",
}
ACCURACY_DIGITS = {column: 2 for column in PERFORMANCE}


def table_grid(inputs: ReportInputs) -> pd.DataFrame:
    """The (model, corpus, condition) rows a table's cells list, grouped by model, then corpus.

    Models, corpora and conditions each keep the order in which the cells first name them,
    so rows follow the paper's layout whatever the cell grouping.
    """
    present = {
        triple
        for cell in inputs.cells
        for triple in product(cell["models"], cell["corpora"], cell.get("conditions", []))
    }
    models = list(inputs.rank("models"))
    corpora = list(inputs.rank("corpora"))
    conditions = list(inputs.rank("conditions"))
    rows = [triple for triple in product(models, corpora, conditions) if triple in present]
    return pd.DataFrame(rows, columns=list(ROW_KEYS))


def drop_model(table_id: str, rows: pd.DataFrame) -> pd.DataFrame:
    """The rows without their ``model`` column, which must hold a single model (the tables' keys omit it)."""
    models = sorted(rows["model"].unique())
    if len(models) > 1:
        raise ValueError(f"{table_id}: rows span models {models}, but the table has one model")
    return rows.drop(columns="model").reset_index(drop=True)


def assemble(
    table_id: str, grid: pd.DataFrame, parts: Sequence[pd.DataFrame], columns: Sequence[str]
) -> pd.DataFrame:
    """Join per-seed summaries onto the table's rows; every cell must be covered by at least one seed."""
    rows = grid.copy()
    for part in parts:
        rows = rows.merge(part, on=list(ROW_KEYS), how="left")
    for column in columns:
        rows[f"{column}_n"] = rows[f"{column}_n"].fillna(0).astype(int)
        empty = rows[rows[f"{column}_n"] == 0]
        if not empty.empty:
            first = tuple(empty.iloc[0][list(ROW_KEYS)])
            raise ValueError(f"{table_id}: no seed covers column {column!r} of row {first}")
    return drop_model(table_id, rows)


def without_seeds(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Add empty sd and zero-count columns for values that have no seed (prior-side, base, text)."""
    rows = frame.copy()
    for column in columns:
        rows[f"{column}_sd"] = np.nan
        rows[f"{column}_n"] = 0
    return rows


def performance_seeds(inputs: ReportInputs) -> pd.DataFrame:
    """Per-seed Overall@9 / ID / OOD of the table's trained evaluations (F.4, F.5)."""
    evaluations = closure(inputs.config, inputs.output_id).evaluations
    trained = [e for e in evaluations if e.condition != BASE]
    scores = aggregate_frame(performance_frame(inputs.results, trained), inputs.config, SUITE)
    return scores[[*PROBE_KEYS, *PERFORMANCE]]


def _seed_text(seeds: Iterable[int]) -> str:
    return "/".join(f"s{seed}" for seed in sorted(seeds))


def seed_notes(inputs: ReportInputs) -> tuple[str, ...]:
    """Notes for conditions whose probed seeds differ from their training seeds (F.5 seed protocol)."""
    table_closure = closure(inputs.config, inputs.output_id)
    probed: dict[str, set[int]] = {}
    trained: dict[str, set[int]] = {}
    for probe in table_closure.probes:
        if probe.condition != BASE:
            probed.setdefault(probe.condition, set()).add(probe.seed)
    for evaluation in table_closure.evaluations:
        if evaluation.condition != BASE:
            trained.setdefault(evaluation.condition, set()).add(evaluation.seed)
    groups: dict[tuple[str, str], list[str]] = {}
    for condition in inputs.rank("conditions"):
        probe_seeds, train_seeds = probed.get(condition, set()), trained.get(condition, set())
        if probe_seeds and train_seeds and probe_seeds != train_seeds:
            key = (_seed_text(probe_seeds), _seed_text(train_seeds))
            groups.setdefault(key, []).append(inputs.config["conditions"][condition]["label"])
    return tuple(
        f"{', '.join(labels)}: routing columns over probed seeds {probe_text}, "
        f"performance columns over training seeds {train_text} (Appendix F.5)."
        for (probe_text, train_text), labels in groups.items()
    )


def _routing_and_performance(
    inputs: ReportInputs,
    routing: Sequence[str],
    performance: Sequence[str],
    bold: Mapping[str, str] | None = None,
) -> Table:
    """A table whose rows are (model, corpus, condition) cells with retention and performance columns."""
    probes = closure(inputs.config, inputs.output_id).probes
    parts = [
        summarize_seeds(retention_frame(inputs.results, probes), ROW_KEYS, routing),
        summarize_seeds(performance_seeds(inputs), ROW_KEYS, performance),
    ]
    columns = (*routing, *performance)
    rows = assemble(inputs.output_id, table_grid(inputs), parts, columns)
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=TABLE_KEYS,
        columns=columns,
        rows=rows,
        labels={c: COLUMN_LABELS[c] for c in columns},
        bold=dict(bold or {}),
        block="corpus",
        notes=seed_notes(inputs),
        digits={c: ACCURACY_DIGITS.get(c, 3) for c in columns},
    )


def table1(inputs: ReportInputs) -> Table:
    """Table 1: the training conditions by intervention family, rendered from the condition registry."""
    conditions = inputs.config["conditions"]
    listed = inputs.entry["lists_conditions"]
    families = list(dict.fromkeys(conditions[name]["family"] for name in listed))
    ordered = sorted(listed, key=lambda name: families.index(conditions[name]["family"]))
    frame = pd.DataFrame(
        [
            {
                "family": conditions[name]["family"],
                "condition": name,
                **{c: str(conditions[name][c]) for c in CONDITION_TEXT},
            }
            for name in ordered
        ],
        columns=["family", "condition", *CONDITION_TEXT],
    )
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=("family", "condition"),
        columns=CONDITION_TEXT,
        rows=without_seeds(frame, CONDITION_TEXT),
        labels={c: COLUMN_LABELS[c] for c in CONDITION_TEXT},
        block="family",
    )


def table5(inputs: ReportInputs) -> Table:
    """Table 5: shuffled-prior controls, Overall@9 over training seeds and community NMI over probed seeds."""
    return _routing_and_performance(inputs, ("nmi",), ("overall9",))


def table6(inputs: ReportInputs) -> Table:
    """Table 6: the beta operating range of RPB with RPB-hard, community NMI and Overall@9 (single seed)."""
    return _routing_and_performance(inputs, ("nmi",), ("overall9",))


def table15(inputs: ReportInputs) -> Table:
    """Table 15: community NMI, TVD, JSD, top-k overlap and ID/OOD accuracy; bold as in the caption."""
    bold = {"nmi": "max", "topk_overlap": "max", "id": "max", "ood": "max"}
    return _routing_and_performance(inputs, ("nmi", "tvd", "jsd", "topk_overlap"), ("id", "ood"), bold)


def table9(inputs: ReportInputs) -> Table:
    """Table 9: Q and NMI margins over the marginal-preserving null model (B.1), with the Q beat share."""
    columns = ("q_margin", "nmi_margin", "layers_beating_null_q")
    probes = closure(inputs.config, inputs.output_id).probes
    summary = summarize_seeds(null_model_frame(inputs.results, probes), ROW_KEYS, columns)
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=TABLE_KEYS,
        columns=columns,
        rows=assemble(inputs.output_id, table_grid(inputs), [summary], columns),
        labels={c: COLUMN_LABELS[c] for c in columns},
        block="corpus",
        notes=("Margins are observed minus mean over the null graphs, layer means (Appendix B.1).",),
        digits={c: 3 for c in columns},
    )


def rho_column(rho: float) -> str:
    """Column id of community NMI at edge fraction ``rho`` (0.05 -> ``nmi_rho005``)."""
    return f"nmi_rho{round(float(rho) * 100):03d}"


def sweep_robustness(sweep: pd.DataFrame, detector: str, seed: int) -> dict[str, float]:
    """Detector and seed robustness of community NMI over every (checkpoint, rho) cell (Appendix B.2).

    ``other_max_abs_diff``: the largest |NMI(other detector) - NMI(``detector``)| at detector seed
    ``seed`` (NaN without another detector); ``seed_sd_mean`` / ``seed_sd_max``: mean and maximum
    over cells of the sample sd of ``detector``'s NMI across detector seeds.
    """
    cell = [*PROBE_KEYS, "rho"]
    main = sweep[sweep["detector"] == detector]
    at_seed = sweep[sweep["detector_seed"] == seed]
    paired = at_seed[at_seed["detector"] != detector].merge(
        main[main["detector_seed"] == seed], on=cell, suffixes=("", "_main")
    )
    spread = main.groupby(cell)["nmi"].std(ddof=1)
    return {
        "other_max_abs_diff": float((paired["nmi"] - paired["nmi_main"]).abs().max())
        if len(paired)
        else np.nan,
        "seed_sd_mean": float(spread.mean()),
        "seed_sd_max": float(spread.max()),
    }


def table10(inputs: ReportInputs) -> Table:
    """Table 10: community NMI at each edge fraction rho (main detector and seed, F.9), bold max per block."""
    probe = inputs.config["probe"]
    detector, seed = probe["detector"]["name"], probe["detector"]["seed"]
    columns = tuple(rho_column(rho) for rho in probe["edge_fraction_sweep"])
    sweep = sweep_frame(inputs.results, closure(inputs.config, inputs.output_id).probes)
    chosen = sweep[(sweep["detector"] == detector) & (sweep["detector_seed"] == seed)].assign(
        column=lambda f: f["rho"].map(rho_column)
    )
    wide = chosen.pivot_table(index=list(PROBE_KEYS), columns="column", values="nmi", aggfunc="first")
    wide = wide.reindex(columns=list(columns)).reset_index()
    summary = summarize_seeds(wide, ROW_KEYS, columns)
    robust = sweep_robustness(sweep, detector, seed)
    seeds = "/".join(str(s) for s in probe["detector_seeds"])
    notes = [
        f"Detector-seed dispersion (sample sd of {detector} community NMI over seeds {seeds}): "
        f"mean {robust['seed_sd_mean']:.3f}, max {robust['seed_sd_max']:.3f} over all cells."
    ]
    if not np.isnan(robust["other_max_abs_diff"]):
        others = ", ".join(d for d in probe["robustness_detectors"] if d != detector)
        notes.insert(
            0,
            f"{others} against {detector} at matched parameters: largest |difference| "
            f"{robust['other_max_abs_diff']:.3f} over all cells.",
        )
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=TABLE_KEYS,
        columns=columns,
        rows=assemble(inputs.output_id, table_grid(inputs), [summary], columns),
        labels={rho_column(r): f"ρ = {r:.2f}" for r in probe["edge_fraction_sweep"]},
        bold={c: "max" for c in columns},
        block="corpus",
        notes=tuple(notes),
        digits={c: 3 for c in columns},
    )


def span_statistics(profiles: Mapping[str, np.ndarray], fractions: Sequence[float]) -> dict[str, float]:
    """Domain-centroid cosines and the effective-expert-fraction range of one (model, span) (Table 11).

    ``profiles`` maps each domain, in table order, to its (L, E) mean top-k activation frequency
    P_topk; ``cos_{a}_{b}`` is the cosine of the layer-averaged centroids of each domain pair
    (lower = stronger separation). ``fractions`` are the domains' layer-mean effective expert
    fractions (`routing_metrics.metrics.layer_mean_effective_fraction`), whose range over domains the
    table prints as ``eff_frac_min`` - ``eff_frac_max``.
    """
    values = {f"cos_{a}_{b}": centroid_cosine(profiles[a], profiles[b]) for a, b in combinations(profiles, 2)}
    return {**values, "eff_frac_min": float(min(fractions)), "eff_frac_max": float(max(fractions))}


def table11(inputs: ReportInputs) -> Table:
    """Table 11: Q/A span routing structure of the frozen base routers (Appendix C); no seeds."""
    corpora = list(inputs.rank("corpora"))
    models = list(inputs.rank("models"))
    domains = {corpus: inputs.config["corpora"][corpus]["domain"] for corpus in corpora}
    if len(set(domains.values())) != len(domains):
        raise ValueError(f"{inputs.output_id}: corpora {domains} must have distinct domains")
    spans = span_frame(inputs.results, closure(inputs.config, inputs.output_id).probes)
    rows = []
    for model in models:
        for span in ("Q", "A"):
            chosen = spans[(spans["model"] == model) & (spans["span"] == span)].set_index("corpus")
            profiles = {domains[c]: chosen.at[c, "p_topk"] for c in corpora}
            fractions = [chosen.at[c, "effective_expert_fraction"] for c in corpora]
            rows.append({"model": model, "span": span, **span_statistics(profiles, fractions)})
    frame = pd.DataFrame(rows)
    columns = tuple(column for column in frame.columns if column not in ("model", "span"))
    labels = {c: COLUMN_LABELS.get(c, c.removeprefix("cos_").replace("_", "–") + " cos.") for c in columns}
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=("model", "span"),
        columns=columns,
        rows=without_seeds(frame, columns),
        labels=labels,
        notes=(
            "Measured on the frozen base checkpoints: no training seeds are involved.",
            "eff. expert frac.: exp(H_l)/E of each MoE layer's mean top-k activation frequency, "
            f"averaged over layers; min and max over the {', '.join(domains.values())} domains.",
        ),
        digits={c: 3 for c in columns},
    )


def pool_layers(spans: pd.DataFrame) -> np.ndarray:
    """The (L, E) mean top-k activation frequency of a whole probe pool from its span rows.

    Each span row's ``p_topk`` is a token mean, so weighting by ``tokens`` pools the Q and A spans.
    """
    return sum(row.tokens * row.p_topk for row in spans.itertuples()) / spans["tokens"].sum()


def pool_distribution(spans: pd.DataFrame) -> np.ndarray:
    """The layer-averaged expert distribution (E,) of a whole probe pool from its span rows.

    The pool's mean top-k activation frequency (``pool_layers``), layer-averaged and divided by k:
    the distribution over routed experts that Appendix D.2's statistics take.
    """
    layer_mean = pool_layers(spans).mean(axis=0)
    return layer_mean / layer_mean.sum()


def d2_domains(config: Mapping[str, Any], corpora: Sequence[str], output_id: str) -> dict[str, str]:
    """``{"math": corpus, "code": corpus}`` of ``corpora``: D.2's statistics need exactly one of each."""
    domains = {config["corpora"][corpus]["domain"]: corpus for corpus in corpora}
    if sorted(domains) != ["code", "math"] or len(corpora) != 2:
        raise ValueError(f"{output_id}: needs one math and one code corpus, got {list(corpora)}")
    return domains


def d2_statistics(spans: pd.DataFrame, model: str, domains: Mapping[str, str]) -> dict[str, float]:
    """Appendix D.2's statistics of ``model``'s frozen base from its span rows (:func:`span_frame`):
    sharpness ||p - U||_1 per domain, ||p_math - p_code||_1 and the effective expert fractions."""
    pools = {
        domain: spans[(spans["model"] == model) & (spans["corpus"] == corpus)]
        for domain, corpus in domains.items()
    }
    p = {domain: pool_distribution(pool) for domain, pool in pools.items()}
    return {
        "sharpness_math": float(sharpness(p["math"])),
        "sharpness_code": float(sharpness(p["code"])),
        "cross_domain": float(cross_domain_l1(p["math"], p["code"])),
        **{
            f"eff_frac_{domain}": layer_mean_effective_fraction(pool_layers(pool))
            for domain, pool in pools.items()
        },
    }


def appendix_d2(inputs: ReportInputs) -> Table:
    """Appendix D.2: base routing sharpness ||p - U||_1 per domain and ||p_math - p_code||_1; no seeds."""
    domains = d2_domains(inputs.config, list(inputs.rank("corpora")), inputs.output_id)
    spans = span_frame(inputs.results, closure(inputs.config, inputs.output_id).probes)
    rows = [{"model": model, **d2_statistics(spans, model, domains)} for model in inputs.rank("models")]
    columns = ("sharpness_math", "sharpness_code", "cross_domain", "eff_frac_math", "eff_frac_code")
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=("model",),
        columns=columns,
        rows=without_seeds(pd.DataFrame(rows), columns),
        labels={c: COLUMN_LABELS[c] for c in columns},
        notes=(
            "p: the frozen base router's top-k activation frequency over a corpus' whole probe pool "
            "(Q and A spans), averaged over MoE layers and normalised over the routed experts.",
            "eff. expert frac.: Table 11's exp(H_l)/E per MoE layer, averaged over layers (1: uniform; "
            "at least k/E). The paper states it per span in Table 11 only (0.20-0.35 on Moonlight and "
            "Qwen3, whose k/E are 0.094 and 0.063), so D.2 prints no paper value for it.",
        ),
        digits={c: 4 for c in columns},
    )


def table13(inputs: ReportInputs) -> Table:
    """Table 13: prior-side strength of the within-community and global shuffles (Appendix E.1); no seeds."""
    pairs = closure(inputs.config, inputs.output_id).prior_validations
    models = list(inputs.rank("models"))
    corpora = list(inputs.rank("corpora"))
    keys = ["model", "corpus", "prior"]
    order = [(m, c, kind) for m, c in product(models, corpora) if (m, c) in pairs for kind in SHUFFLE_SCOPES]
    frame = prior_frame(inputs.results, pairs).set_index(keys).loc[order, list(PRIOR_SIDE)].reset_index()
    return Table(
        table_id=inputs.output_id,
        title=inputs.title,
        keys=("corpus", "prior"),
        columns=PRIOR_SIDE,
        rows=without_seeds(drop_model(inputs.output_id, frame), PRIOR_SIDE),
        labels={c: COLUMN_LABELS[c] for c in PRIOR_SIDE},
        block="corpus",
        notes=(
            "Measured on the prior tensors before training: no training seeds are involved.",
            "B.2 community NMI: mean (and minimum) over edge fractions x permutation seeds of the "
            "shuffled prior's partition against the unshuffled prior's.",
        ),
        digits={c: 3 for c in PRIOR_SIDE},
    )


TABLES: dict[str, Callable[[ReportInputs], Table]] = {
    "table1": table1,
    "table5": table5,
    "table6": table6,
    "table9": table9,
    "table10": table10,
    "table11": table11,
    "table13": table13,
    "table15": table15,
    "appendix_d2": appendix_d2,
}
