"""Megatron-Bridge 0.6.2 on CPU for tests, without Transformer Engine: the adaptations, in one place.

Bridge and Megatron-Core assume CUDA and Transformer Engine in a few places the import,
export and forward of a toy model touch. ``install()`` adapts exactly those, in this process
only (nothing in site-packages, nothing in ``workflow_scripts``):

1. ``torch.cuda.current_device`` returns ``"cpu"`` (router buffers, gating);
   ``torch.cuda.set_device`` and ``synchronize`` do nothing; a process group asked for NCCL
   is gloo (Bridge's import starts one on the local GPU).
2. ``megatron.bridge.peft.lora_layers`` is a stub of its four class names: it is Bridge's one
   unguarded ``import transformer_engine.pytorch`` (reached from the conversion code).
3. Every model provider, when finalised, builds Megatron-Core's local (non-TE) layer spec
   (``cpu_block_spec``, which also builds MLA without a query LoRA), the allgather token
   dispatcher (alltoall creates a CUDA stream), no grouped GEMM, no permute, router or
   gradient-accumulation fusion, fp32 parameters, CPU initialisation.
4. Core attention is ``SDPACoreAttention`` (PyTorch's SDPA): Megatron-Core's local
   ``DotProductAttention`` refuses MLA's separate key and value head sizes (DeepSeek families),
   where a GPU run uses Transformer Engine's.
5. The CUDA RNG tracker keeps CPU generator states (``model_parallel_cuda_manual_seed``), and
   ``torch.cuda.get_rng_state`` / ``set_rng_state`` are the CPU's (checkpoints store them).

A forward also needs an explicit causal mask (``causal_mask``): Megatron-Core's default mask
is allocated with ``device="cuda"``.

``python -m tests.bridge_cpu run <workflow_scripts arguments>`` runs a product command (e.g.
``train megatron-import ...``, exactly as its rule does) with these adaptations installed;
``python -m tests.bridge_cpu logits ...`` writes the logits of a Megatron checkpoint, and
``python -m tests.bridge_cpu train ...`` resumes one, trains a few steps and saves it.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

#: The class names other Bridge modules import from ``megatron.bridge.peft.lora_layers``.
LORA_LAYER_NAMES = ("LinearAdapter", "LoRALinear", "LoRATopKRouter", "TEFusedLoRALinear")

#: Provider fields set before a model is built: what runs on CPU without Transformer Engine.
CPU_PROVIDER_FIELDS: dict[str, Any] = {
    "moe_token_dispatcher_type": "allgather",
    "moe_grouped_gemm": False,
    "moe_permute_fusion": False,
    "gradient_accumulation_fusion": False,
    "moe_router_fusion": False,
    "moe_shared_expert_overlap": False,
    "bias_activation_fusion": False,
    "masked_softmax_fusion": False,
    "persist_layer_norm": False,
    "apply_rope_fusion": False,
    "fp16": False,
    "bf16": False,
    "params_dtype": torch.float32,
    "pipeline_dtype": torch.float32,
    "autocast_dtype": torch.float32,
    "use_cpu_initialization": True,
}


def _stub_lora_layers() -> None:
    module = types.ModuleType("megatron.bridge.peft.lora_layers")
    for name in LORA_LAYER_NAMES:
        setattr(module, name, type(name, (torch.nn.Module,), {}))
    sys.modules[module.__name__] = module


def _cpu_rng_tracker() -> None:
    from megatron.core.tensor_parallel import random

    def add(self: Any, name: str, seed: int) -> None:
        if seed in self.seeds_ or name in self.states_:
            raise RuntimeError(f"RNG state {name!r} or seed {seed} already added")
        self._is_initialized = True
        self.seeds_.add(seed)
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def fork(self: Any, name: str = random._MODEL_PARALLEL_RNG_TRACKER_NAME) -> Iterator[None]:
        if not self._is_initialized:  # Bridge's load context seeds only where CUDA is available
            random.model_parallel_cuda_manual_seed(0)
        outer = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)

    torch.cuda.get_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    torch.cuda.set_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    random.CudaRNGStatesTracker.add = add
    random.CudaRNGStatesTracker.fork = fork
    random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    random._set_cuda_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)


def cpu_block_spec(config: Any, vp_stage: int | None = None) -> Any:
    """Megatron-Core's local decoder block spec (dense and MoE layers), runnable for MLA too.

    The local MLA spec puts a query norm on ``linear_q_proj`` whenever ``qk_layernorm`` is set,
    which Megatron-Core refuses without ``q_lora_rank`` (DeepSeek-V2-Lite, Moonlight), and then
    asks for Transformer Engine's fused norm+linear for the query projection, which has no norm:
    here the query norm is the identity and the projection the spec's plain linear (``install``).
    """
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.identity_op import IdentityOp

    block = get_gpt_decoder_block_spec(config, use_transformer_engine=False, vp_stage=vp_stage)
    if config.multi_latent_attention and config.q_lora_rank is None:
        for layer in block.layer_specs:
            layer.submodules.self_attention.submodules.q_layernorm = IdentityOp
    _with_sequence_parallel_norms(block)
    return block


class SequenceParallelTorchNorm:
    """PyTorch's LayerNorm or RMSNorm as ``WrappedTorchNorm`` builds them, under sequence parallelism too.

    ``WrappedTorchNorm`` refuses sequence parallelism; Transformer Engine's norms (a GPU run's)
    mark their weights ``sequence_parallel``, so that ``finalize_model_grads`` sums their
    gradients over the tensor-parallel ranks, each of which normalised its own sequence chunk.
    """

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, **kwargs: Any) -> Any:
        norms = {"LayerNorm": torch.nn.LayerNorm, "RMSNorm": torch.nn.RMSNorm}
        norm = norms[config.normalization](hidden_size, eps=eps)
        for param in norm.parameters():
            param.sequence_parallel = config.sequence_parallel
        return norm


def _with_sequence_parallel_norms(spec: Any) -> None:
    """Replace every ``WrappedTorchNorm`` in a (nested) layer spec by ``SequenceParallelTorchNorm``."""
    import dataclasses

    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    if isinstance(spec, list | tuple):
        for item in spec:
            _with_sequence_parallel_norms(item)
        return
    if not dataclasses.is_dataclass(spec) or isinstance(spec, type):
        return
    for field in dataclasses.fields(spec):
        value = getattr(spec, field.name)
        if value is WrappedTorchNorm:
            setattr(spec, field.name, SequenceParallelTorchNorm)
        else:
            _with_sequence_parallel_norms(value)


def _cpu_providers() -> None:
    from megatron.bridge.models.transformer_config import MLATransformerConfig, TransformerConfig
    from megatron.bridge.utils.instantiate_utils import register_allowed_target_prefix

    register_allowed_target_prefix(__name__)  # checkpoints name cpu_block_spec in run_config.yaml

    def adapted(original: Any) -> Any:
        @functools.wraps(original)
        def finalize(self: Any) -> None:
            for name, value in CPU_PROVIDER_FIELDS.items():
                setattr(self, name, value)
            self.transformer_layer_spec = cpu_block_spec
            original(self)

        return finalize

    # MLA providers finalise through MLATransformerConfig's own finalize.
    for config_class in (TransformerConfig, MLATransformerConfig):
        config_class.finalize = adapted(config_class.finalize)


class SDPACoreAttention(torch.nn.Module):
    """Causal softmax attention by ``torch.nn.functional.scaled_dot_product_attention``.

    Takes Megatron's core-attention arguments (MLA passes ``k_channels``/``v_channels`` and its
    own ``softmax_scale``); inputs are ``(S, B, H, D)``, the output ``(S, B, H * D_v)``.
    """

    def __init__(
        self,
        config: Any,
        layer_number: int,
        attn_mask_type: Any,
        attention_type: str,
        softmax_scale: float | None = None,
        k_channels: int | None = None,
        v_channels: int | None = None,
        **unused: Any,
    ) -> None:
        super().__init__()
        default_scale = (k_channels or config.kv_channels) ** -0.5
        self.softmax_scale = default_scale if softmax_scale is None else softmax_scale
        self.hidden_size_per_attention_head_v = v_channels or config.kv_channels

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **unused: Any,
    ) -> torch.Tensor:
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # (B, H, S, D)
        out = torch.nn.functional.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=None if attention_mask is None else ~attention_mask,  # Megatron: True = masked
            is_causal=attention_mask is None,
            scale=self.softmax_scale,
            enable_gqa=True,
        )
        seq, batch = out.shape[2], out.shape[0]
        return out.permute(2, 0, 1, 3).reshape(seq, batch, -1)  # (S, B, H * D_v)


def _gloo_for_nccl() -> None:
    import torch.distributed as dist

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(backend: str | None = None, *args: Any, **kwargs: Any) -> None:
        original("gloo" if backend in (None, "nccl") else backend, *args, **kwargs)

    dist.init_process_group = init_process_group


def install() -> None:
    """Apply every adaptation once; idempotent."""
    if getattr(install, "done", False):
        return
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.set_device = lambda *args, **kwargs: None
    torch.cuda.synchronize = lambda *args, **kwargs: None
    _gloo_for_nccl()
    _stub_lora_layers()
    _cpu_rng_tracker()
    _cpu_providers()
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.transformer.mla_qk_norm_config import QKNormConfigResolver

    LocalSpecProvider.core_attention = lambda self: SDPACoreAttention
    QKNormConfigResolver._mla_fused_linear_or_default = lambda self, spec, name: spec  # cpu_block_spec
    install.done = True  # type: ignore[attr-defined]


def causal_mask(seq: int) -> torch.Tensor:
    """Megatron's boolean attention mask ``(1, 1, S, S)``: True where a query may not attend."""
    return torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)[None, None]


