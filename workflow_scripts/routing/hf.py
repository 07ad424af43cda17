"""Router Prior Bias inside transformers MoE models: a per-instance override of every MoE gate.

The transformers backend of the router interventions of §3.1 (soft RPB, eq. (4), and the
RPB-hard top-k override) and the recorder that feeds the router-side losses (§3.3) and the
baselines. The math lives in ``workflow_scripts.routing.core``; this module only knows where
the gates of a transformers model are and what each gate class returns (``_GateOps``). The
recorded ``router_logits`` are always the UNBIASED logits ``z``, so every loss sees the router,
not the prior. ``attach`` shows the usage and the layer and token order.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workflow_scripts.families import FAMILIES
from workflow_scripts.routing.core import (
    DEFAULT_CLIP_C,
    DEFAULT_CLIP_EPS,
    clipped_log_prior,
    hard_topk_from_prior,
    prior_to_bias,
    soft_bias_logits,
    span_bias_per_token,
)

__all__ = [
    "MODES",
    "RouterRecorder",
    "RoutingContext",
    "RoutingHandle",
    "attach",
    "detach",
    "find_gates",
    "gate_architecture",
]

MODES = ("soft", "hard")

# Marks the functions this module installs as ``gate.forward``, so that attach can refuse a
# second override and detach removes only its own.
_OVERRIDE_MARK = "_rpb_routing_override"
_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _router_classes() -> dict[str, type[nn.Module]]:
    """The supported gate classes by architecture tag (``families``; imported on first use)."""
    return {name: family.router_class() for name, family in FAMILIES.items()}


def gate_architecture(gate: nn.Module) -> str:
    """The architecture tag of a supported gate (``deepseek_v3``, ``deepseek_v2``, ``qwen3_moe``).

    Raises:
        TypeError: ``gate`` is not an instance of a supported router class.
    """
    for arch, cls in _router_classes().items():
        if isinstance(gate, cls):
            return arch
    supported = ", ".join(cls.__name__ for cls in _router_classes().values())
    raise TypeError(f"{type(gate).__name__} is not a supported MoE gate (supported: {supported})")


def find_gates(model: nn.Module) -> list[tuple[int, nn.Module]]:
    """The MoE gate of every MoE layer of ``model``, in layer order.

    Gates are recognised by ``isinstance`` on the supported router classes; the layer index
    is the decoder-layer index parsed from the module path (``...layers.<i>.mlp.gate``).
    Dense layers (``first_k_dense_replace``, ``mlp_only_layers``) have no gate and are
    skipped, so the list position of a gate is its index on the prior's ``L`` axis.

    Args:
        model: a transformers causal LM or base model (any wrapper that keeps the
            ``layers.<i>`` module paths).

    Returns:
        ``[(layer_index, gate), ...]`` sorted by ``layer_index``.

    Raises:
        TypeError: no supported gate in ``model`` (unsupported architecture or a dense
            model), or gates of several router classes in one model.
        ValueError: a gate whose path has no ``layers.<i>`` component, or two gates in
            one layer.
    """
    classes = tuple(_router_classes().values())
    found: list[tuple[int, nn.Module]] = []
    for name, module in model.named_modules():
        if not isinstance(module, classes):
            continue
        match = _LAYER_INDEX.search(f".{name}")
        if match is None:
            raise ValueError(f"MoE gate {name!r} is not inside a 'layers.<i>' module list")
        found.append((int(match.group(1)), module))
    if not found:
        supported = ", ".join(cls.__name__ for cls in classes)
        raise TypeError(
            f"{type(model).__name__} has no supported MoE gate; the transformers routing backend "
            f"supports gates of class {supported}"
        )
    found.sort(key=lambda item: item[0])
    layers = [layer for layer, _ in found]
    if len(set(layers)) != len(layers):
        raise ValueError(f"more than one MoE gate in one decoder layer: layers {layers}")
    archs = {gate_architecture(gate) for _, gate in found}
    if len(archs) != 1:
        raise TypeError(f"gates of several router classes in one model: {sorted(archs)}")
    return found


@dataclass
class RouterRecorder:
    """Per-layer router outputs of the last forward pass, keyed by MoE-layer position.

    ``logits[l]`` are the UNBIASED router logits ``z`` of MoE layer ``l`` (list position of
    ``find_gates``), shape ``(B*T, E)``, attached to the autograd graph; ``indices[l]`` are
    the experts the gate actually selected (after any prior), ``(B*T, k)``. A later call of
    the same gate (e.g. activation-checkpoint recomputation) overwrites its entry.
    """

    logits: dict[int, Tensor] = field(default_factory=dict)
    indices: dict[int, Tensor] = field(default_factory=dict)

    def record(self, layer: int, router_logits: Tensor, topk_indices: Tensor) -> None:
        """Store one gate call's logits and selected experts."""
        self.logits[layer] = router_logits
        self.indices[layer] = topk_indices

    def clear(self) -> None:
        """Forget everything recorded (call once per micro-batch, before the forward)."""
        self.logits.clear()
        self.indices.clear()

    def layer_logits(self) -> list[Tensor]:
        """The recorded logits in MoE-layer order; raises if a layer is missing."""
        return [self.logits[layer] for layer in self._layers()]

    def layer_indices(self) -> list[Tensor]:
        """The recorded top-k indices in MoE-layer order; raises if a layer is missing."""
        return [self.indices[layer] for layer in self._layers()]

    def _layers(self) -> list[int]:
        layers = sorted(self.logits)
        if layers != list(range(len(layers))):
            raise RuntimeError(f"router logits recorded for MoE layers {layers}, not a full 0..L-1 range")
        return layers


