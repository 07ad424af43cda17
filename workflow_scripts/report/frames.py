"""Evaluation summaries as tidy frames, and their suite aggregates per run (Appendix F.4/F.5).

Every table reads ``results/evals/.../summary.json`` through
:func:`performance_frame` (avg@5 per benchmark) or :func:`repeat_frame` (the
five repeat scores), and aggregates through :func:`aggregate_frame`, which
calls :func:`workflow_scripts.score_aggregates.aggregate` once per run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from workflow_scripts.layout import summary_path
from workflow_scripts.registry import Evaluation
from workflow_scripts.report.inputs import ResultFiles
from workflow_scripts.score_aggregates import SUITE_COLUMNS, aggregate

RUN_KEYS = ("model", "corpus", "condition", "seed")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def read_summary(results: ResultFiles, evaluation: Evaluation) -> dict[str, Any]:
    """One summary.json, checked against the evaluation it should describe; errors name path and key."""
    path = results.path(summary_path, evaluation)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no evaluation summary for {evaluation}")
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: expected a JSON object")
    for key in ("model", "corpus", "condition", "seed", "repeats", "benchmarks"):
        if key not in summary:
            raise ValueError(f"{path}: missing key {key!r}")
    for key in ("model", "corpus", "condition", "seed"):
        if summary[key] != getattr(evaluation, key):
            raise ValueError(
                f"{path}: key {key!r} is {summary[key]!r}, expected {getattr(evaluation, key)!r}"
            )
    repeats = summary["repeats"]
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"{path}: key 'repeats' must be a positive integer, got {repeats!r}")
    benchmarks = summary["benchmarks"]
    if not isinstance(benchmarks, dict) or not benchmarks:
        raise ValueError(f"{path}: key 'benchmarks' must be a non-empty object")
    for name, entry in benchmarks.items():
        where = f"{path}: benchmarks.{name}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected an object")
        for key in ("score", "repeat_scores", "repeat_sd"):
            if key not in entry:
                raise ValueError(f"{where}: missing key {key!r}")
        _number(entry["score"], f"{where}.score")
        if entry["repeat_sd"] is not None:
            _number(entry["repeat_sd"], f"{where}.repeat_sd")
        scores = entry["repeat_scores"]
        if not isinstance(scores, list) or len(scores) != repeats:
            raise ValueError(f"{where}.repeat_scores: expected a list of {repeats} scores, got {scores!r}")
        for index, score in enumerate(scores):
            _number(score, f"{where}.repeat_scores[{index}]")
    return summary


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    frame["seed"] = frame["seed"].astype("Int64")
    return frame


def _run(evaluation: Evaluation) -> dict[str, Any]:
    return {key: getattr(evaluation, key) for key in RUN_KEYS}


def performance_frame(results: ResultFiles, evaluations: Iterable[Evaluation]) -> pd.DataFrame:
    """avg@5 per (run, benchmark): columns model, corpus, condition, seed, benchmark, score, repeat_sd."""
    rows = []
    for evaluation in sorted(evaluations, key=lambda e: tuple(str(v) for v in _run(e).values())):
        summary = read_summary(results, evaluation)
        for name, entry in summary["benchmarks"].items():
            sd = entry["repeat_sd"]
            rows.append(
                {
                    **_run(evaluation),
                    "benchmark": name,
                    "score": float(entry["score"]),
                    "repeat_sd": math.nan if sd is None else float(sd),
                }
            )
    columns = [*RUN_KEYS, "benchmark", "score", "repeat_sd"]
    return _typed(pd.DataFrame(rows, columns=columns))


def repeat_frame(results: ResultFiles, evaluations: Iterable[Evaluation]) -> pd.DataFrame:
    """Every repeat score: columns model, corpus, condition, seed, repeat, benchmark, score.

    For spreads over the evaluation repeats (F.5: the base row, single-seed tables).
    """
    rows = []
    for evaluation in sorted(evaluations, key=lambda e: tuple(str(v) for v in _run(e).values())):
        summary = read_summary(results, evaluation)
        for name, entry in summary["benchmarks"].items():
            for repeat, score in enumerate(entry["repeat_scores"]):
                rows.append({**_run(evaluation), "repeat": repeat, "benchmark": name, "score": float(score)})
    return _typed(pd.DataFrame(rows, columns=[*RUN_KEYS, "repeat", "benchmark", "score"]))


def _domain(config: Mapping[str, Any], corpus: str | None) -> str | None:
    return None if corpus is None else config["corpora"][corpus]["domain"]


def aggregate_frame(performance: pd.DataFrame, config: Mapping[str, Any], suite: str) -> pd.DataFrame:
    """Suite mean, ID and OOD per run (per repeat too when ``performance`` has a ``repeat`` column).

    ``performance`` is a :func:`performance_frame` or :func:`repeat_frame`;
    the result has the run keys then ``SUITE_COLUMNS[suite]``, ``id`` and
    ``ood`` (NaN for a run without a corpus, the base model).
    """
    keys = [*RUN_KEYS, "repeat"] if "repeat" in performance.columns else list(RUN_KEYS)
    rows = []
    for values, group in performance.groupby(keys, sort=False, dropna=False):
        # groupby hands missing keys back as NaN/NA; a run without a corpus or seed keeps None.
        run = {key: None if pd.isna(value) else value for key, value in zip(keys, values, strict=True)}
        duplicated = group["benchmark"][group["benchmark"].duplicated()].tolist()
        if duplicated:
            raise ValueError(f"run {run}: benchmarks {duplicated} appear more than once")
        scores = dict(zip(group["benchmark"], group["score"], strict=True))
        try:
            aggregates = aggregate(scores, config["benchmarks"], _domain(config, run["corpus"]), suite)
        except ValueError as error:
            raise ValueError(f"run {run}: {error}") from None
        rows.append({**run, "id": math.nan, "ood": math.nan, **aggregates})
    columns = [*keys, SUITE_COLUMNS[suite], "id", "ood"]
    return _typed(pd.DataFrame(rows, columns=columns))
