"""Toy model backend: tokenizer, chat template, span labels, the three router families, save/load."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from workflow_scripts import families  # noqa: E402
from workflow_scripts.modeling import tokenizer as tk  # noqa: E402
from workflow_scripts.modeling import toy  # noqa: E402

VOCAB = 512
SPEC = toy.ToyModelSpec()  # hidden 64, 4 layers (first dense), 16 experts, top-4


def corpus() -> list[str]:
    """A small deterministic mixed math / code / prose corpus."""
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "qu", "ph", "st"]
    words = [a + b + c for a in syllables for b in syllables[::2] for c in ["", "n", "r", "s"]]
    texts = []
    for i in range(600):
        a, b = (i * 7) % 97, (i * 13) % 89
        texts.append(f"Question {i}: what is {a} + {b}? The answer is {a + b}.")
        texts.append(f"def f_{i % 17}(x):\n    return x * {a} - {b}\n")
        texts.append(" ".join(words[(i * 5 + j * j) % len(words)] for j in range(16)) + ".")
    return texts


@pytest.fixture(scope="module")
def tokenizer():
    return tk.train_tokenizer(corpus(), VOCAB)


@pytest.fixture(scope="module")
def models(tokenizer):
    return {arch: toy.build_toy_model(arch, SPEC, tokenizer, seed=0) for arch in families.ARCHITECTURES}


def token_ids(tokenizer, n: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(len(tk.SPECIAL_TOKENS), len(tokenizer), (2, n), generator=gen)


# ----------------------------------------------------------------------------- tokenizer


def test_tokenizer_training_is_deterministic(tokenizer, tmp_path):
    again = tk.train_tokenizer(corpus(), VOCAB)
    tokenizer.save_pretrained(tmp_path / "a")
    again.save_pretrained(tmp_path / "b")
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert "tokenizer.json" in names
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_tokenizer_specials_and_size(tokenizer):
    assert len(tokenizer) == VOCAB
    assert tokenizer.convert_ids_to_tokens(list(range(len(tk.SPECIAL_TOKENS)))) == list(tk.SPECIAL_TOKENS)
    specials = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token)
    assert specials == ("<|bos|>", "<|eos|>", "<|pad|>")
    assert len({tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}) == 3
    text = "def f(x):\n    return x * 3  # héllo 🙂"
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_chat_template_and_generation_prompt(tokenizer):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    plain = tokenizer.apply_chat_template(messages, tokenize=False)
    assert plain == "<|bos|><|system|>Be brief.<|eos|><|user|>What is 2 + 2?<|eos|>"
    prompted = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompted == plain + "<|assistant|>"
    full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": "4"}], tokenize=False)
    assert full == prompted + "4<|eos|>"
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert ids[0] == tokenizer.bos_token_id
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|assistant|>")


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        ("What is 12 + 30?", "The answer is 42."),
        ("  leading spaces, héllo 🙂\nand a newline ", "def f(x):\n    return x  # ✓ done\n"),
    ],
)
def test_answer_span_mask_labels_exactly_prompt_and_answer(tokenizer, prompt, answer):
    ids, spans = tk.answer_span_mask(tokenizer, prompt, answer)
    assert len(ids) == len(spans)
    assert set(spans) <= {-1, 0, 1}
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}], tokenize=False
    )
    assert ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    # Q tokens, then A tokens, each contiguous; every special token is outside both spans.
    q = [i for i, s in enumerate(spans) if s == 0]
    a = [i for i, s in enumerate(spans) if s == 1]
    assert q == list(range(q[0], q[-1] + 1)) and a == list(range(a[0], a[-1] + 1))
    assert q[-1] < a[0]
    special = set(tokenizer.all_special_ids)
    assert all(s == -1 for i, s in zip(ids, spans, strict=True) if i in special)
    assert all(i in special for i, s in zip(ids, spans, strict=True) if s == -1)
    # Decoding the labelled tokens gives back the prompt and the answer.
    assert tokenizer.decode([ids[i] for i in q]) == prompt
    assert tokenizer.decode([ids[i] for i in a]) == answer


# ----------------------------------------------------------------------------- toy models


def test_spec_from_dict_and_validation():
    spec = toy.ToyModelSpec.from_dict({"hidden_size": 64, "num_layers": 4, "num_experts": 16, "top_k": 4})
    assert spec == SPEC
    assert toy.ToyModelSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.top_k = 2  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown"):
        toy.ToyModelSpec.from_dict({"hidden": 64})
    with pytest.raises(ValueError, match="top_k"):
        toy.ToyModelSpec(num_experts=4, top_k=6)
    with pytest.raises(ValueError, match="architecture"):
        toy.toy_config("mixtral", SPEC, VOCAB)


@pytest.mark.parametrize("arch", families.ARCHITECTURES)
def test_config_routing_fields(arch):
    config = toy.toy_config(arch, SPEC, VOCAB, bos_token_id=0, eos_token_id=1, pad_token_id=2)
    assert config.model_type == arch
    assert config.num_experts_per_tok == SPEC.top_k
    assert config.rope_theta == SPEC.rope_theta
    if arch == "deepseek_v3":
        assert (config.n_group, config.topk_group, config.first_k_dense_replace) == (1, 1, 1)
        assert config.norm_topk_prob is True and config.routed_scaling_factor == 2.5
        assert config.n_shared_experts == SPEC.shared_experts
        assert (config.scoring_func, config.topk_method) == ("sigmoid", "noaux_tc")
    elif arch == "deepseek_v2":
        assert (config.scoring_func, config.topk_method) == ("softmax", "greedy")
        assert config.norm_topk_prob is False and config.n_shared_experts == SPEC.shared_experts
    else:
        assert config.decoder_sparse_step == 1 and config.norm_topk_prob is True
        assert config.num_experts == SPEC.num_experts and config.mlp_only_layers == [0]


@pytest.mark.parametrize("arch", families.ARCHITECTURES)
def test_model_structure_and_forward(arch, models, tokenizer):
    model = models[arch]
    layers = toy.moe_layer_indices(model)
    assert layers == list(range(SPEC.first_dense_layers, SPEC.num_layers))
    assert model.config.vocab_size == len(tokenizer)
    gates = toy.router_modules(model)
    for gate in gates.values():
        assert type(gate).__name__ == families.family(arch).router
        assert tuple(gate.weight.shape) == (SPEC.num_experts, SPEC.hidden_size)
        assert gate.top_k == SPEC.top_k
    if arch == "deepseek_v3":
        assert all(tuple(g.e_score_correction_bias.shape) == (SPEC.num_experts,) for g in gates.values())
    ids = token_ids(tokenizer, 24)
    with torch.no_grad():
        out = model(input_ids=ids, output_router_logits=True)
        assert tuple(out.logits.shape) == (2, 24, len(tokenizer))
        assert out.router_logits is not None and len(out.router_logits) == len(layers)
        assert all(tuple(r.shape) == (2 * 24, SPEC.num_experts) for r in out.router_logits)
        # The gate's own outputs: k experts per token with the family's weighting.
        hidden = torch.randn(10, SPEC.hidden_size)
        logits, weights, indices = gates[layers[0]](hidden)
    assert tuple(indices.shape) == tuple(weights.shape) == (10, SPEC.top_k)
    assert all(len(set(row)) == SPEC.top_k for row in indices.tolist())
    total = weights.sum(-1)
    if arch == "deepseek_v3":
        assert torch.allclose(total, torch.full_like(total, model.config.routed_scaling_factor))
        assert torch.allclose(
            weights / total[:, None],
            torch.sigmoid(logits).gather(1, indices)
            / (torch.sigmoid(logits).gather(1, indices).sum(-1, keepdim=True)),
        )
    elif arch == "deepseek_v2":
        assert torch.allclose(weights, torch.softmax(logits, -1).gather(1, indices))
    else:
        assert torch.allclose(total, torch.ones_like(total))


def test_qwen3_aux_loss_with_labels(models, tokenizer):
    ids = token_ids(tokenizer, 16)
    with torch.no_grad():
        out = models["qwen3_moe"](input_ids=ids, labels=ids, output_router_logits=True)
    assert out.aux_loss is not None and torch.isfinite(out.loss)


@pytest.mark.parametrize("arch", families.ARCHITECTURES)
def test_save_load_round_trip(arch, models, tokenizer, tmp_path):
    model = models[arch].eval()
    out_dir = tmp_path / "base"
    toy.save_toy_base(model, tokenizer, out_dir)
    toy.save_toy_base(model, tokenizer, out_dir)  # replacing an existing checkpoint
    assert [p.name for p in tmp_path.iterdir()] == ["base"]  # no temporary siblings left
    saved = json.loads((out_dir / "config.json").read_text())
    for key, value in toy.legacy_vllm_keys(arch, SPEC).items():
        assert saved[key] == value, key
    if arch == "qwen3_moe":
        assert saved["num_experts"] == SPEC.num_experts
    else:
        assert saved["topk_method"] == ("noaux_tc" if arch == "deepseek_v3" else "greedy")
        assert saved["scoring_func"] == ("sigmoid" if arch == "deepseek_v3" else "softmax")
    loaded, loaded_tok = toy.load_local(out_dir)
    loaded.eval()
    assert type(loaded).__name__ == type(model).__name__
    assert loaded_tok.get_vocab() == tokenizer.get_vocab()
    assert loaded_tok.chat_template == tokenizer.chat_template
    assert toy.moe_layer_indices(loaded) == toy.moe_layer_indices(model)
    ids = token_ids(tokenizer, 32, seed=1)
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, loaded(input_ids=ids).logits)
    ref, got = model.state_dict(), loaded.state_dict()
    assert ref.keys() == got.keys()
    assert all(torch.equal(ref[k], got[k]) for k in ref)


@pytest.mark.parametrize("arch", families.ARCHITECTURES)
def test_seeded_init(arch, models, tokenizer):
    same = toy.build_toy_model(arch, SPEC, tokenizer, seed=0).state_dict()
    other = toy.build_toy_model(arch, SPEC, tokenizer, seed=1).state_dict()
    ref = models[arch].state_dict()
    assert all(torch.equal(ref[k], same[k]) for k in ref)
    gate_keys = [k for k in ref if k.endswith("mlp.gate.weight")]
    assert gate_keys and all(not torch.equal(ref[k], other[k]) for k in gate_keys)
    assert not torch.equal(ref["model.embed_tokens.weight"], other["model.embed_tokens.weight"])
