"""The product's ``forward_step`` on Bridge's own micro-batches, Bridge-built model (Megatron environment).

For every registry condition: the product's ``ConfigContainer`` of a family's toy base, the
model Bridge's provider builds from it with the product's pre-wrap hook (routers swapped)
and the base weights loaded, Bridge's ``GPTSFTDatasetBuilder`` dataset of the chat dataset
the product writes, its ``collate_fn`` and Bridge's ``prepare_finetuning_batch`` (which
calls ``split_batch_into_microbatches``), the prior row ids reaching the step only through
the batch's ``metadata``. What differs from ``finetune()``: a plain ``DataLoader`` in split
order stands in for Bridge's batch sampler, and the step's losses are backpropagated one
micro-batch after another as Megatron's no-pipelining schedule does, without the
schedule's loss scaling (CPU: ``finetune()`` allocates on CUDA throughout).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")
pytestmark = pytest.mark.megatron

from tests import bridge_cpu  # noqa: E402

bridge_cpu.install()  # Bridge imports Transformer Engine unguarded in one place: stubbed first

import numpy as np  # noqa: E402
import torch  # noqa: E402
from megatron.bridge import AutoBridge  # noqa: E402
from megatron.bridge.data.batch_utils import prepare_finetuning_batch  # noqa: E402
from megatron.bridge.data.builders.gpt_sft import GPTSFTDatasetBuilder  # noqa: E402
from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer  # noqa: E402
from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer  # noqa: E402
from megatron.core.optimizer.optimizer import FP32Optimizer, MixedPrecisionOptimizer  # noqa: E402
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed  # noqa: E402

from tests.dag import TRAIN_SPEC as SPEC  # noqa: E402
from tests.dag import job_conditions  # noqa: E402
from tests.megatron_env import init_cpu_megatron  # noqa: E402
from tests.megatron_settings_table import paper_config  # noqa: E402
from tests.test_train_megatron_data import ROWS, SEQUENCE_LENGTH, FamilyRun, toy_training  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.routing.megatron import find_routers  # noqa: E402
from workflow_scripts.train.condition import expert_bias_update_rate  # noqa: E402
from workflow_scripts.train.megatron.dataset import bridge_chat_template  # noqa: E402
from workflow_scripts.train.megatron.entry import pre_wrap_hook  # noqa: E402
from workflow_scripts.train.megatron.settings import bridge_config  # noqa: E402
from workflow_scripts.train.megatron.spans import row_ids, span_table  # noqa: E402
from workflow_scripts.train.megatron.step import make_forward_step, routing_context  # noqa: E402

CONDITIONS = job_conditions(paper_config())
#: Every condition on Moonlight's architecture and template; on the other two families the
#: conditions whose step reads the prior rows and spans (their templates do not end like the toy's).
CASES = [("moonlight", name) for name in CONDITIONS] + [
    (family, name)
    for family in ("deepseek_v2_lite", "qwen3_30b_a3b")
    for name in ("rpb", "kl_base", "logit_l2")
]


@pytest.fixture(scope="module")
def runs() -> dict[str, FamilyRun]:
    """Each family's toy base and chat dataset, built once for all its conditions."""
    return {}


@pytest.fixture()
def patched_optimizers(monkeypatch):
    """Router-L2's hook patches ``prepare_grads`` process-wide; undone after each test."""
    for cls in (MixedPrecisionOptimizer, DistributedOptimizer, FP32Optimizer):
        if "prepare_grads" in vars(cls):
            monkeypatch.setattr(cls, "prepare_grads", vars(cls)["prepare_grads"])


def objective_of(condition: dict) -> Objective:
    """The condition's objective as the training entry point builds it (registry prior settings)."""
    config = paper_config()
    prior = config["prior"]
    return Objective.from_condition(
        condition,
        float(prior["clip_eps"]),
        float(prior["clip_c"]),
        bool(prior["bias_in_gate_weights"]),
        expert_bias_update_rate(config["training"]),
    )


