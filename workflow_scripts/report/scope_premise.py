"""The DeepSeek scope claim's premise (§5.2.3, Appendix D.2): a diffuse, domain-invariant base.

The paper reads DeepSeek-V2-Lite's flat community NMI as the diagnostic behaving as specified
because that model's base routing is close to uniform and nearly domain-invariant: D.2's
||p - U||_1 on math and ||p_math - p_code||_1 well below Moonlight-16B-A3B's (0.1399 against
0.5445, 0.0724 against 0.3735). Where a run's bases do not show that contrast, the claim's NMI
checks are not testable there. The statistics describe frozen base models, with no seeds to
read a spread over, so the premise is a ratio (config ``claim_rules.diffuse_ratio``), not a test.
"""

from __future__ import annotations

from collections.abc import Mapping

from workflow_scripts.report.claim_rules import Premise

DIFFUSE_BASE_ROUTING = "diffuse_base_routing"
#: The appendix_d2 statistics the premise compares: D.2's (i) sharpness on math and (ii) divergence.
STATISTICS = ("sharpness_math", "cross_domain")


def diffuse_premises(model: str) -> tuple[Premise, ...]:
    """The premises that ``model``'s base routing is diffuse, one per statistic of :data:`STATISTICS`."""
    return tuple(Premise(DIFFUSE_BASE_ROUTING, statistic, model, "-") for statistic in STATISTICS)


def failed_diffuse(
    statistics: Mapping[str, Mapping[str, float]], model: str, reference: str, ratio: float
) -> frozenset[Premise]:
    """The premises of :func:`diffuse_premises` (``model``) that fail: a statistic of ``model`` above
    ``ratio`` times ``reference``'s. ``statistics`` maps a model to its appendix_d2 values; with either
    model unmeasured the premise is not measured and withholds nothing."""
    if model not in statistics or reference not in statistics:
        return frozenset()
    return frozenset(
        premise
        for premise in diffuse_premises(model)
        if statistics[model][premise.metric] > ratio * statistics[reference][premise.metric]
    )
