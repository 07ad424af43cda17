"""Router Prior Bias inside Megatron-Core: a ``TopKRouter`` subclass that overrides ``routing()`` only.

The cluster backend of the router interventions of §3. The math lives in
``workflow_scripts.routing.core``; this module only knows Megatron-Core's router: its token
layout, its score functions and its auxiliary-loss mechanism. The subclass is swapped onto
built routers (``install``), so parameters, checkpoints and the HF export stay the stock
router's; auxiliary terms are rescaled to weigh as in the local backend (``aux_loss_correction``).
Every router term of the registry runs here through one path: the terms Megatron-Core computes
itself (``MEGATRON_NATIVE_TERMS``) through its config, any other by its ``routing.core`` function,
attached per layer like Megatron's own losses (``PriorBiasedRouter``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function
from megatron.core.transformer.moe.router import TopKRouter
from torch import Tensor, nn

from workflow_scripts.registry import RouterTerm
from workflow_scripts.routing.core import (
    DEFAULT_CLIP_C,
    DEFAULT_CLIP_EPS,
    ROUTER_TERM_LOSSES,
    RouterLayer,
    clipped_log_prior,
    hard_topk_from_prior,
    prior_to_bias,
    router_l2,
    soft_bias_logits,
    span_bias_per_token,
)

__all__ = [
    "MEGATRON_BALANCING_LOSSES",
    "MEGATRON_NATIVE_TERMS",
    "MODES",
    "aux_loss_correction",
    "MegatronRoutingContext",
    "PriorBiasedRouter",
    "RouterAnchor",
    "find_routers",
    "install",
    "sequence_parallel_slice",
]

MODES = (None, "soft", "hard")
#: The names Megatron-Core's own load-balancing losses are attached under (``aux_loss``,
#: ``seq_aux_loss``, ``global_aux_loss``), whose token count ``PriorBiasedRouter`` corrects.
MEGATRON_BALANCING_LOSSES = ("load_balancing_loss", "seq_load_balancing_loss", "global_load_balancing_loss")
#: Router terms Megatron-Core computes itself (``train.megatron.settings.router_settings`` sets
#: them), with the name it logs each under; the routers attach every other term.
MEGATRON_NATIVE_TERMS = {"load_balancing": "load_balancing_loss", "z_loss": "z_loss"}


def aux_loss_correction(answer_tokens: float, micro_batches: int, router_tokens: int) -> float:
    """Factor on Megatron's auxiliary-loss gradients that makes each term weigh ``1 / M``.

    Auxiliary-loss weight: with ``calculate_per_token_loss`` Megatron multiplies every attached
    loss by the micro-batch's token count ``N`` and divides all gradients by the global batch's
    loss-mask count ``T``, which equals ``M x N`` only when every token carries loss. Here only
    answer tokens do, so each auxiliary term would weigh ``N / T`` instead of the local
    backend's ``1 / M`` (``M`` micro-batches per global batch). ``PriorBiasedRouter`` scales the
    gradient of every loss it or Megatron attaches by ``MegatronRoutingContext.aux_loss_scale``,
    which the forward step sets to ``aux_loss_correction`` per micro-batch; the values Megatron
    logs are unchanged, and so is the model config Bridge saves with each checkpoint.

    Megatron attaches ``loss * N`` (``N = router_tokens``: the non-padding tokens the rank
    routes times the tensor-parallel size, ``step.routed_tokens``; for its load-balancing
    losses only once ``PriorBiasedRouter`` corrects their count) and later divides by
    ``T = answer_tokens``, the loss-mask count of the global batch summed over data-parallel
    ranks. ``T / (M * N)`` turns ``N / T`` into the local backend's ``1 / M``, ``M =
    micro_batches`` the micro-batches of the global batch. A rank routing only padding
    (``N = 0``) attaches nothing, whatever the factor.
    """
    if micro_batches <= 0 or router_tokens < 0:
        raise ValueError(f"need micro-batches and a token count, got {micro_batches} and {router_tokens}")
    return max(float(answer_tokens), 1.0) / (micro_batches * max(router_tokens, 1))


def sequence_parallel_slice(span_ids: Tensor, rank: int, world: int) -> Tensor:
    """The ``(S / world, B)`` span ids that tensor-parallel rank ``rank`` routes, from ``(B, S)``.

    Megatron's sequence parallelism scatters the sequence axis of ``(S, B, H)`` activations
    into ``world`` contiguous chunks, chunk ``r`` on rank ``r``; the router flattens its
    chunk sequence-first. ``world = 1`` returns the whole ``(S, B)`` transpose.
    """
    batch, seq = span_ids.shape
    if seq % world:
        raise ValueError(f"sequence length {seq} is not divisible by the tensor-parallel size {world}")
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside a tensor-parallel group of {world}")
    chunk = seq // world
    return span_ids[:, rank * chunk : (rank + 1) * chunk].transpose(0, 1).contiguous()  # (S_local, B)


@dataclass
class MegatronRoutingContext:
    """What the routers apply in the current micro-batch; one object shared by every router.

    Attributes:
        mode: ``"soft"`` (eq. (4)), ``"hard"`` (RPB-hard) or ``None`` (stock selection).
        beta: soft-mode strength.
        bias_in_gate_weights: soft mode: gate weights from ``z'`` (true) or from ``z``.
        terms: ``(term, coefficient)`` of the router terms the routers attach (every term of
            the condition but ``MEGATRON_NATIVE_TERMS``).
        num_moe_layers: ``L``, the number of MoE layers ``mean`` terms are averaged over.
        clip_eps, clip_c: the prior clipping of eq. (3).
        aux_loss_scale: ``aux_loss_correction`` of the current micro-batch, applied to the
            gradient of every attached auxiliary loss (Megatron's and this module's).
    """

    mode: str | None = None
    beta: float = 0.0
    bias_in_gate_weights: bool = True
    terms: tuple[tuple[RouterTerm, float], ...] = ()
    num_moe_layers: int = 1
    clip_eps: float = DEFAULT_CLIP_EPS
    clip_c: float = DEFAULT_CLIP_C
    aux_loss_scale: float = 1.0
    _prior: Tensor | None = field(default=None, repr=False)  # (B, 2, L, E) raw pi
    _rows: Tensor | None = field(default=None, repr=False)  # (B, 2, L, E) b (soft) or log c (hard)
    _span_ids: Tensor | None = field(default=None, repr=False)  # (S_local, B)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        native = [term.name for term, _ in self.terms if term.name in MEGATRON_NATIVE_TERMS]
        if native:
            raise ValueError(
                f"{native}: Megatron-Core computes these itself (router_settings), not the routers"
            )

    @property
    def needs_prior(self) -> bool:
        return self.mode is not None or any(term.prior for term, _ in self.terms)

    @property
    def has_batch(self) -> bool:
        """Whether a micro-batch's prior rows and span ids are installed."""
        return self._span_ids is not None

    def set_batch(self, prior: Tensor | None, local_span_ids: Tensor | None) -> None:
        """Install a micro-batch: raw prior rows ``(B, 2, L, E)`` and local span ids ``(S_local, B)``.

        ``None`` for both clears the context (every router routes as stock).
        """
        if prior is None or local_span_ids is None:
            if (prior is None) != (local_span_ids is None):
                raise ValueError("prior rows and span ids go together")
            self._prior = self._rows = self._span_ids = None
            return
        if prior.dim() != 4 or prior.shape[1] != 2 or prior.shape[2] != self.num_moe_layers:
            raise ValueError(
                f"prior rows must have shape (B, 2, L={self.num_moe_layers}, E), got {tuple(prior.shape)}"
            )
        if local_span_ids.dim() != 2 or local_span_ids.shape[1] != prior.shape[0]:
            raise ValueError(
                f"span ids must have shape (S_local, B={prior.shape[0]}), got {tuple(local_span_ids.shape)}"
            )
        self._prior = prior
        self._span_ids = local_span_ids.long()
        if self.mode == "soft":
            self._rows = prior_to_bias(prior, self.clip_eps, self.clip_c)
        elif self.mode == "hard":
            self._rows = clipped_log_prior(prior, self.clip_eps, self.clip_c)
        else:
            self._rows = None

    def token_rows(self, table: Tensor, layer: int, num_tokens: int, device: torch.device) -> Tensor:
        """Per-token ``(N, E)`` rows of ``table`` for MoE layer ``layer`` in router order (0 off-span)."""
        spans = self._span_ids
        assert spans is not None
        seq, batch = spans.shape
        if seq * batch != num_tokens:
            raise ValueError(
                f"MoE layer {layer}: the router sees {num_tokens} tokens but the routing context holds "
                f"span ids for S_local*B = {seq}*{batch}; the forward_step must set this micro-batch"
            )
        rows = span_bias_per_token(table[:, :, layer, :].to(device), spans.transpose(0, 1).to(device))
        return rows.transpose(0, 1).reshape(num_tokens, -1)  # (B, S, E) -> (S, B, E) -> (N, E)

    def span_mask(self, device: torch.device) -> Tensor:
        assert self._span_ids is not None
        return (self._span_ids >= 0).reshape(-1).to(device)  # (N,), row s*B + b