@dataclass
class RoutingContext:
    """What the overridden gates apply in the current micro-batch.

    Attributes:
        mode: ``"soft"`` (eq. (4): ``z' = z + beta * b`` for span tokens, selection from
            ``z'``) or ``"hard"`` (RPB-hard: span tokens take the top-k of ``bias_rows``;
            ``beta`` is ignored).
        beta: bias strength of the soft mode; a Python ``0`` (or ``0.0``) leaves every gate
            bit-identical to the stock one.
        bias_in_gate_weights: soft mode only; the gate weights come from ``z'`` when true
            (eq. (4) read literally), from the unmodified ``z`` when false.
        bias_rows: ``(B, 2, L, E)`` rows of the current batch's samples (span 0 = Q,
            span 1 = A). Soft mode: the zero-mean bias ``b`` (``prior_to_bias``). Hard mode:
            the top-k selection scores, the clipped log prior ``log c``
            (``clipped_log_prior``; ``b`` selects the same experts). ``None``: no prior, every
            gate routes as the stock gate (and still records).
        span_ids: ``(B, T)`` integer span per token: 0 = Q, 1 = A, negative = no span (no
            bias, stock routing). Required whenever ``bias_rows`` is set.
        recorder: where the gates store their unbiased logits; ``None`` records nothing.
    """

    mode: str = "soft"
    beta: float | Tensor = 0.0
    bias_in_gate_weights: bool = True
    bias_rows: Tensor | None = None
    span_ids: Tensor | None = None
    recorder: RouterRecorder | None = field(default_factory=RouterRecorder)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        self._check_batch(self.bias_rows, self.span_ids)

    @classmethod
    def from_prior(
        cls,
        prior: Tensor,
        span_ids: Tensor,
        mode: str = "soft",
        beta: float | Tensor = 0.0,
        bias_in_gate_weights: bool = True,
        clip_eps: float = DEFAULT_CLIP_EPS,
        clip_c: float = DEFAULT_CLIP_C,
        recorder: RouterRecorder | None = None,
    ) -> RoutingContext:
        """A context whose rows are derived from a ``(B, 2, L, E)`` prior slice for ``mode``."""
        context = cls(
            mode=mode,
            beta=beta,
            bias_in_gate_weights=bias_in_gate_weights,
            recorder=recorder if recorder is not None else RouterRecorder(),
        )
        context.set_prior(prior, span_ids, clip_eps, clip_c)
        return context

    def set_batch(self, bias_rows: Tensor | None, span_ids: Tensor | None) -> None:
        """Install a micro-batch's rows ``(B, 2, L, E)`` and span ids ``(B, T)``; clear the recorder."""
        self._check_batch(bias_rows, span_ids)
        self.bias_rows = bias_rows
        self.span_ids = span_ids
        if self.recorder is not None:
            self.recorder.clear()

    def set_prior(
        self,
        prior: Tensor,
        span_ids: Tensor,
        clip_eps: float = DEFAULT_CLIP_EPS,
        clip_c: float = DEFAULT_CLIP_C,
    ) -> None:
        """``set_batch`` from prior rows ``pi`` ``(B, 2, L, E)``: ``b`` (soft) or ``log c`` (hard)."""
        if self.mode == "soft":
            rows = prior_to_bias(prior, clip_eps, clip_c)
        else:
            rows = clipped_log_prior(prior, clip_eps, clip_c)
        self.set_batch(rows, span_ids)

    @property
    def active(self) -> bool:
        """Whether the gates change anything this batch (else they route exactly as stock)."""
        if self.bias_rows is None:
            return False
        if self.mode == "soft" and isinstance(self.beta, int | float) and self.beta == 0:
            return False
        return True

    @staticmethod
    def _check_batch(bias_rows: Tensor | None, span_ids: Tensor | None) -> None:
        if bias_rows is None:
            return
        if bias_rows.dim() != 4 or bias_rows.shape[1] != 2:
            raise ValueError(f"bias_rows must have shape (B, 2, L, E), got {tuple(bias_rows.shape)}")
        if span_ids is None:
            raise ValueError("span_ids (B, T) are required together with bias_rows")
        if span_ids.dim() != 2 or span_ids.shape[0] != bias_rows.shape[0]:
            raise ValueError(
                f"span_ids must have shape (B, T) with B = {bias_rows.shape[0]}, got {tuple(span_ids.shape)}"
            )
        if span_ids.dtype.is_floating_point or span_ids.dtype == torch.bool:
            raise ValueError(f"span_ids must be an integer tensor, got {span_ids.dtype}")


