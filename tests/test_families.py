"""Each family entry (workflow_scripts/families.py) against transformers' own classes and the toy models."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import transformers  # noqa: E402

from tests.dag import TRAIN_SPEC, toy_tokenizer  # noqa: E402
from workflow_scripts import families  # noqa: E402
from workflow_scripts.errors import UserInputError  # noqa: E402
from workflow_scripts.modeling.toy import build_toy_model  # noqa: E402


@pytest.mark.parametrize("model_type", families.ARCHITECTURES)
def test_each_entry_names_transformers_own_classes_and_defaults(model_type):
    family = families.family(model_type)
    config_class = transformers.AutoConfig.for_model(model_type).__class__
    assert config_class.model_type == model_type
    assert getattr(transformers, family.causal_lm).config_class is config_class
    assert family.router_class().__name__ == family.router
    if family.topk_method is not None:  # DeepSeek's layer layout: dense layers first
        assert config_class().first_k_dense_replace == family.first_dense_default
    module = family.tokenizers()
    assert callable(module.toy_tokenizer) and callable(module.model_vocab_size)


@pytest.mark.parametrize("model_type", families.ARCHITECTURES)
def test_a_toy_model_has_the_entrys_router_and_expert_bias(model_type):
    family = families.family(model_type)
    model = build_toy_model(model_type, TRAIN_SPEC, toy_tokenizer(), seed=0)
    gates = [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    assert gates and all(isinstance(gate, family.router_class()) for gate in gates)
    assert all(hasattr(gate, "e_score_correction_bias") == family.expert_bias for gate in gates)
    assert type(model).__name__ == family.causal_lm


def test_an_unknown_family_is_refused_naming_the_known_ones():
    with pytest.raises(UserInputError, match="unknown MoE family 'mixtral'; known: deepseek_v3, deepseek_v2"):
        families.family("mixtral")