def moe_layers(provider) -> int:
    """MoE layers of the model a provider builds (Bridge's Qwen3-MoE provider ignores HF's
    ``mlp_only_layers``, so the toy Qwen3 base's dense first layer is a MoE layer here)."""
    freq = provider.moe_layer_freq
    return sum(freq) if isinstance(freq, list) else len(range(0, provider.num_layers, freq))


def bridge_model(run: FamilyRun, objective: Objective) -> tuple[list, object, object]:
    """Bridge's model of the product config for ``objective``, routers swapped, base weights loaded.

    Returns the model chunks, the ``ConfigContainer`` and the routers' shared context.
    """
    cfg = bridge_config(
        run.base, run.work / "megatron_base", run.dataset_dir, run.work / "checkpoints",
        objective, toy_training(), ROWS, 42, None,
    )  # fmt: skip
    provider = cfg.model
    provider.cross_entropy_loss_fusion = False  # CPU: the recipe's fused loss is Transformer Engine's
    provider.finalize()  # what ConfigContainer.validate() does to the provider
    context = routing_context(objective, num_moe_layers=moe_layers(provider))
    hook = pre_wrap_hook(context, objective.router_l2, run.work / "router_base.pt", 0)
    provider.register_pre_wrap_hook(hook)
    chunks = provider.provide_distributed_model(wrap_with_ddp=False, use_cpu_initialization=True)
    AutoBridge.from_hf_pretrained(str(run.base)).load_hf_weights(chunks)
    return chunks, cfg, context


@pytest.mark.parametrize(("family", "condition"), CASES)
def test_forward_step_trains_every_condition_on_bridges_micro_batches(
    family, condition, runs, tmp_path_factory, patched_optimizers
):
    init_cpu_megatron()
    model_parallel_cuda_manual_seed(123)
    if family not in runs:
        runs[family] = FamilyRun(family, tmp_path_factory.mktemp(family))
    run = runs[family]
    objective = objective_of(CONDITIONS[condition])
    chunks, cfg, context = bridge_model(run, objective)
    (model,) = chunks
    model.train()

    cfg.tokenizer.chat_template = bridge_chat_template(run.tokenizer, run.prompts, run.answers)
    (dataset, _, _) = GPTSFTDatasetBuilder(cfg.dataset, build_tokenizer(cfg.tokenizer)).build()
    training = toy_training()
    loader = torch.utils.data.DataLoader(  # Bridge's sampler, too, drops a last partial global batch
        dataset, batch_size=training["global_batch_size"], collate_fn=dataset.collate_fn, drop_last=True
    )
    micro_batches = training["global_batch_size"] // training["micro_batch_size"]
    prior = np.random.default_rng(0).dirichlet(
        np.ones(SPEC.num_experts), size=(ROWS, 2, context.num_moe_layers)
    )
    table = span_table(run.tokenizer, run.prompts, run.answers, SEQUENCE_LENGTH, len(run.tokenizer))
    forward_step = make_forward_step(context, prior.astype(np.float32), table)

    state = SimpleNamespace(cfg=cfg)
    seen_rows, answer_tokens = [], 0.0
    for global_batch in loader:
        rows = row_ids(global_batch["metadata"], ROWS)
        iterator, _ = prepare_finetuning_batch(iter([global_batch]), micro_batches, SEQUENCE_LENGTH)
        for micro in np.split(rows, micro_batches):
            output, loss_fn = forward_step(state, iterator, model)
            assert context.has_batch == context.needs_prior
            if context.needs_prior:  # the prior rows of the micro-batch's own samples, from its metadata
                assert torch.equal(context._prior, torch.from_numpy(prior[micro].astype(np.float32)))
            loss, tokens, _ = loss_fn(output)
            assert torch.isfinite(loss)
            loss.backward()
            answer_tokens += float(tokens)
        seen_rows += rows.tolist()

    assert seen_rows == list(range(ROWS - ROWS % training["global_batch_size"]))
    assert answer_tokens > 0
    grads = [router.weight.grad for router in find_routers(chunks)]
    assert len(grads) == context.num_moe_layers
    assert all(grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0 for grad in grads)