# ---------------------------------------------------------------------------------------
# Per-architecture gate arithmetic. Each returns (router_logits, topk_weights, topk_indices)
# with the stock gate's dtypes; ``select`` turns (possibly biased) logits into indices and
# ``weigh`` turns router logits and indices into gate weights.


def _v3_logits(gate: nn.Module, hidden: Tensor) -> Tensor:
    return F.linear(hidden.to(torch.float32), gate.weight.to(torch.float32))  # (N, E) fp32


def _v3_select(gate: nn.Module, logits: Tensor) -> Tensor:
    """Top-k of ``sigmoid(logits) + e_score_correction_bias`` within the best expert groups."""
    num_experts = gate.num_experts
    groups = gate.num_group
    per_group = num_experts // groups
    choice = logits.sigmoid() + gate.e_score_correction_bias  # (N, E)
    best_two = choice.view(-1, groups, per_group).topk(2, dim=-1)[0]  # (N, G, 2)
    group_rank = best_two.sum(dim=-1)  # (N, G)
    kept_groups = torch.topk(group_rank, k=gate.topk_group, dim=-1, sorted=False)[1]  # (N, topk_group)
    group_keep = torch.zeros_like(group_rank).scatter_(1, kept_groups, 1)  # (N, G)
    expert_keep = group_keep.unsqueeze(-1).expand(-1, groups, per_group).reshape(-1, num_experts)  # (N, E)
    choice = choice.masked_fill(~expert_keep.bool(), float("-inf"))  # (N, E)
    return torch.topk(choice, k=gate.top_k, dim=-1, sorted=False)[1]  # (N, k)


def _v3_weigh(gate: nn.Module, logits: Tensor, indices: Tensor) -> Tensor:
    weights = logits.sigmoid().gather(1, indices)  # (N, k)
    if gate.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * gate.routed_scaling_factor


def _v3_scores(gate: nn.Module, logits: Tensor) -> Tensor:
    return logits.sigmoid()


