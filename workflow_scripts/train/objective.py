"""What a registry condition adds to the cross-entropy of post-training.

An ``Objective`` says which gate override to attach (RPB: soft with ``beta``; RPB-hard:
hard; the shuffled-prior controls are the same interventions with another prior file)
and computes the auxiliary terms from the per-layer UNBIASED router logits the recorder
of ``workflow_scripts.routing.hf`` keeps; data terms are means over MoE layers:

* ``load_balancing`` (coefficient): ``routing.core.load_balancing_loss`` on the router
  probabilities (softmax of the logits; for the sigmoid router of deepseek_v3 the sigmoid
  scores normalised over experts, as Megatron does) and the experts actually selected.
* ``kl_base`` / ``logit_l2`` (coefficient): against the RAW prior rows of each token's
  span; tokens without a span are left out.
* ``z_loss`` (coefficient).
* ``router_l2`` (lambda): gate weights against an fp32 snapshot of the frozen base.

RPB and RPB-hard never carry a load-balancing term (Appendix F.6: the prior is the only
router-side signal); constructing one that does raises. The deepseek_v3 correction bias
``e_score_correction_bias`` is a buffer and transformers has no bias-update rule, so it
stays frozen by default; the loop checks it is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from workflow_scripts.registry import INTERVENTION_PARAMS
from workflow_scripts.routing import core

#: Hook mode of the interventions that bias the gates during training.
ROUTING_MODES = {"rpb": "soft", "rpb_hard": "hard"}
DATA_TERMS = ("load_balancing", "kl_base", "logit_l2", "z_loss")


def router_probabilities(architecture: str, logits: Tensor) -> Tensor:
    """Per-token router distribution (fp32): normalised sigmoid for deepseek_v3, softmax otherwise."""
    z = logits.float()
    if architecture == "deepseek_v3":
        scores = z.sigmoid()
        return scores / scores.sum(dim=-1, keepdim=True)
    return z.softmax(dim=-1)


@dataclass(frozen=True)
class Objective:
    """Hook mode and auxiliary coefficients of one training condition (0 = term absent)."""

    intervention: str = "none"
    routing_mode: str | None = None
    beta: float = 0.0
    load_balancing: float = 0.0
    router_l2: float = 0.0
    kl_base: float = 0.0
    logit_l2: float = 0.0
    z_loss: float = 0.0
    clip_eps: float = core.DEFAULT_CLIP_EPS
    clip_c: float = core.DEFAULT_CLIP_C
    bias_in_gate_weights: bool = True

    def __post_init__(self) -> None:
        if self.routing_mode is not None and self.load_balancing:
            raise ValueError(f"{self.intervention}: RPB runs carry no load-balancing term (Appendix F.6)")

    @classmethod
    def from_condition(
        cls,
        condition: Mapping[str, Any],
        clip_eps: float = core.DEFAULT_CLIP_EPS,
        clip_c: float = core.DEFAULT_CLIP_C,
        bias_in_gate_weights: bool = True,
    ) -> Objective:
        """Build from a registry condition ``{intervention, params: {beta|coefficient|lambda}}``.

        ``clip_eps``/``clip_c``/``bias_in_gate_weights`` are the ``prior`` settings of the config.
        """
        intervention = condition.get("intervention")
        if intervention not in INTERVENTION_PARAMS:
            raise ValueError(f"unknown intervention {intervention!r}; known: {sorted(INTERVENTION_PARAMS)}")
        params = dict(condition.get("params") or {})
        needed = INTERVENTION_PARAMS[intervention]
        if set(params) != set(needed):
            raise ValueError(
                f"intervention {intervention!r} takes params {list(needed)}, got {sorted(params)}"
            )
        fields: dict[str, Any] = {
            "intervention": intervention,
            "clip_eps": clip_eps,
            "clip_c": clip_c,
            "bias_in_gate_weights": bias_in_gate_weights,
        }
        if intervention in ROUTING_MODES:
            fields["routing_mode"] = ROUTING_MODES[intervention]
            fields["beta"] = float(params.get("beta", 0.0))
        elif intervention != "none":  # the field named like the intervention holds its weight
            fields[intervention] = float(params[needed[0]])
        return cls(**fields)

    @property
    def needs_prior(self) -> bool:
        """Whether the condition reads a prior (hook rows or span-level targets)."""
        return self.routing_mode is not None or bool(self.kl_base or self.logit_l2)

    def coefficients(self) -> dict[str, float]:
        """``{term name: weight}`` of the terms present."""
        names = (*DATA_TERMS, "router_l2")
        return {name: getattr(self, name) for name in names if getattr(self, name)}

    def data_terms(
        self,
        architecture: str,
        logits: Sequence[Tensor],
        indices: Sequence[Tensor],
        token_mask: Tensor,
        span_ids: Tensor,
        prior_rows: Tensor | None,
    ) -> dict[str, Tensor]:
        """Unweighted data-dependent terms of one micro-batch, each a mean over MoE layers.

        Args:
            logits, indices: per MoE layer, ``(B*T, E)`` unbiased logits and ``(B*T, k)`` selections.
            token_mask: ``(B*T,)`` true on non-pad tokens.
            span_ids: ``(B, T)`` span per token (-1: none).
            prior_rows: raw prior ``(B, 2, L, E)`` of the batch's rows, or ``None``.
        """
        per_layer: dict[str, list[Tensor]] = {name: [] for name in DATA_TERMS if getattr(self, name)}
        span_mask = span_ids.reshape(-1) >= 0
        for layer, (z, chosen) in enumerate(zip(logits, indices, strict=True)):
            if "load_balancing" in per_layer:
                probs = router_probabilities(architecture, z)
                per_layer["load_balancing"].append(
                    core.load_balancing_loss(probs, chosen, z.shape[-1], chosen.shape[-1], token_mask)
                )
            if "kl_base" in per_layer or "logit_l2" in per_layer:
                if prior_rows is None:
                    raise ValueError(f"{self.intervention}: kl_base / logit_l2 need prior rows")
                rows = core.span_bias_per_token(prior_rows[:, :, layer, :], span_ids).reshape(z.shape)
                if "kl_base" in per_layer:
                    per_layer["kl_base"].append(core.kl_to_base(rows, z, span_mask))
                if "logit_l2" in per_layer:
                    per_layer["logit_l2"].append(
                        core.centered_logit_l2(z, rows, span_mask, self.clip_eps, self.clip_c)
                    )
            if "z_loss" in per_layer:
                per_layer["z_loss"].append(core.z_loss(z, token_mask))
        return {name: torch.stack(values).mean() for name, values in per_layer.items()}

    def parameter_terms(
        self, gate_weights: Sequence[Tensor], base_weights: Sequence[Tensor]
    ) -> dict[str, Tensor]:
        """Unweighted parameter-space terms (Router-L2), once per optimizer step."""
        if not self.router_l2:
            return {}
        return {"router_l2": core.router_l2(gate_weights, base_weights)}


def routing_statistics(
    architecture: str, logits: Sequence[Tensor], indices: Sequence[Tensor], token_mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Sums to monitor routing: per layer, sum of max probability ``(L,)``, token count, load ``(L, E)``."""
    with torch.no_grad():
        max_prob = torch.stack(
            [router_probabilities(architecture, z).max(dim=-1).values[token_mask].sum() for z in logits]
        )
        loads = torch.stack(
            [
                torch.bincount(k[token_mask].reshape(-1), minlength=z.shape[-1]).float()
                for z, k in zip(logits, indices, strict=True)
            ]
        )
    return max_prob, token_mask.sum().float(), loads
