"""Router math of the paper (§3): prior bias, hard override and router-side losses.

Pure torch functions on router logits, scores, priors or router weights; they know no model
class, training framework or parallel layout, so the transformers and Megatron backends share
them. Symbols: ``E`` experts, ``T`` tokens, ``k`` experts per token; ``pi`` the frozen-base
prior (eq. (2), ``N x 2 x L x E``, span 0 = Q, 1 = A); ``c = clip(pi)`` to ``[eps/E, C/E]``,
renormalised; ``b = log c - mean_e log c`` (eq. (3)); ``z' = z + beta * b`` (eq. (4)). A
negative span id marks a token outside both spans: it gets no bias and no span-level loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

__all__ = [
    "DEFAULT_CLIP_C",
    "DEFAULT_CLIP_EPS",
    "LOG_PRIOR_FLOOR",
    "ROUTER_TERM_LOSSES",
    "RouterLayer",
    "centered_logit_l2",
    "clipped_log_prior",
    "expert_bias_update",
    "hard_topk_from_prior",
    "kl_to_base",
    "load_balancing_loss",
    "prior_to_bias",
    "router_l2",
    "router_probabilities",
    "soft_bias_logits",
    "span_bias_per_token",
    "z_loss",
]

DEFAULT_CLIP_EPS = 0.05
DEFAULT_CLIP_C = 5.0
#: Floor of the logit-L2 target ``log pi`` against ``log 0`` only; far below any softmax
#: probability a bf16/fp32 router produces (``exp(-27.6)``), so it never moves a real prior.
LOG_PRIOR_FLOOR = 1e-12


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The float dtype a reduction runs in: at least float32, float64 kept.

    Losses and the bias reduce in it even for bfloat16 inputs, and return float32 (float64 for
    float64 inputs).
    """
    return torch.promote_types(dtype, torch.float32)


