"""What the pipeline knows about each MoE family, in one place, keyed by transformers' ``model_type``.

The paper post-trains three router families: Moonlight-16B-A3B (``deepseek_v3``: sigmoid scores
with an expert correction bias and its auxiliary-loss-free update), DeepSeek-V2-Lite
(``deepseek_v2``: softmax, greedy top-k) and Qwen3-30B-A3B-Base (``qwen3_moe``: softmax,
renormalised top-k). Every stage that must know a family reads it here: the toy models
(``modeling.toy``), the routing hooks (``routing.hf``), the router probabilities of the auxiliary
terms (``modeling.objective``), the toy tokenizers (``models.cli``) and the cut of a hub
checkpoint (``models.cut``). Megatron-Bridge picks its provider from the checkpoint's config, so
the Megatron backend needs no entry of its own. docs/layout.md says what a fourth family adds.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from workflow_scripts.errors import UserInputError


@dataclass(frozen=True)
class Family:
    """One MoE family as transformers 5.x implements it.

    Attributes:
        model_type: transformers' ``model_type`` (the registry's ``architecture``).
        causal_lm: the ``*ForCausalLM`` class.
        router: the class of ``model.model.layers[i].mlp.gate``.
        score_function: ``sigmoid`` or ``softmax`` (vLLM's ``scoring_func``); the auxiliary terms
            read sigmoid scores normalised over the experts as the router's distribution.
        expert_bias: whether the gate carries an expert (correction) bias that the
            auxiliary-loss-free rule updates (``e_score_correction_bias``).
        topk_method: the legacy ``topk_method`` key vLLM reads (None: the family has none).
        routed_scaling: the default ``routed_scaling_factor`` (None: the family has none).
        first_dense_default: transformers' default number of dense layers before the first MoE
            layer (``first_k_dense_replace``; Qwen3-MoE marks dense layers by ``mlp_only_layers``).
        tokenizer_module: the module that writes the family's tokenizer files as its hub ships
            them (``toy_tokenizer``) and knows the model's vocabulary size beside it
            (``model_vocab_size``).
    """

    model_type: str
    causal_lm: str
    router: str
    score_function: str
    expert_bias: bool
    topk_method: str | None
    routed_scaling: float | None
    first_dense_default: int
    tokenizer_module: str

    @property
    def modeling_module(self) -> str:
        """transformers' modeling module of the family."""
        return f"transformers.models.{self.model_type}.modeling_{self.model_type}"

    def router_class(self) -> type:
        """The gate class (imports transformers' modeling module on first use)."""
        return getattr(importlib.import_module(self.modeling_module), self.router)

    def tokenizers(self) -> Any:
        """The family's tokenizer module (``toy_tokenizer``, ``model_vocab_size``)."""
        return importlib.import_module(self.tokenizer_module)


FAMILIES: dict[str, Family] = {
    family.model_type: family
    for family in (
        Family(
            model_type="deepseek_v3",
            causal_lm="DeepseekV3ForCausalLM",
            router="DeepseekV3TopkRouter",
            score_function="sigmoid",
            expert_bias=True,
            topk_method="noaux_tc",
            routed_scaling=2.5,
            first_dense_default=3,
            tokenizer_module="workflow_scripts.modeling.moonlight",
        ),
        Family(
            model_type="deepseek_v2",
            causal_lm="DeepseekV2ForCausalLM",
            router="DeepseekV2TopkRouter",
            score_function="softmax",
            expert_bias=False,
            topk_method="greedy",
            routed_scaling=1.0,
            first_dense_default=0,
            tokenizer_module="workflow_scripts.modeling.deepseek_v2",
        ),
        Family(
            model_type="qwen3_moe",
            causal_lm="Qwen3MoeForCausalLM",
            router="Qwen3MoeTopKRouter",
            score_function="softmax",
            expert_bias=False,
            topk_method=None,
            routed_scaling=None,
            first_dense_default=0,
            tokenizer_module="workflow_scripts.modeling.qwen3",
        ),
    )
}

#: The supported ``model_type`` values, in the paper's order.
ARCHITECTURES: tuple[str, ...] = tuple(FAMILIES)


def family(model_type: str | None) -> Family:
    """The family of ``model_type``; an unknown one is refused naming the known ones."""
    if model_type not in FAMILIES:
        raise UserInputError(f"unknown MoE family {model_type!r}; known: {', '.join(ARCHITECTURES)}")
    return FAMILIES[model_type]
