"""What a registry condition adds to the cross-entropy of post-training, for both backends.

An ``Objective`` says which gate override to attach (RPB soft with ``beta``, RPB-hard), which
router terms (the registry's ``router_terms``, computed by ``routing.core.ROUTER_TERM_LOSSES``)
to add with which coefficient, and Router-L2's strength. The local backend combines the terms'
per-layer values here (``data_terms``); the Megatron backend's routers attach the same functions
per layer (``routing.megatron``), so both train on the same loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from workflow_scripts.families import family
from workflow_scripts.registry import BUILT_IN_INTERVENTIONS, RouterTerm
from workflow_scripts.routing import core

#: Hook mode of the interventions that bias the gates during training.
ROUTING_MODES = {"rpb": "soft", "rpb_hard": "hard"}


def disables_router_balancing(intervention: str) -> bool:
    """Whether ``intervention`` switches off load balancing AND the expert-bias update (F.6).

    True for the prior-bias interventions (``rpb``, ``rpb_hard``; the within/global shuffled
    controls use the same interventions), whose prior is the only router-side signal.
    """
    return intervention in ROUTING_MODES


def router_probabilities(architecture: str, logits: Tensor) -> Tensor:
    """Per-token router distribution of ``architecture``'s router (``core.router_probabilities``)."""
    return core.router_probabilities(family(architecture).score_function, logits)


def _combine_layers(term: RouterTerm, values: Sequence[Tensor]) -> Tensor:
    """A term's per-layer values combined as it declares (``RouterTerm.layers``)."""
    stacked = torch.stack(list(values))
    return stacked.sum() if term.layers == "sum" else stacked.mean()


