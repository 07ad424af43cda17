"""Megatron-Core's load-balancing loss under tensor + sequence parallelism with a padding mask: a probe.

    torchrun --standalone --nproc-per-node {1,2} -m tests.megatron_load_balancing_tp OUT

One process is the reference; two form a tensor-parallel group of 2 with sequence parallelism,
each routing its half of the same sequences, as Megatron's MoE layer hands them to the router.
Per-token loss is on (``calculate_per_token_loss``, as in the product's runs). Each case routes
one batch, back-propagates the attached auxiliary losses alone and sums the router weight's
gradient over the group, as ``finalize_model_grads`` does for a ``sequence_parallel`` weight:

* ``megatron_unmasked`` / ``megatron_masked``: Megatron-Core's own ``TopKRouter`` with
  ``aux_loss``, without a padding mask and with one that marks no token as padding (the same
  tokens, so the same loss). Each call's ``valid_token_count`` (the token count Megatron
  multiplies the attached loss by under per-token loss) is recorded too.
* ``project_aux_loss`` / ``project_seq_aux_loss``: the product's ``PriorBiasedRouter`` (stock
  routing, no prior) with ``aux_loss`` / ``seq_aux_loss`` on sequences whose padding falls
  unevenly on the two ranks, its gradient scaled by ``aux_loss_correction`` as the product's
  forward step scales it (``step.routed_tokens``).

Rank 0 writes ``{case: {"grad": (E, H) summed gradient, "counts": [per rank, per call]}}`` to OUT
(``torch.save``; counts of the ``megatron_`` cases only), which
``tests/test_megatron_load_balancing_tp.py`` compares across the two world sizes.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch

SEQ, BATCH, HIDDEN, EXPERTS, TOP_K = 8, 2, 16, 8, 2
COEFFICIENT = 1e-2
#: (B, S), true on padding: the last 3 tokens of sequence 0, all on rank 1 under TP 2.
PADDING = torch.zeros(BATCH, SEQ, dtype=torch.bool)
PADDING[0, -3:] = True


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's hidden states ``(S, B, H)`` and the router weight ``(E, H)``."""
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(SEQ, BATCH, HIDDEN, generator=generator)
    weight = torch.randn(EXPERTS, HIDDEN, generator=generator) * 0.5
    return hidden, weight


def build_router(balancing: str, tensor: int) -> Any:
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.router import TopKRouter
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=1,
        hidden_size=HIDDEN,
        num_attention_heads=4,
        use_cpu_initialization=True,
        add_bias_linear=False,
        params_dtype=torch.float32,
        tensor_model_parallel_size=tensor,
        sequence_parallel=tensor > 1,
        num_moe_experts=EXPERTS,
        moe_router_topk=TOP_K,
        moe_router_load_balancing_type=balancing,
        moe_aux_loss_coeff=COEFFICIENT,
        moe_router_dtype="fp32",
        calculate_per_token_loss=True,
    )
    router = TopKRouter(config=config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    router.set_layer_number(1)
    router.train()
    with torch.no_grad():
        router.weight.copy_(inputs()[1])
    return router


def record_counts(router: Any, counts: list) -> None:
    """Record each attachment's ``valid_token_count`` (an instance wrapper: the class stays Megatron's)."""
    attach = router.attach_and_log_load_balancing_loss

    @functools.wraps(attach)
    def recording(*args: Any, valid_token_count: Any = None, **kwargs: Any) -> Any:
        counts.append(None if valid_token_count is None else float(valid_token_count))
        return attach(*args, valid_token_count=valid_token_count, **kwargs)

    router.attach_and_log_load_balancing_loss = recording


def summed_gradient(router: Any, padding: torch.Tensor | None, rank: int, tensor: int) -> torch.Tensor:
    """Route this rank's chunk, back-propagate the attached losses only, sum the weight's gradient over TP."""
    import torch.distributed as dist

    hidden, _ = inputs()
    chunk = SEQ // tensor
    rows = slice(rank * chunk, (rank + 1) * chunk)
    mask = None if padding is None else padding.transpose(0, 1)[rows].contiguous()  # (S_local, B)
    probs, _ = router(hidden[rows].contiguous(), padding_mask=mask)
    (probs * 0).sum().backward()  # only the attached losses reach the weight
    grad = router.weight.grad.detach().clone()
    if tensor > 1:
        dist.all_reduce(grad)  # the sequence-parallel weight's reduction over the TP group
    return grad


def run_case(name: str, rank: int, tensor: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch import nn

    from workflow_scripts.routing.megatron import MegatronRoutingContext, aux_loss_correction, install
    from workflow_scripts.train.megatron.step import routed_tokens

    counts: list = []
    if name.startswith("megatron_"):
        router = build_router("aux_loss", tensor)
        record_counts(router, counts)
        padding = None if name == "megatron_unmasked" else torch.zeros_like(PADDING)
    else:
        router = build_router(name.removeprefix("project_"), tensor)
        context = MegatronRoutingContext(num_moe_layers=1)
        install(nn.ModuleList([router]), context)
        padding = PADDING
        answer_tokens = float((~PADDING).sum())  # every real token carries loss here
        context.aux_loss_scale = aux_loss_correction(
            answer_tokens, 1, routed_tokens(PADDING, rank, tensor, tensor > 1)
        )
    grad = summed_gradient(router, padding, rank, tensor)
    every = [None] * tensor
    dist.all_gather_object(every, counts)
    return {"grad": grad, "counts": every}


CASES = ("megatron_unmasked", "megatron_masked", "project_aux_loss", "project_seq_aux_loss")


def main(argv: list[str]) -> int:
    import torch.distributed as dist
    from megatron.core import parallel_state

    torch.cuda.current_device = lambda: "cpu"  # the router's buffers ask for the current CUDA device
    dist.init_process_group("gloo")
    tensor = dist.get_world_size()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tensor)
    rank = parallel_state.get_tensor_model_parallel_rank()
    records = {name: run_case(name, rank, tensor) for name in CASES}
    if dist.get_rank() == 0:
        torch.save(records, argv[0])
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
