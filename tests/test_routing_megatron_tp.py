"""The router terms Megatron's routers attach under tensor + sequence parallelism: two ranks add up to one.

Two gloo processes form a tensor-parallel group of 2 with sequence parallelism; each routes
its half of the sequence. Megatron sums the router weight's gradient over the group (the
weight is marked ``sequence_parallel``); that sum must equal the gradient of the loss on the
whole sequence computed directly with ``routing.core``. The terms: every registry term the
routers attach (the span-token means KL-to-base and logit-L2), and a throwaway routed-token mean.
"""

from __future__ import annotations

import os
import socket

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron-Core environment (docs/training.md)")
pytestmark = pytest.mark.megatron

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402

from tests.dag import router_terms  # noqa: E402
from tests.test_routing_megatron import _collision_probability  # noqa: E402
from workflow_scripts.registry import RouterTerm  # noqa: E402
from workflow_scripts.routing import core  # noqa: E402
from workflow_scripts.routing.megatron import MEGATRON_NATIVE_TERMS  # noqa: E402

SEQ, BATCH, HIDDEN, EXPERTS, TOP_K = 8, 2, 16, 8, 2
TERMS = (
    *((term, 0.1) for name, term in router_terms().items() if name not in MEGATRON_NATIVE_TERMS),
    (RouterTerm("collision", prior=False, layers="mean"), 0.5),
)


def _inputs():
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(SEQ, BATCH, HIDDEN, generator=generator)
    weight = torch.randn(EXPERTS, HIDDEN, generator=generator) * 0.5
    prior = torch.rand(BATCH, 2, 1, EXPERTS, generator=generator) + 0.2
    prior = prior / prior.sum(-1, keepdim=True)
    spans = torch.full((BATCH, SEQ), -1)
    spans[0, 1:4], spans[0, 4:8], spans[1, 0:6] = 0, 1, 1  # uneven span tokens per rank
    return hidden, weight, prior, spans


def _reference_grad() -> torch.Tensor:
    hidden, weight, prior, spans = _inputs()
    weight = weight.clone().requires_grad_(True)
    z = hidden.reshape(-1, HIDDEN) @ weight.T  # (S*B, E), row s*B + b
    rows = core.span_bias_per_token(prior[:, :, 0], spans).transpose(0, 1).reshape(-1, EXPERTS)
    mask = (spans.T >= 0).reshape(-1)
    layer = core.RouterLayer(z, TOP_K, "softmax", torch.ones_like(mask), rows, mask)
    core.ROUTER_TERM_LOSSES.setdefault("collision", _collision_probability)
    sum(weight * core.ROUTER_TERM_LOSSES[term.name](layer) for term, weight in TERMS).backward()
    return weight.grad


def _rank(rank: int, port: int, out: str) -> None:
    from megatron.core import parallel_state
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.transformer.moe.router import TopKRouter
    from megatron.core.transformer.transformer_config import TransformerConfig

    from workflow_scripts.routing.megatron import MegatronRoutingContext, install, sequence_parallel_slice

    torch.cuda.current_device = lambda: "cpu"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
    config = TransformerConfig(
        num_layers=2,
        hidden_size=HIDDEN,
        num_attention_heads=4,
        use_cpu_initialization=True,
        add_bias_linear=False,
        params_dtype=torch.float32,
        tensor_model_parallel_size=2,
        sequence_parallel=True,
        num_moe_experts=EXPERTS,
        moe_router_topk=TOP_K,
        moe_router_load_balancing_type="none",
        moe_aux_loss_coeff=0.0,
        moe_router_dtype="fp32",
    )
    router = TopKRouter(config=config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    router.set_layer_number(1)
    router.train()
    hidden, weight, prior, spans = _inputs()
    with torch.no_grad():
        router.weight.copy_(weight)
    core.ROUTER_TERM_LOSSES.setdefault("collision", _collision_probability)
    context = MegatronRoutingContext(num_moe_layers=1, terms=TERMS)
    install(nn.ModuleList([router]), context)
    context.set_batch(prior, sequence_parallel_slice(spans, rank, 2))
    half = SEQ // 2
    probs, _ = router(hidden[rank * half : (rank + 1) * half].contiguous())
    (probs * 0).sum().backward()  # only the attached losses reach the weight
    grad = router.weight.grad.clone()
    dist.all_reduce(grad)  # what Megatron does for a sequence-parallel weight
    if rank == 0:
        torch.save(grad, out)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sequence_parallel_ranks_sum_to_the_whole_sequence_loss(tmp_path):
    out = str(tmp_path / "grad.pt")
    mp.spawn(_rank, args=(_free_port(), out), nprocs=2, join=True)
    torch.testing.assert_close(torch.load(out), _reference_grad(), rtol=1e-5, atol=1e-7)