def _v2_logits(gate: nn.Module, hidden: Tensor) -> Tensor:
    return F.linear(hidden.to(torch.float32), gate.weight.to(torch.float32))  # (N, E) fp32


def _v2_group_keep(gate: nn.Module, probs: Tensor) -> Tensor | None:
    """Boolean ``(N, E)`` mask of the experts in each token's best groups (``None``: greedy)."""
    if gate.topk_method == "greedy":
        return None
    if gate.topk_method != "group_limited_greedy":
        raise ValueError(f"unsupported DeepSeek-V2 topk_method {gate.topk_method!r}")
    num_experts = gate.num_experts
    groups = gate.num_group
    per_group = num_experts // groups
    group_best = probs.view(-1, groups, per_group).max(dim=-1).values  # (N, G)
    kept_groups = torch.topk(group_best, k=gate.topk_group, dim=-1, sorted=False)[1]  # (N, topk_group)
    group_keep = torch.zeros_like(group_best).scatter_(1, kept_groups, 1)  # (N, G)
    return group_keep.unsqueeze(-1).expand(-1, groups, per_group).reshape(-1, num_experts).bool()  # (N, E)


def _v2_probs(gate: nn.Module, logits: Tensor) -> Tensor:
    """Softmax probabilities, zeroed outside the token's best groups under group-limited top-k."""
    probs = logits.softmax(dim=-1, dtype=torch.float32)  # (N, E)
    keep = _v2_group_keep(gate, probs)
    return probs if keep is None else probs.masked_fill(~keep, 0.0)


def _v2_select(gate: nn.Module, logits: Tensor) -> Tensor:
    return torch.topk(_v2_probs(gate, logits), k=gate.top_k, dim=-1, sorted=False)[1]  # (N, k)


def _v2_weigh(gate: nn.Module, logits: Tensor, indices: Tensor) -> Tensor:
    # The selected experts lie in kept groups, where the group mask leaves the probabilities
    # unchanged, so gathering from the unmasked softmax equals the stock top-k values.
    return _v2_scores(gate, logits).gather(1, indices) * gate.routed_scaling_factor  # (N, k)


def _v2_scores(gate: nn.Module, logits: Tensor) -> Tensor:
    return logits.softmax(dim=-1, dtype=torch.float32)


def _qwen3_logits(gate: nn.Module, hidden: Tensor) -> Tensor:
    return F.linear(hidden, gate.weight)  # (N, E), dtype of the hidden states


def _qwen3_select(gate: nn.Module, logits: Tensor) -> Tensor:
    probs = F.softmax(logits, dim=-1, dtype=torch.float32)  # (N, E)
    return torch.topk(probs, gate.top_k, dim=-1)[1]  # (N, k), sorted by probability


def _qwen3_weigh(gate: nn.Module, logits: Tensor, indices: Tensor) -> Tensor:
    weights = F.softmax(logits, dim=-1, dtype=torch.float32).gather(1, indices)  # (N, k)
    if gate.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(logits.dtype)


def _qwen3_scores(gate: nn.Module, logits: Tensor) -> Tensor:
    return F.softmax(logits, dim=-1, dtype=torch.float32)


@dataclass(frozen=True)
class _GateOps:
    """How one gate class computes logits, selection, weights and scores.

    Supported gate classes (transformers 5.x):

    * ``DeepseekV3TopkRouter`` (Moonlight-16B-A3B): sigmoid scores in float32; selection by
      top-k of ``sigmoid(z) + e_score_correction_bias`` after masking all but the best
      ``topk_group`` of ``n_group`` expert groups (a group scores the sum of its two best
      experts); weights are the plain sigmoid at the chosen experts, renormalised
      (denominator ``+ 1e-20``) when ``norm_topk_prob``, times ``routed_scaling_factor``.
    * ``DeepseekV2TopkRouter`` (DeepSeek-V2-Lite): softmax in float32; ``greedy`` top-k, or
      ``group_limited_greedy`` (a group scores its best expert, experts of the other groups
      get probability 0 before the top-k); weights are the probabilities at the chosen
      experts times ``routed_scaling_factor``, never renormalised.
    * ``Qwen3MoeTopKRouter``: logits in the hidden states' dtype, softmax in float32, sorted
      top-k; weights renormalised when ``norm_topk_prob`` and cast to the logits' dtype.

    Every gate returns ``(router_logits (T, E), topk_weights (T, k), topk_indices (T, k))``
    and the override returns the same three tensors with the same dtypes. ``router_logits``
    are always the UNBIASED logits ``z`` of the trained router, so transformers' own
    ``router_logits`` outputs, the recorder and every loss see the router, not the prior.
    """

    logits: Callable[[nn.Module, Tensor], Tensor]
    select: Callable[[nn.Module, Tensor], Tensor]
    weigh: Callable[[nn.Module, Tensor, Tensor], Tensor]
    scores: Callable[[nn.Module, Tensor], Tensor]  # unmodified router scores for RPB-hard weights