@dataclass(frozen=True)
class Objective:
    """Hook mode, router terms and Router-L2 strength of one training condition.

    Combining layers. Each router term says how its per-layer values combine
    (``RouterTerm.layers``): ``load_balancing`` and ``z_loss`` are SUMMED over the MoE layers,
    each layer's value times the coefficient, as Megatron-Core does: every ``TopKRouter``
    attaches its own ``coeff * loss`` to its activations through ``MoEAuxLossAutoScaler``
    (``router.py``: ``attach_and_log_load_balancing_loss``, ``apply_z_loss``), whose backward
    injects a gradient of 1 (times the micro-batch scale) for each layer, so the layers' losses
    add up; the coefficient is not divided by the number of layers (core 0.16.1, 0.19.0 and
    0.20; the only divisions are by ``mtp_num_layers`` for repeated MTP layers and, for the
    z-loss, by the TP x CP size over which the tokens are split). Megatron's LOGGED
    ``load_balancing_loss`` / ``z_loss`` is the layer mean (``track_moe_metrics``: sum over
    layers / number of MoE layers, without the coefficient); this backend logs the sum that
    enters the loss. ``kl_base`` and ``logit_l2`` (§3.3, paper-specific, no Megatron
    counterpart) are means over MoE layers, like Router-L2's ``mean_l`` of eq. (5).

    * ``load_balancing`` is computed on the router probabilities and their plain top-k, as
      Megatron-Core counts it (no expert bias, no group limit), so the two backends give the
      same loss even where the correction bias changes the selection.
    * ``kl_base`` / ``logit_l2`` read the RAW prior rows of each token's span; tokens without a
      span are left out.
    * ``router_l2`` (lambda): gate weights against an fp32 snapshot of the frozen base, once per
      optimizer step (a parameter-space term, not a router term).

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
    #: ``(term, coefficient)`` of each router term the condition adds.
    terms: tuple[tuple[RouterTerm, float], ...] = ()
    router_l2: float = 0.0
    clip_eps: float = core.DEFAULT_CLIP_EPS
    clip_c: float = core.DEFAULT_CLIP_C
    bias_in_gate_weights: bool = True
    expert_bias_update_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.expert_bias_update_rate < 0:
            raise ValueError(f"expert_bias_update_rate must be >= 0, got {self.expert_bias_update_rate}")
        unknown = [term.name for term, _ in self.terms if term.name not in core.ROUTER_TERM_LOSSES]
        if unknown:
            raise ValueError(
                f"router terms {unknown} have no function in routing.core.ROUTER_TERM_LOSSES "
                f"(known: {sorted(core.ROUTER_TERM_LOSSES)})"
            )
        off = self.routing_mode is not None or disables_router_balancing(self.intervention)
        if off and self.weight("load_balancing"):
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
        """Build from a job's condition (``registry.job_condition``): ``{intervention, params,
        settings}``, and ``term``, the router term's declaration, where the intervention is one.

        ``clip_eps``/``clip_c``/``bias_in_gate_weights`` are the ``prior`` settings of the config;
        ``expert_bias_update_rate`` is ``training.expert_bias_update_rate``, kept for every
        condition except those for which ``disables_router_balancing`` holds (set to 0 there).
        A condition's own ``settings`` override the last two (sensitivity variants: SFT with the
        update frozen, RPB with the bias in selection only).
        """
        intervention = condition.get("intervention")
        term = RouterTerm.from_config(intervention, condition["term"]) if "term" in condition else None
        if term is None and intervention not in BUILT_IN_INTERVENTIONS:
            raise ValueError(
                f"unknown intervention {intervention!r}: neither built-in ({sorted(BUILT_IN_INTERVENTIONS)}) "
                "nor a router term (the condition carries no 'term')"
            )
        if term is not None and intervention in BUILT_IN_INTERVENTIONS:
            raise ValueError(f"intervention {intervention!r} is built in, not a router term")
        settings = condition.get("settings") or {}
        if settings.get("expert_bias_update_rate") and disables_router_balancing(intervention):
            raise ValueError(f"{intervention}: RPB runs freeze the router bias-update rule (Appendix F.6)")
        if "bias_in_gate_weights" in settings and ROUTING_MODES.get(intervention) != "soft":
            raise ValueError(f"settings.bias_in_gate_weights applies to soft RPB only, not {intervention!r}")
        bias_in_gate_weights = settings.get("bias_in_gate_weights", bias_in_gate_weights)
        expert_bias_update_rate = settings.get("expert_bias_update_rate", expert_bias_update_rate)
        params = dict(condition.get("params") or {})
        needed = ("coefficient",) if term is not None else BUILT_IN_INTERVENTIONS[intervention]
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
        elif intervention == "router_l2":
            fields["router_l2"] = float(params["lambda"])
        elif term is not None:
            fields["terms"] = ((term, float(params["coefficient"])),)
        return cls(**fields)

    def weight(self, name: str) -> float:
        """The coefficient of router term ``name`` (0 when the condition does not add it)."""
        return sum((coefficient for term, coefficient in self.terms if term.name == name), 0.0)

    @property
    def needs_prior(self) -> bool:
        """Whether the condition reads a prior (hook rows or a router term's span-level targets)."""
        return self.routing_mode is not None or any(term.prior for term, _ in self.terms)

    def coefficients(self) -> dict[str, float]:
        """``{term name: weight}`` of the terms present (router terms and Router-L2)."""
        weights = {term.name: coefficient for term, coefficient in self.terms if coefficient}
        return weights | ({"router_l2": self.router_l2} if self.router_l2 else {})

    def data_terms(
        self,
        architecture: str,
        logits: Sequence[Tensor],
        indices: Sequence[Tensor],
        token_mask: Tensor,
        span_ids: Tensor,
        prior_rows: Tensor | None,
    ) -> dict[str, Tensor]:
        """Unweighted router terms of one micro-batch, each combined over MoE layers as it declares.

        Args:
            logits, indices: per MoE layer, ``(B*T, E)`` unbiased logits and ``(B*T, k)`` selections.
            token_mask: ``(B*T,)`` true on non-pad tokens.
            span_ids: ``(B, T)`` span per token (-1: none).
            prior_rows: raw prior ``(B, 2, L, E)`` of the batch's rows, or ``None``.
        """
        present = [term for term, coefficient in self.terms if coefficient]
        reads_prior = any(term.prior for term in present)
        if reads_prior and prior_rows is None:
            raise ValueError(
                f"{self.intervention}: its router term reads the prior, but no prior rows were given"
            )
        score_function = family(architecture).score_function
        per_layer: dict[str, list[Tensor]] = {term.name: [] for term in present}
        span_mask = span_ids.reshape(-1) >= 0
        for layer, (z, chosen) in enumerate(zip(logits, indices, strict=True)):
            prior = None
            if reads_prior:
                prior = core.span_bias_per_token(prior_rows[:, :, layer, :], span_ids).reshape(z.shape)
            router = core.RouterLayer(z, chosen.shape[-1], score_function, token_mask, prior, span_mask)
            for term in present:
                per_layer[term.name].append(core.ROUTER_TERM_LOSSES[term.name](router))
        return {term.name: _combine_layers(term, per_layer[term.name]) for term in present}

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
