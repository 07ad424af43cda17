"""The objective of a training run as both backends build it: its condition and its prior's meta.

Shared by the local run (``train run``) and the Megatron entry (``train megatron``), which the
local command's module starts: kept apart so that neither imports the other.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.errors import UserInputError


def expert_bias_update_rate(training: Mapping[str, Any]) -> float:
    """``training.expert_bias_update_rate`` (Megatron's ``moe_router_bias_update_rate``)."""
    rate = training["expert_bias_update_rate"]
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate >= 0:
        raise UserInputError(f"training.expert_bias_update_rate must be a number >= 0, got {rate!r}")
    return float(rate)


def objective_for(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The condition's ``Objective`` (both backends) and the prior's meta.json (``{}`` without a prior)."""
    from workflow_scripts.modeling.objective import Objective
    from workflow_scripts.routing.core import DEFAULT_CLIP_C, DEFAULT_CLIP_EPS

    if (args.prior is None) != (args.prior_meta is None):
        raise UserInputError("--prior and --prior-meta go together")
    meta = json.loads(Path(args.prior_meta).read_text()) if args.prior_meta else {}
    try:
        objective = Objective.from_condition(
            args.condition,
            float(meta.get("clip_eps", DEFAULT_CLIP_EPS)),
            float(meta.get("clip_c", DEFAULT_CLIP_C)),
            args.bias_in_gate_weights == "true",
            expert_bias_update_rate(args.training),
        )
    except ValueError as error:
        raise UserInputError(f"--condition: {error}") from error
    if objective.needs_prior != (args.prior is not None):
        need = "needs" if objective.needs_prior else "reads no"
        raise UserInputError(
            f"intervention {objective.intervention!r} {need} prior (--prior given: {args.prior})"
        )
    return objective, meta