class _ScaleGradient(torch.autograd.Function):
    """Identity whose backward multiplies the gradient by ``scale``."""

    @staticmethod
    def forward(ctx, tensor: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.scale, None


class PriorBiasedRouter(TopKRouter):
    """``TopKRouter`` whose ``routing()`` applies the micro-batch's prior; never constructed directly.

    ``install`` sets ``rpb_context`` (the shared context) and ``rpb_layer`` (this router's
    position on the prior's ``L`` axis) on every swapped router.

    Token layout: the router sees ``(S_local, B, H)`` hidden states, sequence-first and, under
    sequence parallelism, the ``S / TP`` slice of tensor-parallel rank ``r``; it flattens them
    to ``N = S_local * B`` rows, row ``s * B + b``. The context holds span ids already sliced to
    ``(S_local, B)`` (``sequence_parallel_slice``) and gathers per-token rows in that order.

    Losses: each router term of the condition but the native ones (KL-to-base, centred
    logit-L2, any term the registry adds) is its ``routing.core.ROUTER_TERM_LOSSES`` function of
    this layer (the local backend's ``Objective.data_terms`` calls the same), a mean over the
    micro-batch's span tokens (prior terms) or routed tokens. Each router attaches
    ``coefficient * loss_l`` (``coefficient / L`` for a ``mean`` term) like Megatron's own
    load-balancing loss; under sequence parallelism a rank holds ``sum over its tokens / tokens
    of the whole sequence``, and the tensor-parallel all-reduce of the router's gradient (the
    weight is marked ``sequence_parallel``) sums the ranks' parts into the gradient of the mean
    (exact for any term that is a mean of per-token values, as every attached term is).
    Load balancing and z-loss stay Megatron's own (``moe_router_load_balancing_type``,
    ``moe_aux_loss_coeff``, ``moe_z_loss_coeff``, set per condition by the config builder),
    except for the token count Megatron's load-balancing losses are attached with under
    per-token loss (``attach_and_log_load_balancing_loss``).
    Router-L2 acts on the optimizer's fp32 main parameters (``RouterAnchor``).
    """

    rpb_context: MegatronRoutingContext
    rpb_layer: int
    #: Non-padding tokens of the ``routing()`` call in progress (None outside one, or unmasked).
    _rpb_valid_tokens: Tensor | None = None

    def routing(self, logits: Tensor, padding_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        self._rpb_valid_tokens = None if padding_mask is None else (~padding_mask.bool()).sum()
        try:
            return self._routing(logits, padding_mask)
        finally:
            self._rpb_valid_tokens = None

    def _routing(self, logits: Tensor, padding_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        context = self.rpb_context
        z = logits.reshape(-1, self.config.num_moe_experts)  # (N, E), row s*B + b
        if context.mode is None or not context.has_batch:
            probs, routing_map = super().routing(logits, padding_mask)
        else:
            self._check_unbalanced()
            flat_padding = padding_mask.reshape(-1) if padding_mask is not None else None
            z = self.apply_z_loss(z, padding_mask=flat_padding)
            indices, weight_logits = self._prior_selection(z, context)
            probs, routing_map = self._score(weight_logits, precomputed_indices=indices)
            self._apply_expert_bias(routing_map, padding_mask=flat_padding)
        return self._attach_terms(probs, z, context, padding_mask), routing_map

    def attach_and_log_load_balancing_loss(
        self,
        activation: Tensor,
        aux_loss_coeff: float,
        aux_loss: Tensor,
        aux_loss_name: str,
        reduce_group: dist.ProcessGroup,
        *args,
        valid_token_count: int | Tensor | None = None,
        **kwargs,
    ) -> Tensor:
        """Megatron's attachment, the loss's gradient scaled by ``aux_loss_scale`` (its logged value not).

        Under per-token loss Megatron attaches ``loss * valid_token_count * TP``, meaning the
        rank's own non-padding tokens. With a padding mask, Megatron-Core 0.19.2's load-balancing
        losses pass the whole reduction group's count instead: its
        ``get_tokens_per_expert_and_token_count`` (``moe_utils``) all-reduces the local
        tokens-per-expert tensor in place, then sums it as the local count, which under sequence
        parallelism multiplies their gradient by the tensor-parallel size (docs/training.md).
        Those losses get the rank's own count here.
        """
        if aux_loss_name in MEGATRON_BALANCING_LOSSES and self._rpb_valid_tokens is not None:
            valid_token_count = self._rpb_valid_tokens
        scaled = _ScaleGradient.apply(aux_loss, self.rpb_context.aux_loss_scale)
        return super().attach_and_log_load_balancing_loss(
            activation,
            aux_loss_coeff,
            scaled,
            aux_loss_name,
            reduce_group,
            *args,
            valid_token_count=valid_token_count,
            **kwargs,
        )

    def apply_z_loss(self, logits: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """Megatron's z-loss with its gradient scaled by ``aux_loss_scale``, the logits' own gradient not.

        Megatron attaches the z-loss to the logits it returns: the input view carries the
        scaled gradient into both, the output view undoes it on the logits' path.
        """
        scale = self.rpb_context.aux_loss_scale
        if self.config.moe_z_loss_coeff is None or scale == 1.0:
            return super().apply_z_loss(logits, padding_mask)
        attached = super().apply_z_loss(_ScaleGradient.apply(logits, scale), padding_mask)
        return _ScaleGradient.apply(attached, 1.0 / scale)

    def _apply_expert_bias(self, routing_map: Tensor, padding_mask: Tensor | None = None) -> None:
        """Megatron's expert-bias token count, with the padding mask broadcast over experts.

        Megatron-Core 0.19.2 masks the ``(N, E)`` routing map with the flat ``(N,)`` padding
        mask, which fails (or, where ``N == E``, masks experts instead of tokens).
        """
        column = None if padding_mask is None else padding_mask.reshape(-1, 1)  # (N, 1)
        super()._apply_expert_bias(routing_map, padding_mask=column)

    def _score(self, logits: Tensor, **kwargs) -> tuple[Tensor, Tensor]:
        """Megatron's own score function, group-limited top-k, normalisation and scaling."""
        return topk_routing_with_score_function(
            logits,
            self.topk,
            use_pre_softmax=self.config.moe_router_pre_softmax,
            num_groups=self.config.moe_router_num_groups,
            group_topk=self.config.moe_router_group_topk,
            scaling_factor=self.config.moe_router_topk_scaling_factor,
            score_function=self.score_function,
            expert_bias=self.expert_bias,
            fused=False,
            **kwargs,
        )

    def _prior_selection(self, z: Tensor, context: MegatronRoutingContext) -> tuple[Tensor, Tensor]:
        """``(indices (N, k), logits the gate weights come from)`` under the soft or hard prior."""
        assert context._rows is not None
        rows = context.token_rows(context._rows, self.rpb_layer, z.shape[0], z.device)  # (N, E)
        if context.mode == "soft":
            biased = soft_bias_logits(z, rows, context.beta)  # (N, E), z'
            indices = self._score(biased, dense_output=True)[1]
            return indices, biased if context.bias_in_gate_weights else z
        span = context.span_mask(z.device)
        prior_indices = hard_topk_from_prior(rows, z.float(), self.topk, False)[1]  # (N, k)
        stock_indices = self._score(z, dense_output=True)[1]
        return torch.where(span.unsqueeze(-1), prior_indices, stock_indices), z

    def _attach_terms(
        self, probs: Tensor, z: Tensor, context: MegatronRoutingContext, padding_mask: Tensor | None
    ) -> Tensor:
        """Attach each router term of this layer to ``probs``: ``coefficient`` times its
        ``routing.core`` value (divided by ``L`` for a ``mean`` term), as Megatron attaches its own.

        Scaled for micro-batches, data parallelism and per-token loss exactly as Megatron scales
        its load-balancing loss (``padding_mask``: true on padding, Megatron's convention).
        """
        if not (self.training and torch.is_grad_enabled()) or not context.terms:
            return probs
        routed = torch.ones(z.shape[0], dtype=torch.bool, device=z.device)
        valid = None
        if padding_mask is not None:
            routed = ~padding_mask.reshape(-1).bool()
            valid = routed.sum()
        prior = span = None
        if any(term.prior for term, _ in context.terms):
            if not context.has_batch:
                raise RuntimeError(
                    "a router term reads the prior, but the forward step installed no micro-batch"
                )
            assert context._prior is not None
            prior = context.token_rows(context._prior, self.rpb_layer, z.shape[0], z.device)  # (N, E)
            span = context.span_mask(z.device)
        layer = RouterLayer(z, self.topk, self.score_function, routed, prior, span)
        for term, coefficient in context.terms:
            if not coefficient:
                continue
            weight = coefficient / context.num_moe_layers if term.layers == "mean" else coefficient
            share = self._local_share(span if term.prior else routed)
            loss = weight * ROUTER_TERM_LOSSES[term.name](layer) * share
            probs = self.attach_and_log_load_balancing_loss(
                probs, weight, loss, term.name, self.tp_cp_group, valid_token_count=valid
            )
        return probs

    def _local_share(self, tokens: Tensor | None) -> Tensor:
        """This rank's ``tokens`` over the sequence's, when sequence parallelism splits the tokens."""
        assert tokens is not None
        local = tokens.sum().float()
        if not getattr(self.weight, "sequence_parallel", False) or self.tp_cp_group.size() == 1:
            return torch.ones((), device=tokens.device)
        total = local.clone()
        dist.all_reduce(total, group=self.tp_cp_group)
        return local / total.clamp(min=1.0)

    def _check_unbalanced(self) -> None:
        if self.is_aux_loss_enabled():
            raise RuntimeError(
                "RPB runs carry no load-balancing loss (Appendix F.6), but this router has "
                f"moe_router_load_balancing_type={self.routing_type!r}, moe_aux_loss_coeff="
                f"{self.config.moe_aux_loss_coeff!r}"
            )
        if self.config.moe_expert_capacity_factor is not None:
            raise RuntimeError("the prior-biased router does not support token dropping (capacity factor)")


def find_routers(model_chunks: Iterable[nn.Module]) -> list[TopKRouter]:
    """Every ``TopKRouter`` of the model in MoE-layer order (by ``layer_number``), MTP layers excluded."""
    routers = [
        module
        for chunk in model_chunks
        for module in chunk.modules()
        if isinstance(module, TopKRouter) and not module.is_mtp_layer
    ]
    if not routers:
        raise TypeError("the model has no Megatron-Core TopKRouter (is it a MoE model?)")
    numbers = [router.layer_number for router in routers]
    if None in numbers or len(set(numbers)) != len(numbers):
        raise ValueError(f"routers without distinct layer numbers: {numbers}")
    return sorted(routers, key=lambda router: router.layer_number)


def install(model_chunks: Sequence[nn.Module], context: MegatronRoutingContext) -> list[PriorBiasedRouter]:
    """Swap every built router's class to ``PriorBiasedRouter`` and share ``context`` among them.

    Raises ``ValueError`` when the prior's ``L`` axis (``context.num_moe_layers``) does not
    match the model's MoE layers, e.g. a pipeline-parallel rank holding only some layers.

    ``install(model_chunks, context)`` swaps the ``__class__`` of every built
    ``TopKRouter`` to ``PriorBiasedRouter`` (a pre-wrap hook of Megatron-Bridge calls it), so
    parameters, buffers, state-dict keys, checkpoints and the HF export are those of the stock
    router. A custom ``forward_step`` refills the shared ``MegatronRoutingContext`` per
    micro-batch. Without a batch in the context every router routes exactly as stock.
    """
    routers = find_routers(model_chunks)
    if len(routers) != context.num_moe_layers:
        raise ValueError(
            f"the model has {len(routers)} MoE routers on this rank but the prior has L = "
            f"{context.num_moe_layers} layers (pipeline parallelism must be 1)"
        )
    for position, router in enumerate(routers):
        router.__class__ = PriorBiasedRouter
        router.rpb_context = context
        router.rpb_layer = position
    return routers  # type: ignore[return-value]


class RouterAnchor:
    """Router-L2 (eq. (5)) on the optimizer's fp32 main parameters against frozen base weights.

    ``lambda * mean_l ||W_l - W_l^base||^2`` enters through its gradient, added to each
    router's fp32 main gradient after the optimizer has gathered the gradients and before
    it clips them (``wrap_prepare_grads``), so clipping sees it as the local backend does.
    The gradient comes from ``routing.core.router_l2`` by autograd on the fp32 main values,
    never on bf16 model weights (they would quantise the small ``W - W_base``). With
    Megatron's distributed optimizer a rank holds a flat shard of a weight
    (``shard_range``); the penalty is a sum over elements, so shards add up exactly.

    Megatron reaches ``prepare_grads`` only from ``optimizer.step()``, under ``torch.no_grad``:
    the autograd graph of the penalty is built under ``torch.enable_grad``.

    The base weights are the routers' values at the first ``prepare_grads`` of a fresh run
    (``start_iteration`` 0), stored in ``path`` by global rank 0 and read back by every rank
    of every later start. Every rank takes them from its own full replica of the router
    weights, whether or not its optimizer shard covers a router (with the distributed
    optimizer, rank 0's shard often covers none). Not at construction: Bridge builds the
    model (and runs the pre-wrap hook that makes this anchor) on freshly initialised weights
    and loads the base checkpoint only afterwards.
    """

    def __init__(
        self, routers: Sequence[TopKRouter], strength: float, path: str | Path, start_iteration: int
    ) -> None:
        self.routers = list(routers)
        self.strength = float(strength)
        self.path = Path(path)
        self.start_iteration = int(start_iteration)
        self.base: list[Tensor] | None = None

    def capture_or_load(self) -> None:
        """Take the base weights once per process: stored ones on a resume, else the routers' own.

        Called by every rank at its first ``prepare_grads``; global rank 0 stores what it takes.
        """
        if self.base is not None:
            return
        if self.start_iteration > 0:
            if not self.path.is_file():
                raise RuntimeError(
                    f"resuming at iteration {self.start_iteration} but the Router-L2 base weights "
                    f"{self.path} are missing"
                )
            self.base = [w.float() for w in torch.load(self.path, map_location="cpu", weights_only=True)]
            return
        self.base = [router.weight.detach().float().cpu().clone() for router in self.routers]
        if not dist.is_initialized() or dist.get_rank() == 0:
            from workflow_scripts.atomic import atomic_path

            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(self.path) as tmp:
                torch.save(self.base, tmp)

    def add_gradients(self, parts: Sequence[tuple[Tensor | None, slice | None]]) -> float:
        """Add ``d(lambda * router_l2)/dW`` to each main parameter's ``.grad``; returns this rank's value.

        ``parts[l]`` is MoE layer ``l``'s fp32 main parameter (``None`` where this rank holds
        no shard) and the flat element range it covers (``None``: the whole weight).
        """
        self.capture_or_load()
        assert self.base is not None
        if len(parts) != len(self.base):
            raise ValueError(f"{len(parts)} main parameters for {len(self.base)} MoE layers")
        leaves, targets, owners = [], [], []
        with torch.enable_grad():
            for (main, span), base in zip(parts, self.base, strict=True):
                if main is None:
                    leaves.append(torch.zeros(0, requires_grad=True))
                    targets.append(torch.zeros(0))
                    owners.append(None)
                    continue
                target = base.to(main.device).reshape(-1)[span] if span is not None else base.to(main.device)
                leaves.append(main.detach().clone().float().requires_grad_(True))
                targets.append(target.reshape(main.shape))
                owners.append(main)
            value = self.strength * router_l2(leaves, targets)
            grads = torch.autograd.grad(value, leaves)
        for main, grad in zip(owners, grads, strict=True):
            if main is None:
                continue
            if main.grad is None:
                main.grad = grad.to(main.dtype)
            else:
                main.grad.add_(grad.to(main.grad.dtype))
        return float(value)
