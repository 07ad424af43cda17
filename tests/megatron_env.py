"""Megatron-Core on CPU for tests: a one-process gloo group and routers built from configs.

Megatron-Core assumes CUDA in two places the router touches (``gating`` moves weights to
``torch.cuda.current_device()``, buffers are allocated there); on CPU that call is pointed at
``"cpu"``. Nothing else is patched.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "megatron.core", reason="needs the Megatron-Core environment (envs/requirements-megatron-cpu.txt)"
)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state  # noqa: E402
from megatron.core.process_groups_config import ProcessGroupCollection  # noqa: E402
from megatron.core.transformer.moe.router import TopKRouter  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402


def init_cpu_megatron() -> None:
    """A world of one process (gloo), all parallel sizes 1; idempotent."""
    torch.cuda.current_device = lambda: "cpu"
    if not dist.is_initialized():  # an in-memory store: no port that a concurrent test run could hold
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1, expert_model_parallel_size=1)


def build_router(fields: dict[str, Any], layer_number: int) -> TopKRouter:
    """A ``TopKRouter`` of a tiny fp32 ``TransformerConfig`` with the given MoE fields."""
    config = TransformerConfig(
        num_layers=4,
        hidden_size=fields.pop("hidden_size"),
        num_attention_heads=4,
        use_cpu_initialization=True,
        add_bias_linear=False,  # the paper models' routers have no bias
        params_dtype=torch.float32,
        **fields,
    )
    router = TopKRouter(config=config, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
    router.set_layer_number(layer_number)
    return router.train()