def megatron_logits(hf_base: Path, megatron: Path, input_ids: np.ndarray) -> np.ndarray:
    """Float32 logits ``(B, S, V)`` of the Megatron checkpoint ``megatron`` (its newest iteration)."""
    from megatron.bridge import AutoBridge
    from megatron.bridge.training.model_load_save import temporary_distributed_context

    with temporary_distributed_context(backend="gloo"):
        bridge = AutoBridge.from_hf_pretrained(str(hf_base))
        (model,) = bridge.load_megatron_model(str(megatron), wrap_with_ddp=False)
        model.eval()
        tokens = torch.from_numpy(input_ids)  # (B, S)
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        with torch.no_grad():
            logits = model(tokens, positions, causal_mask(tokens.shape[1]))
    return logits.float().numpy()


def train_and_save(hf_base: Path, megatron: Path, out: Path, input_ids: np.ndarray, steps: int) -> np.ndarray:
    """Resume from a Megatron checkpoint, take SGD steps with the product's routers, save; the new logits.

    The model of ``megatron`` is loaded, its routers swapped to ``PriorBiasedRouter`` (as
    training's pre-wrap hook does; no batch context, so they route as stock), trained on the
    next-token loss of ``input_ids`` and written with Bridge's checkpoint writer to ``out``.
    """
    from megatron.bridge import AutoBridge
    from megatron.bridge.training.model_load_save import temporary_distributed_context
    from megatron.bridge.utils.instantiate_utils import register_allowed_target_prefix

    from workflow_scripts.routing.megatron import MegatronRoutingContext, find_routers, install

    register_allowed_target_prefix("workflow_scripts.routing.megatron.")  # as the export does
    with temporary_distributed_context(backend="gloo"):
        bridge = AutoBridge.from_hf_pretrained(str(hf_base))
        (model,) = bridge.load_megatron_model(str(megatron), wrap_with_ddp=False)
        install([model], MegatronRoutingContext(num_moe_layers=len(find_routers([model]))))
        tokens = torch.from_numpy(input_ids)  # (B, S)
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        mask = causal_mask(tokens.shape[1])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        model.train()
        for _ in range(steps):
            optimizer.zero_grad()
            logits = model(tokens, positions, mask)[:, :-1]  # (B, S - 1, V)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(tokens, positions, mask).float().numpy()
        tokenizer = {"trust_remote_code": True}  # Moonlight's tokenizer is remote code
        bridge.save_megatron_model(
            [model], str(out), hf_tokenizer_path=str(hf_base), hf_tokenizer_kwargs=tokenizer
        )
    return logits


def main(argv: list[str]) -> int:
    """``run <workflow_scripts arguments>``, ``logits HF_BASE MEGATRON IDS.npy OUT.npy`` or
    ``train HF_BASE MEGATRON OUT_MEGATRON IDS.npy OUT.npy STEPS``."""
    install()
    command, *rest = argv
    if command == "run":
        from workflow_scripts.cli import main as workflow_main

        return workflow_main(rest)
    if command == "logits":
        hf_base, megatron, ids, out = rest
        np.save(out, megatron_logits(Path(hf_base), Path(megatron), np.load(ids)))
    else:
        hf_base, megatron, trained, ids, out, steps = rest
        logits = train_and_save(Path(hf_base), Path(megatron), Path(trained), np.load(ids), int(steps))
        np.save(out, logits)
    return 0


if __name__ == "__main__":
    from tests import bridge_cpu  # this module under its import name, which checkpoints record

    sys.exit(bridge_cpu.main(sys.argv[1:]))
