"""Router-L2 anchors to the base checkpoint's gate weights on a Bridge-built model, in ``finetune()``'s order.

Bridge's ``setup`` builds the model with the pre-wrap hooks on freshly initialised weights,
then the optimizer, then loads the base checkpoint (``checkpoint_manager.load``). Here: the
product's pre-wrap hook on a provider ``AutoBridge`` makes from a toy DeepSeek-V3 base
(Moonlight's architecture), then Bridge's HF weight loading stands in for the checkpoint
load, then the first ``prepare_grads`` of Megatron's ``FP32Optimizer`` as the product patches
it. The stored anchor must be the base's gate weights, and a resumed run must read it back.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")

import torch  # noqa: E402

from tests import bridge_cpu  # noqa: E402

bridge_cpu.install()  # Bridge imports Transformer Engine unguarded in one place: stubbed first

from megatron.bridge import AutoBridge  # noqa: E402
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer  # noqa: E402
from megatron.core.optimizer.optimizer import FP32Optimizer, MixedPrecisionOptimizer  # noqa: E402
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed  # noqa: E402

from tests.dag import TRAIN_SPEC as SPEC  # noqa: E402
from tests.dag import toy_tokenizer  # noqa: E402
from tests.megatron_env import init_cpu_megatron  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.modeling.toy import build_toy_model, router_modules, save_toy_base  # noqa: E402
from workflow_scripts.routing.megatron import find_routers  # noqa: E402
from workflow_scripts.train.megatron.entry import pre_wrap_hook  # noqa: E402
from workflow_scripts.train.megatron.settings import router_settings  # noqa: E402
from workflow_scripts.train.megatron.step import routing_context  # noqa: E402

pytestmark = pytest.mark.megatron

ROUTER_L2 = {"intervention": "router_l2", "params": {"lambda": 1.0e4}}


@pytest.fixture()
def patched_optimizers(monkeypatch):
    """The product patches ``prepare_grads`` process-wide; undone after the test."""
    for cls in (MixedPrecisionOptimizer, DistributedOptimizer, FP32Optimizer):
        if "prepare_grads" in vars(cls):
            monkeypatch.setattr(cls, "prepare_grads", vars(cls)["prepare_grads"])


def build_and_load(base, anchor_path, start: int) -> list:
    """Bridge's order: model with the product's pre-wrap hook, then the base weights loaded into it."""
    bridge = AutoBridge.from_hf_pretrained(str(base))
    provider = bridge.to_megatron_provider(load_weights=False)
    objective = Objective.from_condition(ROUTER_L2)
    for name, value in (router_settings(objective) | bridge_cpu.CPU_PROVIDER_FIELDS).items():
        setattr(provider, name, value)
    provider.finalize()  # what ConfigContainer.validate() does to the provider
    context = routing_context(objective, num_moe_layers=SPEC.num_moe_layers)
    provider.register_pre_wrap_hook(pre_wrap_hook(context, objective.router_l2, anchor_path, start))
    chunks = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)
    bridge.load_hf_weights(chunks)
    return chunks


def first_prepare_grads(chunks) -> None:
    """Megatron's ``FP32Optimizer.prepare_grads`` (fp32 training: the weights are the main params),
    under ``torch.no_grad`` as ``optimizer.step()`` calls it."""
    optimizer = FP32Optimizer.__new__(FP32Optimizer)  # its constructor allocates on CUDA
    optimizer.is_stub_optimizer = False
    optimizer.config = SimpleNamespace(timers=None)
    params = [p for chunk in chunks for p in chunk.parameters()]
    optimizer.optimizer = torch.optim.SGD(params, lr=0.0)
    for router in find_routers(chunks):
        router.weight.grad = torch.zeros_like(router.weight)
    with torch.no_grad():
        optimizer.prepare_grads()


def test_router_l2_anchor_is_the_base_checkpoints_gate_weights(tmp_path, patched_optimizers):
    init_cpu_megatron()
    model_parallel_cuda_manual_seed(123)
    tokenizer = toy_tokenizer()
    hf_model = build_toy_model("deepseek_v3", SPEC, tokenizer, 0)
    save_toy_base(hf_model, tokenizer, tmp_path / "base")
    gates = [module.weight.detach().float() for _, module in sorted(router_modules(hf_model).items())]
    anchor_path = tmp_path / "work" / "router_base.pt"

    chunks = build_and_load(tmp_path / "base", anchor_path, start=0)
    first_prepare_grads(chunks)
    anchor = torch.load(anchor_path, weights_only=True)
    assert len(anchor) == len(gates) == SPEC.num_moe_layers
    for stored, gate in zip(anchor, gates, strict=True):
        torch.testing.assert_close(stored, gate, rtol=0, atol=0)
    # The routers move; their gradient is lambda * d mean_l ||W_l - W_l^base||^2 / dW: zero at the base.
    assert all(float(router.weight.grad.abs().max()) == 0.0 for router in find_routers(chunks))

    # A resumed run (start > 0) reads the stored anchor, whatever its routers hold.
    resumed = build_and_load(tmp_path / "base", anchor_path, start=100)
    with torch.no_grad():
        for router in find_routers(resumed):
            router.weight.add_(1.0)
    first_prepare_grads(resumed)
    lam, layers = ROUTER_L2["params"]["lambda"], SPEC.num_moe_layers
    for router in find_routers(resumed):  # d/dW lambda * mean_l ||W_l - W_l^base||^2 at W = base + 1
        torch.testing.assert_close(router.weight.grad, torch.full_like(router.weight, 2 * lam / layers))
