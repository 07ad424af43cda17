"""Tidy frames of the probe and prior results that the routing tables read (§2, Appendix B, C, E, F.10).

Each loader reads the fixed result layout of the probe stage (``metrics.json`` of a probed
checkpoint, ``partition.json`` of a base) and of the priors stage (``stats.json``,
``prior_validation.json``). A missing file, a missing key or a non-numeric value raises
:class:`ResultFileError` naming the file and the key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.layout import PRIOR_STATS, PRIOR_VALIDATION, metrics_path, partition_path, prior_file
from workflow_scripts.registry import BASE, Probe
from workflow_scripts.report.inputs import ResultFiles

PROBE_KEYS = ("model", "corpus", "condition", "seed")
# Column id -> key of ``metrics.json["summary"]`` (F.10 layer means).
RETENTION_KEYS = {
    "nmi": "nmi",
    "modularity": "q",
    "modularity_base": "q_base",
    "delta_q": "delta_q",
    "tvd": "tvd",
    "jsd": "jsd",
    "topk_overlap": "topk_overlap",
    "communities": "communities",
    "sharpness_l1": "sharpness_l1",
}
# Column id -> key of ``metrics.json["null_model"]`` (Appendix B.1).
NULL_MODEL_KEYS = {
    "q_margin": "q_margin",
    "nmi_margin": "nmi_margin",
    "q_beat_share": "q_beat_share",
    "nmi_beat_share": "nmi_beat_share",
    "layers_beating_null_q": "layers_beating_null_q",
}
SWEEP_COLUMNS = ("detector", "rho", "detector_seed", "nmi")
SPAN_NAMES = ("Q", "A")
SHUFFLE_SCOPES = {"shuffled_within": "within", "shuffled_global": "global"}
# Column id -> key of ``prior_validation.json["strength"][scope]`` (Table 13).
STRENGTH_KEYS = {
    "prior_topk_overlap": "prior_topk_overlap",
    "topk_change_rate": "topk_change_rate",
    "abs_delta_bias_p90": "abs_delta_bias_p90",
    "clamp_upper_fraction": "clamp_upper_fraction",
}
PRIOR_COLUMNS = (*STRENGTH_KEYS, "bias_sd", "community_nmi", "community_nmi_min")


class ResultFileError(ValueError):
    """A result file that is missing or lacks a value a table needs; the message names file and key."""


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object stored at ``path``; a missing or unreadable file raises naming it."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ResultFileError(f"{path}: result file is missing") from None
    except (OSError, json.JSONDecodeError) as error:
        raise ResultFileError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(data, dict):
        raise ResultFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def field(data: Mapping[str, Any], keys: tuple[str, ...], path: Path) -> Any:
    """The value at the nested ``keys`` of ``data``; raise naming ``path`` and the dotted key."""
    value: Any = data
    for depth, key in enumerate(keys):
        if not isinstance(value, Mapping) or key not in value:
            raise ResultFileError(f"{path}: missing key {'.'.join(keys[: depth + 1])!r}")
        value = value[key]
    return value


def number(data: Mapping[str, Any], keys: tuple[str, ...], path: Path) -> float:
    """A finite number at the nested ``keys`` of ``data`` (booleans are not numbers)."""
    value = field(data, keys, path)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ResultFileError(f"{path}: key {'.'.join(keys)!r} is {value!r}, not a finite number")
    return float(value)


def _trained(probes: Iterable[Probe]) -> list[Probe]:
    """Trained-checkpoint probes (base probes dropped), in a stable order."""
    chosen = [probe for probe in probes if probe.condition != BASE]
    return sorted(chosen, key=lambda p: (p.model, p.corpus, p.condition, p.seed))


def _summary_frame(
    results: ResultFiles, probes: Iterable[Probe], section: str, keys: Mapping[str, str]
) -> pd.DataFrame:
    """One row per trained probe: its keys and ``metrics.json[section][key]`` under each column id."""
    rows = []
    for probe in _trained(probes):
        path = results.path(metrics_path, probe)
        data = read_json(path)
        row: dict[str, Any] = {name: getattr(probe, name) for name in PROBE_KEYS}
        row.update({column: number(data, (section, key), path) for column, key in keys.items()})
        rows.append(row)
    return pd.DataFrame(rows, columns=[*PROBE_KEYS, *keys])


def retention_frame(results: ResultFiles, probes: Iterable[Probe]) -> pd.DataFrame:
    """Headline retention metrics of the probed trained checkpoints, one row per checkpoint (§2, F.10).

    Columns: ``model``, ``corpus``, ``condition``, ``seed``, then the layer means under the report's ids:
    ``nmi`` (community NMI against the base partition), ``modularity`` and ``modularity_base``
    (Q of the trained and base graphs), ``delta_q``, ``tvd``, ``jsd``, ``topk_overlap``,
    ``communities`` (mean community count) and ``sharpness_l1`` (D.2). Base probes are skipped.
    """
    return _summary_frame(results, probes, "summary", RETENTION_KEYS)


def null_model_frame(results: ResultFiles, probes: Iterable[Probe]) -> pd.DataFrame:
    """Marginal-preserving null-model margins of every probed trained checkpoint (Appendix B.1, Table 9).

    ``q_margin`` and ``nmi_margin`` are the observed minus mean-null layer means,
    ``layers_beating_null_q`` the share of layers whose Q beats every null graph.
    """
    return _summary_frame(results, probes, "null_model", NULL_MODEL_KEYS)


def sweep_frame(results: ResultFiles, probes: Iterable[Probe]) -> pd.DataFrame:
    """Community NMI per (detector, rho, detector seed) of every probed trained checkpoint (Appendix B.2)."""
    rows = []
    for probe in _trained(probes):
        path = results.path(metrics_path, probe)
        sweep = field(read_json(path), ("sweep",), path)
        if not isinstance(sweep, list) or not sweep:
            raise ResultFileError(f"{path}: key 'sweep' must be a non-empty list")
        for index, entry in enumerate(sweep):
            where = ("sweep", str(index))
            if not isinstance(entry, Mapping):
                raise ResultFileError(f"{path}: key {'.'.join(where)!r} is not an object")
            detector = field(entry, ("detector",), path)
            rows.append(
                {
                    **{name: getattr(probe, name) for name in PROBE_KEYS},
                    "detector": str(detector),
                    "rho": number(entry, ("rho",), path),
                    "detector_seed": int(number(entry, ("seed",), path)),
                    "nmi": number(entry, ("nmi",), path),
                }
            )
    return pd.DataFrame(rows, columns=[*PROBE_KEYS, *SWEEP_COLUMNS])


def _p_topk(value: Any, path: Path, key: str) -> np.ndarray:
    """A finite, non-negative (L, E) activation-frequency matrix."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ResultFileError(f"{path}: key {key!r} is not a numeric (L, E) matrix") from None
    if array.ndim != 2 or 0 in array.shape or not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ResultFileError(f"{path}: key {key!r} must be a finite, non-negative (L, E) matrix")
    return array


