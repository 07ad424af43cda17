"""Benchmark scores to the paper's aggregates: avg@5, Overall@9 / twelve-benchmark mean, ID and OOD.

One code path for every aggregate the report prints (Appendix F.4/F.5): the
suite mean, and its in-domain / out-of-domain split, where a benchmark is in
domain when its ``family`` equals the training corpus' ``domain``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# Suite id -> the column its mean is reported under (the reference CSVs' aggregate column ids).
SUITE_COLUMNS: dict[str, str] = {"overall9": "overall9", "all12": "avg12"}


def avg_at_k(repeat_scores: Sequence[float]) -> float:
    """Mean of the per-repeat scores: the avg@k seed score of Appendix F.3/F.5 (k = 5 in the paper)."""
    values = [float(score) for score in repeat_scores]
    if not values:
        raise ValueError("avg_at_k: no repeat scores")
    bad = [value for value in values if not math.isfinite(value)]
    if bad:
        raise ValueError(f"avg_at_k: non-finite repeat scores {bad}")
    return math.fsum(values) / len(values)


def suite_members(benchmarks: Mapping[str, Mapping[str, Any]], suite: str) -> list[str]:
    """Benchmark ids of ``suite`` in registry order: ``overall9`` (the nine of F.4) or ``all12``."""
    if suite not in SUITE_COLUMNS:
        raise ValueError(f"unknown suite {suite!r} (known: {', '.join(SUITE_COLUMNS)})")
    if suite == "all12":
        return list(benchmarks)
    return [name for name, spec in benchmarks.items() if spec["overall9"]]


def _mean(scores: Mapping[str, float], names: Sequence[str]) -> float:
    return math.fsum(scores[name] for name in names) / len(names)


def aggregate(
    scores: Mapping[str, float],
    benchmarks: Mapping[str, Mapping[str, Any]],
    domain: str | None,
    suite: str,
) -> dict[str, float]:
    """Suite mean, and for a trained row its ID and OOD means over the suite (Appendix F.4).

    ``scores`` maps benchmark id to its avg@5 percent; ``benchmarks`` is
    ``config["benchmarks"]``; ``domain`` the training corpus' domain (``math``
    or ``code``), None for a row without one (the base model), which then gets
    no ID/OOD. Returns ``{SUITE_COLUMNS[suite]: mean, "id": ..., "ood": ...}``.
    Benchmarks of ``scores`` outside the suite are ignored; a suite member
    missing from ``scores`` raises naming it.
    """
    members = suite_members(benchmarks, suite)
    unknown = sorted(set(scores) - set(benchmarks))
    if unknown:
        raise ValueError(f"scores name unknown benchmarks {unknown}")
    missing = [name for name in members if name not in scores]
    if missing:
        raise ValueError(f"suite {suite!r} needs scores for {missing}")
    bad = [name for name in members if not math.isfinite(scores[name])]
    if bad:
        raise ValueError(f"non-finite scores for {bad}")
    result = {SUITE_COLUMNS[suite]: _mean(scores, members)}
    if domain is None:
        return result
    in_domain = [name for name in members if benchmarks[name]["family"] == domain]
    out_domain = [name for name in members if benchmarks[name]["family"] != domain]
    if not in_domain:
        raise ValueError(
            f"suite {suite!r} has no benchmark of family {domain!r} (the in-domain set is empty)"
        )
    result["id"] = _mean(scores, in_domain)
    result["ood"] = _mean(scores, out_domain)
    return result