#: Each family's gate, by ``model_type`` (``families``): the one adapter a family adds here.
_OPS = {
    "deepseek_v3": _GateOps(_v3_logits, _v3_select, _v3_weigh, _v3_scores),
    "deepseek_v2": _GateOps(_v2_logits, _v2_select, _v2_weigh, _v2_scores),
    "qwen3_moe": _GateOps(_qwen3_logits, _qwen3_select, _qwen3_weigh, _qwen3_scores),
}


def _token_rows(context: RoutingContext, layer: int, num_tokens: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token rows ``(N, E)`` of MoE layer ``layer`` and the flat span ids ``(N,)``."""
    rows, span_ids = context.bias_rows, context.span_ids
    assert rows is not None and span_ids is not None  # guaranteed by RoutingContext.active
    batch, seq = span_ids.shape
    if batch * seq != num_tokens:
        raise ValueError(
            f"MoE layer {layer}: the gate sees {num_tokens} tokens but the routing context holds span ids "
            f"for B*T = {batch}*{seq} = {batch * seq}; set the context for this batch (or detach for "
            "generation / evaluation)"
        )
    if layer >= rows.shape[2]:
        raise ValueError(f"MoE layer {layer} has no row in bias_rows with L = {rows.shape[2]}")
    if rows.shape[-1] != like.shape[-1]:
        raise ValueError(f"bias_rows have {rows.shape[-1]} experts, the gate has {like.shape[-1]}")
    span_ids = span_ids.to(like.device)
    per_token = span_bias_per_token(rows[:, :, layer, :].to(like.device), span_ids)  # (B, T, E)
    return per_token.reshape(num_tokens, -1), span_ids.reshape(num_tokens)  # (N, E), (N,)


def _routed_forward(
    gate: nn.Module, hidden_states: Tensor, ops: _GateOps, layer: int, context: RoutingContext
) -> tuple[Tensor, Tensor, Tensor]:
    """The gate under ``context``: ``(unbiased logits, weights, indices)`` like the stock gate."""
    hidden = hidden_states.reshape(-1, gate.hidden_dim)  # (N, H), row b*T + t
    logits = ops.logits(gate, hidden)  # (N, E), z
    if not context.active:
        indices = ops.select(gate, logits)
        weights = ops.weigh(gate, logits, indices)
    elif context.mode == "soft":
        bias, _ = _token_rows(context, layer, hidden.shape[0], logits)  # (N, E), zeros off-span
        biased = soft_bias_logits(logits, bias, context.beta)  # (N, E), z'
        indices = ops.select(gate, biased)
        weights = ops.weigh(gate, biased if context.bias_in_gate_weights else logits, indices)
    else:
        select_rows, span_ids = _token_rows(context, layer, hidden.shape[0], logits)
        prior_indices = hard_topk_from_prior(select_rows, ops.scores(gate, logits), gate.top_k, False)[1]
        stock_indices = ops.select(gate, logits)
        indices = torch.where((span_ids >= 0).unsqueeze(-1), prior_indices, stock_indices)  # (N, k)
        weights = ops.weigh(gate, logits, indices)
    if context.recorder is not None:
        context.recorder.record(layer, logits, indices)
    return logits, weights, indices


def _make_override(ops: _GateOps, layer: int, handle: RoutingHandle) -> Callable[..., tuple[Tensor, ...]]:
    def forward(self: nn.Module, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return _routed_forward(self, hidden_states, ops, layer, handle.context)

    setattr(forward, _OVERRIDE_MARK, True)
    return forward


def _is_overridden(gate: nn.Module) -> bool:
    return "forward" in vars(gate)


def _is_ours(gate: nn.Module) -> bool:
    override = vars(gate).get("forward")
    return getattr(getattr(override, "__func__", None), _OVERRIDE_MARK, False)


class RoutingHandle:
    """The attached overrides of one model. ``context`` may be replaced between batches."""

    def __init__(self, gates: list[tuple[int, nn.Module]], context: RoutingContext) -> None:
        self.gates = gates
        self.context = context
        self.attached = False

    @property
    def moe_layers(self) -> list[int]:
        """Decoder-layer index of each MoE layer, in ``L``-axis order."""
        return [layer for layer, _ in self.gates]

    def detach(self) -> None:
        """Remove the overrides (idempotent): the gates route with their class ``forward`` again."""
        for _, gate in self.gates:
            if _is_ours(gate):
                del gate.forward
        self.attached = False

    def __enter__(self) -> RoutingHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()


def attach(model: nn.Module, context: RoutingContext) -> RoutingHandle:
    """Override ``forward`` on every MoE gate instance of ``model`` to route under ``context``.

    The override is an instance attribute (``types.MethodType``): the gate's class,
    parameters, buffers, state-dict keys and transformers' output-recorder hooks are
    untouched, and ``detach`` restores the class method by deleting the attribute.

    Usage (one context per training run, refilled per micro-batch)::

        context = RoutingContext(mode="soft", beta=1.0)
        handle = attach(model, context)
        for batch in batches:
            context.set_batch(prior_to_bias(batch_prior), batch_span_ids)  # (B, 2, L, E), (B, T)
            out = model(input_ids=batch_ids)
            router_logits = context.recorder.layer_logits()  # L tensors (B*T, E)
            ...
        handle.detach()

    Layer axis: the ``L`` axis of the prior / bias rows indexes the MoE layers in the order
    ``find_gates`` returns them (position in that list, not the decoder-layer index): a
    model whose first decoder layer is dense has its ``L`` rows start at decoder layer 1.

    Token order: the MoE blocks hand the gate their ``(B, T, H)`` hidden states, or the same
    tensor viewed as ``(B*T, H)``; the gate flattens row-major, so flat row ``i`` is sample
    ``i // T``, position ``i % T``. Span ids are flattened the same way
    (``span_ids.reshape(-1)``), and a gate call whose token count is not ``B*T`` raises
    (e.g. a cached decoding step while a training context is attached). Recorded logits keep
    the gate's flat ``(B*T, E)`` layout.

    Raises:
        TypeError: unsupported model (see ``find_gates``).
        RuntimeError: a gate already has an instance-level ``forward`` (attached twice).
        ValueError: the context's ``L`` axis does not match the number of MoE layers.
    """
    gates = find_gates(model)
    overridden = [layer for layer, gate in gates if _is_overridden(gate)]
    if overridden:
        raise RuntimeError(
            f"MoE gates of layers {overridden} already have a forward override; detach the routing "
            "context before attaching another"
        )
    rows = context.bias_rows
    if rows is not None and rows.shape[2] != len(gates):
        raise ValueError(
            f"bias_rows have L = {rows.shape[2]} layers but the model has {len(gates)} MoE layers"
        )
    handle = RoutingHandle(gates, context)
    for position, (_, gate) in enumerate(gates):
        ops = _OPS[gate_architecture(gate)]
        gate.forward = types.MethodType(_make_override(ops, position, handle), gate)
    handle.attached = True
    return handle


def detach(model: nn.Module) -> int:
    """Remove this module's overrides from every MoE gate of ``model``; returns how many were removed."""
    removed = 0
    for _, gate in find_gates(model):
        if _is_ours(gate):
            del gate.forward
            removed += 1
    return removed