def span_frame(results: ResultFiles, probes: Iterable[Probe]) -> pd.DataFrame:
    """Base Q/A span profiles of every base probe, one row per (model, corpus, span) (Appendix C, Table 11).

    Columns: ``model``, ``corpus``, ``span`` (Q or A), ``tokens``, ``effective_expert_fraction``
    (exp(H)/E of the layer-mean P_topk) and ``p_topk`` (the (L, E) mean top-k activation
    frequency, an array per row). Both spans must be present.
    """
    pairs = sorted({(p.model, p.corpus) for p in probes if p.condition == BASE})
    rows = []
    for model, corpus in pairs:
        path = results.path(partition_path, model, corpus)
        data = read_json(path)
        for span in SPAN_NAMES:
            keys = ("spans", span)
            rows.append(
                {
                    "model": model,
                    "corpus": corpus,
                    "span": span,
                    "tokens": int(number(data, (*keys, "tokens"), path)),
                    "effective_expert_fraction": number(data, (*keys, "effective_expert_fraction"), path),
                    "p_topk": _p_topk(field(data, (*keys, "p_topk"), path), path, f"spans.{span}.p_topk"),
                }
            )
    columns = ["model", "corpus", "span", "tokens", "effective_expert_fraction", "p_topk"]
    return pd.DataFrame(rows, columns=columns)


def prior_frame(results: ResultFiles, pairs: Iterable[tuple[str, str]]) -> pd.DataFrame:
    """Prior-side strength of both shuffles of every (model, corpus) prior (Appendix E.1, B.2, F.7).

    One row per (model, corpus, prior) with ``prior`` the shuffled prior kind
    (``shuffled_within``, ``shuffled_global``): the Table 13 columns from
    ``prior_validation.json["strength"]``, ``bias_sd`` (per-row sd of the base prior's bias, F.7,
    from ``stats.json``) and ``community_nmi`` / ``community_nmi_min`` (mean and minimum over
    rho x permutation seed of the B.2 community check of that shuffle scope).
    """
    rows = []
    for model, corpus in sorted(set(pairs)):
        validation_path = results.path(prior_file, model, corpus, PRIOR_VALIDATION)
        stats_path = results.path(prior_file, model, corpus, PRIOR_STATS)
        validation, stats = read_json(validation_path), read_json(stats_path)
        bias_sd = number(stats, ("bias_sd",), stats_path)
        for kind, scope in SHUFFLE_SCOPES.items():
            row: dict[str, Any] = {"model": model, "corpus": corpus, "prior": kind}
            for column, key in STRENGTH_KEYS.items():
                row[column] = number(validation, ("strength", scope, key), validation_path)
            row["bias_sd"] = bias_sd
            row["community_nmi"] = number(validation, ("community_check", scope, "mean"), validation_path)
            row["community_nmi_min"] = number(validation, ("community_check", scope, "min"), validation_path)
            rows.append(row)
    return pd.DataFrame(rows, columns=["model", "corpus", "prior", *PRIOR_COLUMNS])
