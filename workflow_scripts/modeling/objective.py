"""What a registry condition adds to the cross-entropy of post-training, for both backends.

An ``Objective`` says which gate override to attach (RPB soft with ``beta``, RPB-hard) and
computes the auxiliary terms from the per-layer UNBIASED router logits. Layers combine as
Megatron-Core combines them, so the local and Megatron backends train on the same loss
(``Objective`` has the details).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from workflow_scripts.families import family
from workflow_scripts.registry import INTERVENTION_PARAMS
from workflow_scripts.routing import core

#: Hook mode of the interventions that bias the gates during training.
ROUTING_MODES = {"rpb": "soft", "rpb_hard": "hard"}
DATA_TERMS = ("load_balancing", "kl_base", "logit_l2", "z_loss")
#: Data terms summed over MoE layers (Megatron attaches them per layer); the others are layer means.
LAYER_SUMMED_TERMS = ("load_balancing", "z_loss")


def disables_router_balancing(intervention: str) -> bool:
    """Whether ``intervention`` switches off load balancing AND the expert-bias update (F.6).

    True for the prior-bias interventions (``rpb``, ``rpb_hard``; the within/global shuffled
    controls use the same interventions), whose prior is the only router-side signal.
    """
    return intervention in ROUTING_MODES


def router_probabilities(architecture: str, logits: Tensor) -> Tensor:
    """Per-token router distribution (fp32): the family's sigmoid scores normalised over the experts
    (deepseek_v3), or its softmax."""
    z = logits.float()
    if family(architecture).score_function == "sigmoid":
        scores = z.sigmoid()
        return scores / scores.sum(dim=-1, keepdim=True)
    return z.softmax(dim=-1)


@dataclass(frozen=True)
class Objective:
    """Hook mode and auxiliary coefficients of one training condition (0 = term absent).

    Combining layers. ``load_balancing`` and ``z_loss`` are SUMMED over the MoE layers, each
    layer's value times the coefficient, as Megatron-Core does: every ``TopKRouter`` attaches
    its own ``coeff * loss`` to its activations through ``MoEAuxLossAutoScaler``
    (``router.py``: ``attach_and_log_load_balancing_loss``, ``apply_z_loss``), whose backward
    injects a gradient of 1 (times the micro-batch scale) for each layer, so the layers' losses
    add up; the coefficient is not divided by the number of layers (core 0.16.1, 0.19.0 and
    0.20; the only divisions are by ``mtp_num_layers`` for repeated MTP layers and, for the
    z-loss, by the TP x CP size over which the tokens are split). Megatron's LOGGED
    ``load_balancing_loss`` / ``z_loss`` is the layer mean (``track_moe_metrics``: sum over
    layers / number of MoE layers, without the coefficient); this backend logs the sum that
    enters the loss. ``kl_base`` and ``logit_l2`` (§3.3, paper-specific, no Megatron
    counterpart) are means over MoE layers, like Router-L2's ``mean_l`` of eq. (5).

    * ``load_balancing`` (coefficient): ``routing.core.load_balancing_loss`` on the router
      probabilities (softmax of the logits; for the sigmoid router of deepseek_v3 the sigmoid
      scores normalised over experts) and their plain top-k, as Megatron-Core counts it
      (``compute_routing_scores_for_aux_loss``: no expert bias, no group limit), so the two
      backends give the same loss even where the correction bias changes the selection.
    * ``kl_base`` / ``logit_l2`` (coefficient): against the RAW prior rows of each token's
      span; tokens without a span are left out.
    * ``z_loss`` (coefficient).
    * ``router_l2`` (lambda): gate weights against an fp32 snapshot of the frozen base.

    Correction bias. Routers with an expert (correction) bias, the deepseek_v3 gate's
    ``e_score_correction_bias`` (Moonlight), keep the auxiliary-loss-free bias-update rule
    during post-training, as Megatron-Bridge's Moonlight provider does
    (``moe_router_enable_expert_bias=True``, ``moe_router_bias_update_rate=1e-3``):
    ``expert_bias_update_rate`` is the rate (``training.expert_bias_update_rate``), applied once
    per optimizer step by the loop (``routing.core.expert_bias_update``). transformers has no
    such rule, so without the loop the bias would stay frozen.

    RPB and RPB-hard (and the shuffled-prior controls built on them) disable both the
    load-balancing term and the bias-update rule (Appendix F.6: the prior is the only
    router-side signal): ``disables_router_balancing`` is that one rule; ``from_condition``
    zeroes the update rate for them and constructing an RPB objective with either raises.
    """

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
    expert_bias_update_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.expert_bias_update_rate < 0:
            raise ValueError(f"expert_bias_update_rate must be >= 0, got {self.expert_bias_update_rate}")
        off = self.routing_mode is not None or disables_router_balancing(self.intervention)
        if off and self.load_balancing:
            raise ValueError(f"{self.intervention}: RPB runs carry no load-balancing term (Appendix F.6)")
        if off and self.expert_bias_update_rate:
            raise ValueError(
                f"{self.intervention}: RPB runs freeze the router bias-update rule (Appendix F.6)"
            )

    @classmethod
    def from_condition(
        cls,
        condition: Mapping[str, Any],
        clip_eps: float = core.DEFAULT_CLIP_EPS,
        clip_c: float = core.DEFAULT_CLIP_C,
        bias_in_gate_weights: bool = True,
        expert_bias_update_rate: float = 0.0,
    ) -> Objective:
        """Build from a registry condition ``{intervention, params: {beta|coefficient|lambda}}``.

        ``clip_eps``/``clip_c``/``bias_in_gate_weights`` are the ``prior`` settings of the config;
        ``expert_bias_update_rate`` is ``training.expert_bias_update_rate``, kept for every
        condition except those for which ``disables_router_balancing`` holds (set to 0 there).
        A condition's own ``settings`` override the last two (sensitivity variants: SFT with the
        update frozen, RPB with the bias in selection only).
        """
        intervention = condition.get("intervention")
        if intervention not in INTERVENTION_PARAMS:
            raise ValueError(f"unknown intervention {intervention!r}; known: {sorted(INTERVENTION_PARAMS)}")
        settings = condition.get("settings") or {}
        if settings.get("expert_bias_update_rate") and disables_router_balancing(intervention):
            raise ValueError(f"{intervention}: RPB runs freeze the router bias-update rule (Appendix F.6)")
        if "bias_in_gate_weights" in settings and ROUTING_MODES.get(intervention) != "soft":
            raise ValueError(f"settings.bias_in_gate_weights applies to soft RPB only, not {intervention!r}")
        bias_in_gate_weights = settings.get("bias_in_gate_weights", bias_in_gate_weights)
        expert_bias_update_rate = settings.get("expert_bias_update_rate", expert_bias_update_rate)
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
            "expert_bias_update_rate": (
                0.0 if disables_router_balancing(intervention) else float(expert_bias_update_rate)
            ),
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
        """Unweighted data-dependent terms of one micro-batch, combined over MoE layers.

        ``load_balancing`` and ``z_loss`` are sums over the MoE layers (Megatron-Core attaches
        one loss per layer, see ``Objective``); ``kl_base`` and ``logit_l2`` are means.

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
                counted = probs.topk(chosen.shape[-1], dim=-1).indices  # Megatron's unbiased top-k
                per_layer["load_balancing"].append(
                    core.load_balancing_loss(probs, counted, z.shape[-1], chosen.shape[-1], token_mask)
                )
            if "kl_base" in per_layer or "logit_l2" in per_layer:
                if prior_rows is None:
                    raise ValueError(f"{self.intervention}: kl_base / logit_l2 need prior rows")
                rows = core.span_bias_per_token(prior_rows[:, :, layer, :], span_ids).reshape(z.shape)
                if "kl_base" in per_layer:
                    per_layer["kl_base"].append(core.kl_to_base(rows, z, span_mask))
                if "logit_l2" in per_layer:
                    per_layer["logit_l2"].append(core.centered_logit_l2(z, rows, span_mask))
            if "z_loss" in per_layer:
                per_layer["z_loss"].append(core.z_loss(z, token_mask))
        return {
            name: torch.stack(values).sum() if name in LAYER_SUMMED_TERMS else torch.stack(values).mean()
            for name, values in per_layer.items()
        }

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