def _token_mask(mask: Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
    """A boolean token mask and its count clamped to at least one, as a float scalar.

    Masking with ``torch.where`` and dividing by the clamped count (instead of boolean
    indexing) keeps the losses free of host synchronisation and makes an all-masked
    batch give an exact zero that is still attached to the autograd graph.
    """
    mask = mask.bool()
    count = mask.sum().clamp(min=1).to(_wide(like.dtype))  # ()
    return mask, count


def _check_last_dim(name: str, tensor: Tensor, num_experts: int) -> None:
    """Raise ``ValueError`` unless ``tensor``'s last dimension has ``num_experts`` entries."""
    if tensor.shape[-1] != num_experts:
        raise ValueError(f"{name} has {tensor.shape[-1]} experts in its last dimension, not {num_experts}")


def clipped_log_prior(
    prior: Tensor, clip_eps: float = DEFAULT_CLIP_EPS, clip_c: float = DEFAULT_CLIP_C
) -> Tensor:
    """Clamp a prior to ``[eps/E, C/E]``, renormalise it over experts and take the log.

    Implements ``log c`` with ``c = clip(pi)`` of eq. (3) of the paper (§3.1, Appendix F.7):
    ``pi`` = ``prior``, ``eps`` = ``clip_eps``, ``C`` = ``clip_c``, ``E`` = ``prior.shape[-1]``.
    This is the single place where the clipping lives; ``prior_to_bias`` and the hard
    override go through it (``centered_logit_l2`` does not: §3.3's target is the
    unclipped prior). The result is finite for any prior with finite entries, zeros included.

    Args:
        prior: probabilities over experts, shape ``(..., E)`` (any leading shape, e.g.
            ``N x 2 x L x E``); rows need not sum to one exactly.
        clip_eps: lower clamp numerator, ``0 < clip_eps <= clip_c``.
        clip_c: upper clamp numerator.

    Returns:
        ``log c``, shape ``(..., E)``, in float32 (float64 for a float64 prior).
    """
    return _clipped_log(prior, clip_eps, clip_c, _wide(prior.dtype))


def _clipped_log(prior: Tensor, clip_eps: float, clip_c: float, dtype: torch.dtype) -> Tensor:
    """``clipped_log_prior`` computed in ``dtype``."""
    if not 0.0 < clip_eps <= clip_c:
        raise ValueError(f"need 0 < clip_eps <= clip_c, got clip_eps={clip_eps}, clip_c={clip_c}")
    num_experts = prior.shape[-1]
    p = prior.to(dtype)  # (..., E)
    c = p.clamp(min=clip_eps / num_experts, max=clip_c / num_experts)  # (..., E)
    c = c / c.sum(dim=-1, keepdim=True)  # (..., E), renormalised over experts
    return c.log()  # (..., E)


def prior_to_bias(
    prior: Tensor, clip_eps: float = DEFAULT_CLIP_EPS, clip_c: float = DEFAULT_CLIP_C
) -> Tensor:
    """Turn a routing prior into the zero-mean log-prior bias of RPB.

    Implements eq. (3) of the paper, ``b = log c - mean_e' log c`` with
    ``c = clip(pi)``: ``pi`` = ``prior``, ``eps`` = ``clip_eps``, ``C`` = ``clip_c``.
    As Appendix F.7 specifies, the prior is clamped, renormalised and logged first and
    the expert-axis mean is subtracted last, so every bias row has zero mean (up to
    floating-point rounding) whatever the clamp did. The arithmetic runs in float64 so the
    float32 result keeps its row means within about 1e-7 of zero.

    Args:
        prior: probabilities over experts, shape ``(..., E)``; any leading shape, e.g.
            the whole ``N x 2 x L x E`` prior table or one sample's ``2 x L x E`` rows.
        clip_eps: lower clamp numerator (clamp at ``clip_eps / E``).
        clip_c: upper clamp numerator (clamp at ``clip_c / E``).

    Returns:
        The bias ``b``, shape ``(..., E)``, float32 (float64 for a float64 prior).
    """
    log_c = _clipped_log(prior, clip_eps, clip_c, torch.float64)  # (..., E)
    bias = log_c - log_c.mean(dim=-1, keepdim=True)  # (..., E), zero mean over E
    return bias.to(_wide(prior.dtype))


def soft_bias_logits(logits: Tensor, bias: Tensor, beta: float | Tensor) -> Tensor:
    """Add the scaled prior bias to router logits (soft RPB).

    Implements eq. (4) of the paper, ``z' = z + beta * b``: ``z`` = ``logits``,
    ``b`` = ``bias``, ``beta`` = ``beta``. The bias of a span is broadcast over the
    span's tokens: pass either one ``(E,)`` row (all tokens in the same span) or a
    per-token ``(T, E)`` tensor already gathered with ``span_bias_per_token`` (whose
    no-span tokens carry zeros, so they keep their logits).

    The sum is formed in at least float32 and rounded once to the logits' dtype, so the
    result has the dtype of ``logits``. A Python ``beta`` of exactly zero returns
    ``logits`` itself, bit-identical (SFT, §3.1: ``beta = 0`` recovers fine-tuning
    without a prior).

    Whether the biased logits ``z'`` also feed the gate weights (the
    per-expert mixing coefficients) or only the top-k selection is a caller choice,
    exposed as the config key ``prior.bias_in_gate_weights`` (default true: eq. (4) read
    literally, ``z'`` replaces ``z`` everywhere inside the gate). The functions here are
    agnostic: ``soft_bias_logits`` only produces ``z'``, and the caller decides which of
    ``z`` and ``z'`` the gate weights are computed from.

    Args:
        logits: router logits ``z``, shape ``(T, E)`` (any leading shape ``(..., E)``).
        bias: ``b``, shape ``(E,)``, ``(T, E)`` or anything broadcastable to ``logits``.
        beta: bias strength.

    Returns:
        ``z'``, same shape and dtype as ``logits``.
    """
    _check_last_dim("bias", bias, logits.shape[-1])
    if isinstance(beta, int | float) and beta == 0:
        return logits
    wide = torch.promote_types(_wide(logits.dtype), bias.dtype)
    biased = logits.to(wide) + beta * bias.to(wide)  # (T, E)
    return biased.to(logits.dtype)


def span_bias_per_token(bias_rows: Tensor, span_ids: Tensor) -> Tensor:
    """Gather, for every token, the per-expert row of the span it belongs to.

    Implements the broadcast ``t in (x, s)`` of eq. (4) of the paper: ``b_{x,s,l}`` =
    ``bias_rows[..., s, :]`` for the token's span ``s`` = ``span_ids[..., t]``. Span ``0``
    is Q and span ``1`` is A; a negative span index (``-1``: template, padding, any token
    outside both spans) gets a row of zeros, i.e. **no-span tokens get no bias**. The same
    gather serves priors (``kl_to_base`` and ``centered_logit_l2`` take per-token priors);
    their no-span rows are zeros too and must be masked out with ``span_ids >= 0``.

    Args:
        bias_rows: one sample's rows, shape ``(2, E)``, or a batch ``(B, 2, E)``.
        span_ids: integer span index per token, shape ``(T,)``, or ``(B, T)`` for a batch.

    Returns:
        Per-token rows, shape ``(T, E)`` (``(B, T, E)`` for a batch), dtype of ``bias_rows``.
    """
    if bias_rows.dim() < 2 or bias_rows.shape[-2] != 2:
        raise ValueError(f"bias_rows must have shape (..., 2, E), got {tuple(bias_rows.shape)}")
    if span_ids.dim() != bias_rows.dim() - 1:
        raise ValueError(
            f"span_ids shape {tuple(span_ids.shape)} does not match bias_rows shape {tuple(bias_rows.shape)}"
        )
    in_span = span_ids >= 0  # (T,)
    index = span_ids.clamp(min=0).long().unsqueeze(-1)  # (T, 1)
    rows = torch.take_along_dim(bias_rows, index, dim=-2)  # (T, E)
    return torch.where(in_span.unsqueeze(-1), rows, torch.zeros_like(rows))  # (T, E)


def hard_topk_from_prior(
    prior_bias: Tensor, router_scores: Tensor, top_k: int, renormalize: bool
) -> tuple[Tensor, Tensor]:
    """Select experts by the span prior and weight them with the router's own scores (RPB-hard).

    Implements the deterministic top-k override of §3.1 of the paper (RPB-hard, the
    hard end of the eq. (4) enforcement axis): the top-k selection score is the span's
    clipped log prior ``log c`` (= ``prior_bias``; the zero-mean bias ``b`` of eq. (3)
    gives the same selection, it differs by a per-row constant), so every token of a
    span goes through the same ``k`` experts; the gate weights are the UNMODIFIED
    ``router_scores`` gathered at those experts, renormalised to sum to one when
    ``renormalize`` is true.

    Tie-breaking: experts are ranked by a stable descending sort, so equal prior scores
    (common after clipping, e.g. several experts at the ``eps/E`` floor) are broken
    toward the lower expert index, the same on every device; ``indices[..., 0]`` is the
    highest-prior expert. (``torch.topk`` does not document an order for ties, which is
    why it is not used here.)

    Tokens without a span have no prior: apply the override to span tokens only and
    keep the stock selection elsewhere (e.g. ``torch.where(span_mask[:, None], ...)``).

    Args:
        prior_bias: selection scores, ``(E,)`` for one span or ``(T, E)`` per token.
        router_scores: the router's own gate scores (softmax or sigmoid output, before
            any prior), shape ``(T, E)``.
        top_k: experts per token, ``1 <= top_k <= E``.
        renormalize: divide the gathered weights by their sum over the ``k`` experts.

    Returns:
        ``(weights, indices)``, both ``(T, k)``; ``weights`` carries the autograd graph of
        ``router_scores``, ``indices`` is int64.
    """
    num_experts = router_scores.shape[-1]
    _check_last_dim("prior_bias", prior_bias, num_experts)
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be in [1, {num_experts}], got {top_k}")
    order = torch.sort(prior_bias.detach(), dim=-1, descending=True, stable=True).indices  # (T, E) or (E,)
    indices = order[..., :top_k]  # (T, k) or (k,)
    indices = indices.expand(*router_scores.shape[:-1], top_k).contiguous()  # (T, k)
    weights = torch.gather(router_scores, -1, indices)  # (T, k)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)  # (T, k)
    return weights, indices


def kl_to_base(prior: Tensor, router_logits: Tensor, span_mask: Tensor) -> Tensor:
    """Mean KL divergence from the base prior to the current router distribution over span tokens.

    Implements the KL-to-base objective of §3.3 of the paper,
    ``L = 1/|T| sum_{t in T} KL(pi_{x(t),s(t),l} || p_{theta,t,l})``:
    ``pi`` = ``prior`` (the unclipped eq. (2) prior, one row per token),
    ``p_theta = softmax(router_logits)``, ``T`` = tokens where ``span_mask`` is true.
    Computed as ``sum_e pi_e (log pi_e - log_softmax(z)_e)`` with ``0 log 0 = 0`` and
    ``log_softmax`` in float32, so it is finite for priors with zeros and large logits.
    Tokens outside ``span_mask`` contribute nothing, whatever their prior rows hold.
    Returns a zero (attached to the graph) when no token has a span.

    Args:
        prior: per-token prior rows ``pi``, shape ``(T, E)`` (any leading shape ``(..., E)``).
        router_logits: ``z``, shape ``(T, E)``.
        span_mask: boolean, shape ``(T,)``; true for tokens with a defined span
            (``span_ids >= 0``).

    Returns:
        Scalar loss, float32.
    """
    _check_last_dim("prior", prior, router_logits.shape[-1])
    mask, count = _token_mask(span_mask, router_logits)  # (T,), ()
    wide = _wide(router_logits.dtype)
    log_p = torch.log_softmax(router_logits.to(wide), dim=-1)  # (T, E)
    pi = torch.where(mask.unsqueeze(-1), prior.to(wide), 0.0)  # (T, E), no-span rows zeroed
    kl = (torch.xlogy(pi, pi) - pi * log_p).sum(dim=-1)  # (T,), 0 log 0 = 0
    return torch.where(mask, kl, 0.0).sum() / count


def centered_logit_l2(router_logits: Tensor, prior: Tensor, span_mask: Tensor) -> Tensor:
    """Mean squared distance between centred router logits and the centred log prior over span tokens.

    Implements the logit-L2-to-base objective of §3.3 of the paper,
    ``L = 1/|T| sum_{t in T} ||center(z_t) - center(log pi_{x(t),s(t),l})||_2^2``:
    ``z`` = ``router_logits``, ``pi`` = ``prior`` (one row per token), ``T`` = tokens where
    ``span_mask`` is true, ``center`` = subtract the mean over experts. ``pi`` is the frozen
    eq. (2) prior itself, as in ``kl_to_base``, not the eq. (3) clip that only the RPB bias
    needs: it is floored at ``LOG_PRIOR_FLOOR`` solely so that an exact zero (which a
    softmax prior never holds) gives a finite log. Computed in float32 (float64 for
    float64 inputs). Returns a zero (attached to the graph) when no token has a span.

    Args:
        router_logits: ``z``, shape ``(T, E)`` (any leading shape ``(..., E)``).
        prior: per-token prior rows ``pi``, shape ``(T, E)``.
        span_mask: boolean, shape ``(T,)``; true for tokens with a defined span.

    Returns:
        Scalar loss, float32.
    """
    _check_last_dim("prior", prior, router_logits.shape[-1])
    mask, count = _token_mask(span_mask, router_logits)  # (T,), ()
    wide = _wide(router_logits.dtype)
    z = router_logits.to(wide)  # (T, E)
    z_centred = z - z.mean(dim=-1, keepdim=True)  # (T, E)
    pi = torch.where(mask.unsqueeze(-1), prior.to(wide), 1.0)  # (T, E), no-span rows made finite
    log_pi = pi.clamp(min=LOG_PRIOR_FLOOR).log()  # (T, E)
    target = log_pi - log_pi.mean(dim=-1, keepdim=True)  # (T, E), centred log prior
    dist = (z_centred - target).pow(2).sum(dim=-1)  # (T,)
    return torch.where(mask, dist, 0.0).sum() / count


def router_l2(weights: Sequence[Tensor], base_weights: Sequence[Tensor]) -> Tensor:
    """Mean over layers of the squared Frobenius distance between router weights and their base values.

    Implements the Router-L2 penalty of eq. (5) of the paper,
    ``mean_l ||W_l - W_l^base||_2^2`` (squared Frobenius norm, without ``lambda``):
    ``W_l`` = ``weights[l]``, ``W_l^base`` = ``base_weights[l]``. The difference is taken
    in float32 even for bfloat16 inputs (bf16 would quantise the small ``W - W_base``; use
    the fp32 main parameters where the framework keeps them). The base weights are
    treated as constants (detached).

    Args:
        weights: current router weight per MoE layer, each ``(E, H)``.
        base_weights: frozen base router weight per layer, same shapes, same order.

    Returns:
        Scalar penalty, float32 (float64 for float64 weights).
    """
    if len(weights) != len(base_weights):
        raise ValueError(f"{len(weights)} router weights but {len(base_weights)} base weights")
    if len(weights) == 0:
        raise ValueError("router_l2 needs at least one layer")
    per_layer = []
    for layer, (w, w_base) in enumerate(zip(weights, base_weights, strict=True)):
        if w.shape != w_base.shape:
            raise ValueError(f"layer {layer}: weight {tuple(w.shape)} vs base {tuple(w_base.shape)}")
        wide = torch.promote_types(_wide(w.dtype), w_base.dtype)
        diff = w.to(wide) - w_base.detach().to(wide)  # (E, H)
        per_layer.append(diff.pow(2).sum())
    return torch.stack(per_layer).mean()


def load_balancing_loss(
    router_probs: Tensor,
    topk_indices: Tensor,
    num_experts: int,
    top_k: int,
    token_mask: Tensor | None = None,
) -> Tensor:
    """Switch/GShard auxiliary load-balancing loss of one MoE layer.

    Implements the "standard load-balancing penalty" of the LBL condition (Appendix F.6 of
    the paper), ``E * sum_e f_e * P_e``: ``E`` = ``num_experts``,
    ``f_e`` = (token slots routed to expert ``e``) / (``T * k``), i.e. the fraction of the
    ``T * k`` assignments in ``topk_indices``, and ``P_e`` = mean over tokens of
    ``router_probs[:, e]``. Gradients flow through ``P_e`` only (the counts are not
    differentiable). One implementation for every architecture; the caller passes
    per-token probabilities summing to one (softmax; for sigmoid routers the sigmoid
    scores normalised over experts, as Megatron does).

    Normalisation: perfectly balanced routing gives 1, whatever ``k``. This is Megatron's
    ``aux_loss`` convention (``switch_load_balancing_loss_func``), the one the paper's
    coefficient ``1e-3`` refers to. transformers' ``load_balancing_loss_func`` divides the
    slot counts by ``T`` instead of ``T * k`` and is therefore ``top_k`` times this value
    (it also pools all layers' tokens before the product instead of per layer); multiply
    by ``top_k`` to reproduce its number for one layer. Per-layer values are combined by
    the caller: Megatron-Core SUMS them (each ``TopKRouter`` attaches ``coeff * loss`` of its
    own layer through ``MoEAuxLossAutoScaler``; the coefficient is not divided by the number
    of layers), and the local backend does the same (``modeling.objective``).

    Args:
        router_probs: per-token router probabilities, shape ``(T, E)`` (any leading shape).
        topk_indices: selected experts, shape ``(T, k)`` (same leading shape), int.
        num_experts: ``E``.
        top_k: ``k``; must equal ``topk_indices.shape[-1]``.
        token_mask: optional boolean ``(T,)``; false tokens (padding) count in neither
            ``f`` nor ``P``.

    Returns:
        Scalar loss, float32. Zero (attached to the graph) if no token is unmasked.
    """
    _check_last_dim("router_probs", router_probs, num_experts)
    if topk_indices.shape[-1] != top_k:
        raise ValueError(f"topk_indices has {topk_indices.shape[-1]} slots per token, expected top_k={top_k}")
    if topk_indices.shape[:-1] != router_probs.shape[:-1]:
        raise ValueError(
            f"topk_indices {tuple(topk_indices.shape)} and router_probs {tuple(router_probs.shape)} disagree"
        )
    probs = router_probs.reshape(-1, num_experts).to(_wide(router_probs.dtype))  # (T, E)
    indices = topk_indices.reshape(-1, top_k).long()  # (T, k)
    if token_mask is None:
        token_mask = torch.ones(probs.shape[0], dtype=torch.bool, device=probs.device)
    mask, count = _token_mask(token_mask.reshape(-1), probs)  # (T,), ()
    slot_weight = mask.to(probs.dtype).unsqueeze(-1).expand(-1, top_k)  # (T, k), 1 for kept tokens
    counts = torch.zeros(num_experts, dtype=probs.dtype, device=probs.device)  # (E,)
    counts = counts.scatter_add(0, indices.reshape(-1), slot_weight.reshape(-1))  # (E,) slots per expert
    f = counts / (count * top_k)  # (E,), sums to 1
    p_mean = torch.where(mask.unsqueeze(-1), probs, 0.0).sum(dim=0) / count  # (E,)
    return num_experts * (f * p_mean).sum()


def z_loss(router_logits: Tensor, token_mask: Tensor | None = None) -> Tensor:
    """ST-MoE router z-loss: mean over tokens of the squared log-partition of the router logits.

    Implements the ST-MoE z-loss baseline of Appendix A.3 of the paper (Zoph et al., 2022),
    ``1/T sum_t (logsumexp_e z_{t,e})^2`` with ``z`` = ``router_logits``, without its
    coefficient. ``logsumexp`` runs in float32. One layer's value: Megatron-Core attaches
    ``coeff * z_loss`` per layer (``TopKRouter.apply_z_loss``), so the layers' values add up.

    Args:
        router_logits: ``z``, shape ``(T, E)`` (any leading shape ``(..., E)``).
        token_mask: optional boolean ``(T,)``; false tokens (padding) are left out.

    Returns:
        Scalar loss, float32. Zero (attached to the graph) if no token is unmasked.
    """
    lse = torch.logsumexp(router_logits.to(_wide(router_logits.dtype)), dim=-1)  # (T,)
    if token_mask is None:
        return lse.pow(2).mean()
    mask, count = _token_mask(token_mask, lse)  # (T,), ()
    return torch.where(mask, lse.pow(2), 0.0).sum() / count


def expert_bias_update(expert_bias: Tensor, tokens_per_expert: Tensor, rate: float) -> Tensor:
    """One step of the auxiliary-loss-free balancing rule for the expert (correction) bias.

    Implements the bias-update rule that the paper's Appendix F.6 switches off for RPB
    ("disable both the load-balancing objective and the router bias-update rule"): the
    sign rule of DeepSeek-V3 / Wang et al. (2024a), ``b_i <- b_i + u * sign(mean_j n_j - n_i)``
    with ``b`` = ``expert_bias``, ``n`` = ``tokens_per_expert`` (token slots routed to each
    expert over one global batch, per layer), ``u`` = ``rate``. Overloaded experts lose
    ``u``, underloaded ones gain ``u``, and an expert exactly at the mean keeps its bias
    (``sign(0) = 0``). This is Megatron-Core's ``get_updated_expert_bias``
    (``megatron/core/transformer/moe/moe_utils.py``), applied once per global batch in
    ``finalize_model_grads`` with ``moe_router_bias_update_rate`` (default 1e-3). The bias
    is used for top-k selection only, never for the gate weights, and gets no gradient.

    Args:
        expert_bias: current bias, shape ``(E,)`` or ``(L, E)`` (one row per MoE layer).
        tokens_per_expert: counts of the same shape (any dtype; compared in float32 or wider).
        rate: update rate ``u >= 0``; 0 returns ``expert_bias`` unchanged.

    Returns:
        The updated bias, same shape and dtype as ``expert_bias`` (no autograd graph).
    """
    if expert_bias.shape != tokens_per_expert.shape:
        raise ValueError(
            f"expert_bias {tuple(expert_bias.shape)} and tokens_per_expert "
            f"{tuple(tokens_per_expert.shape)} differ in shape"
        )
    if rate < 0:
        raise ValueError(f"rate must be non-negative, got {rate}")
    with torch.no_grad():
        counts = tokens_per_expert.to(_wide(tokens_per_expert.dtype))  # (..., E)
        mean = counts.sum(dim=-1, keepdim=True) / counts.shape[-1]  # (..., 1)
        step = torch.sign(mean - counts).to(expert_bias.dtype) * rate  # (..., E) in {-u, 0, +u}
        return expert_bias.detach() + step


def router_probabilities(score_function: str, logits: Tensor) -> Tensor:
    """Per-token router distribution (float32 or wider): softmax, or for a ``sigmoid`` router
    (deepseek_v3) its sigmoid scores normalised over the experts, as Megatron-Core counts them."""
    z = logits.to(_wide(logits.dtype))
    if score_function == "sigmoid":
        scores = z.sigmoid()
        return scores / scores.sum(dim=-1, keepdim=True)
    if score_function != "softmax":
        raise ValueError(f"unknown router score function {score_function!r}")
    return z.softmax(dim=-1)


@dataclass(frozen=True)
class RouterLayer:
    """What one MoE layer's router holds for the router terms in one micro-batch.

    Both backends build it from their router (rows are the layer's ``N`` tokens in the
    backend's own order) and hand it to ``ROUTER_TERM_LOSSES``, so a term is written once.

    Attributes:
        logits: ``(N, E)`` unbiased router logits ``z`` (before any prior bias or expert bias).
        top_k: ``k``.
        score_function: ``"softmax"`` or ``"sigmoid"`` (``router_probabilities``).
        token_mask: ``(N,)`` true on routed (non-padding) tokens.
        prior: ``(N, E)`` raw prior row of each token's span (zeros off-span), for terms that
            read the prior (``registry.RouterTerm.prior``); ``None`` otherwise.
        span_mask: ``(N,)`` true on tokens with a span, with ``prior``.
    """

    logits: Tensor
    top_k: int
    score_function: str
    token_mask: Tensor
    prior: Tensor | None = None
    span_mask: Tensor | None = None

    @cached_property
    def probabilities(self) -> Tensor:
        """``(N, E)`` router distribution (``router_probabilities``)."""
        return router_probabilities(self.score_function, self.logits)

    def prior_rows(self) -> tuple[Tensor, Tensor]:
        """``(prior, span_mask)``; raises for a layer built without the prior."""
        if self.prior is None or self.span_mask is None:
            raise ValueError(
                "this router term reads the prior (router_terms.<name>.prior), but none was given"
            )
        return self.prior, self.span_mask


def _balancing_term(layer: RouterLayer) -> Tensor:
    """Switch loss on the probabilities and their own top-k: no expert bias or group limit,
    as Megatron-Core counts them (``compute_routing_scores_for_aux_loss``)."""
    probs = layer.probabilities
    counted = probs.topk(layer.top_k, dim=-1).indices  # (N, k)
    return load_balancing_loss(probs, counted, probs.shape[-1], layer.top_k, layer.token_mask)


def _kl_base_term(layer: RouterLayer) -> Tensor:
    prior, span_mask = layer.prior_rows()
    return kl_to_base(prior, layer.logits, span_mask)


#: Each router term of the registry (``router_terms``) as a function of one layer's router: its
#: unweighted value for that layer. The backends weight it, combine layers and attach it.
ROUTER_TERM_LOSSES: dict[str, Callable[[RouterLayer], Tensor]] = {
    "load_balancing": _balancing_term,
    "z_loss": lambda layer: z_loss(layer.logits, layer.token_mask),
    "kl_base": _kl_base_term,
    "logit_l2": lambda layer: centered_logit_l2(layer.logits, *layer.prior_rows()),
}
