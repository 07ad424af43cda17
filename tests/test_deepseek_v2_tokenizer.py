"""The toy DeepSeek-V2's tokenizer: DeepSeek-V2-Lite's ``LlamaTokenizerFast`` files as its hub ships them.

Checked against independent references: ``tokenizers`` reading the saved ``tokenizer.json`` itself
(the file the hub ships, with no transformers class around it), the hub's special-token layout
(bos and eos the two ids above the BPE, as 100,000 and 100,001), and Q/A spans computed from the
row spelled out by hand from DeepSeek-V2-Lite's template text, labelled with the reference's offsets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tokenizers import Tokenizer  # noqa: E402

from tests.tokenizer_cases import offset_reference_spans, rows_with  # noqa: E402
from workflow_scripts.evaluate.generation import stop_ids  # noqa: E402
from workflow_scripts.modeling import deepseek_v2  # noqa: E402
from workflow_scripts.modeling import tokenizer as tk  # noqa: E402
from workflow_scripts.modeling.batches import Example, encode_rows, labels_for  # noqa: E402
from workflow_scripts.train.megatron.vocabulary import check_vocabulary, named_token_ids  # noqa: E402

BOS, EOS = deepseek_v2.BOS_TOKEN, deepseek_v2.EOS_TOKEN


@pytest.fixture(scope="module")
def rows() -> list[tuple[str, str]]:
    """The shared rows, and DeepSeek's template text and eos inside the texts."""
    return rows_with(("User: quoted", f"Assistant: said {EOS} early"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory, rows) -> Path:
    texts = [text for pair in rows for text in pair] * 3
    return deepseek_v2.write_tokenizer(tmp_path_factory.mktemp("deepseek_v2"), texts, 400)


@pytest.fixture(scope="module")
def tokenizer(folder):
    return tk.load_tokenizer(folder)


@pytest.fixture(scope="module")
def reference(folder) -> Tokenizer:
    """The saved ``tokenizer.json`` read by ``tokenizers`` alone."""
    return Tokenizer.from_file(str(folder / "tokenizer.json"))


def test_the_config_is_the_hubs_and_transformers_loads_the_byte_level_file_as_it_is(tokenizer, folder):
    """The hub names LlamaTokenizerFast; transformers 5.24 loads its byte-level tokenizer.json as it is."""
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "LlamaTokenizerFast"
    assert (config["add_bos_token"], config["add_eos_token"], config["unk_token"]) == (True, False, None)
    assert {config[k]["content"] for k in ("bos_token", "eos_token", "pad_token")} == {BOS, EOS}
    assert config["pad_token"]["content"] == EOS and config["chat_template"] == deepseek_v2.CHAT_TEMPLATE
    assert sorted(p.name for p in folder.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert type(tokenizer).__name__ == "TokenizersBackend" and tokenizer.is_fast
    assert (
        tokenizer.backend_tokenizer.to_str() == Tokenizer.from_file(str(folder / "tokenizer.json")).to_str()
    )


def test_llamas_own_class_would_tokenize_the_byte_level_file_differently(tokenizer, folder):
    """What the class name hides: LlamaTokenizer rebuilds a Metaspace pipeline over the same vocabulary.

    Every environment's transformers (5.24, the vLLM environment's 5.19, Megatron's 5.12.1)
    routes the name over a byte-level file to ``TokenizersBackend``; this is what that routing avoids.
    """
    from transformers import LlamaTokenizer

    llama = LlamaTokenizer.from_pretrained(str(folder), local_files_only=True)
    text = "naïve words, spaced out"
    ids = llama(text, add_special_tokens=False)["input_ids"]
    assert ids != tokenizer(text, add_special_tokens=False)["input_ids"]
    assert (
        llama.decode(ids) != text == tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"])
    )


def test_bos_and_eos_sit_above_the_bpe_and_the_model_has_more_rows(tokenizer, reference):
    """100,000 BPE tokens, bos 100,000, eos 100,001 (pad), 102,400 rows in the real one."""
    bpe = reference.get_vocab_size(with_added_tokens=False)
    assert len(tokenizer) == bpe + 2 == reference.get_vocab_size(with_added_tokens=True)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (bpe, bpe + 1, bpe + 1)
    assert tokenizer.unk_token_id is None and sorted(tokenizer.all_special_ids) == [bpe, bpe + 1]
    rows = deepseek_v2.model_vocab_size(tokenizer)
    assert rows > len(tokenizer) and rows % 128 == 0
    assert max(named_token_ids(tokenizer)) < rows


def test_a_plain_encode_adds_bos_as_add_bos_token_says_and_never_eos(tokenizer, reference):
    text = "the sum of 12 and 30"
    plain = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert plain == reference.encode(text, add_special_tokens=False).ids
    assert tokenizer(text)["input_ids"] == [tokenizer.bos_token_id, *plain]
    assert tokenizer(text)["input_ids"] == reference.encode(text).ids


def test_tokens_are_the_files_own_on_every_row(tokenizer, reference, rows):
    texts = [text for pair in rows for text in pair] + [f"{BOS}x{EOS}y", "中文 한국어 ａｂｃ"]
    for text in texts:
        want = reference.encode(text, add_special_tokens=False).ids
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == want, text[:40]
        if BOS not in text and EOS not in text:
            assert tokenizer.decode(want) == text


def test_the_template_renders_deepseeks_pieces(tokenizer):
    turn = [{"role": "user", "content": "q"}]
    assert tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True) == (
        f"{BOS}User: q\n\nAssistant:"
    )
    row = [*turn, {"role": "assistant", "content": "a"}]
    assert tokenizer.apply_chat_template(row, tokenize=False) == f"{BOS}User: q\n\nAssistant: a{EOS}"
    system = [{"role": "system", "content": "s"}, *row]
    assert tokenizer.apply_chat_template(system, tokenize=False) == f"{BOS}s\n\nUser: q\n\nAssistant: a{EOS}"


def _reference_spans(reference: Tokenizer, prompt: str, answer: str) -> tuple[list[int], list[int]]:
    """The row spelled from DeepSeek-V2-Lite's template text."""
    special = {reference.token_to_id(BOS), reference.token_to_id(EOS)}
    return offset_reference_spans(
        reference, special, (f"{BOS}User: ", "\n\nAssistant: ", EOS), prompt, answer
    )


def test_span_labels_are_the_references_and_a_cut_keeps_a_prefix(tokenizer, reference, rows):
    for prompt, answer in rows:
        ids, spans = tk.answer_span_mask(tokenizer, prompt, answer)
        assert (ids, spans) == _reference_spans(reference, prompt, answer), (prompt, answer)
        assert tk.answer_span_mask(tokenizer, prompt, answer, max_length=9) == (ids[:9], spans[:9])
        if EOS not in answer:
            # The template's space before each text joins its first word: decoded, it leads.
            decoded = {
                s: tokenizer.decode([t for t, x in zip(ids, spans, strict=True) if x == s]) for s in (0, 1)
            }
            assert (
                decoded[tk.Q_SPAN].strip() == prompt.strip() and decoded[tk.A_SPAN].strip() == answer.strip()
            )


def test_the_turn_closes_with_eos_which_training_labels_and_generation_stops_at(tokenizer, rows):
    assert tk.turn_end_id(tokenizer) == tokenizer.eos_token_id
    assert stop_ids(tokenizer) == [tokenizer.eos_token_id]
    prompts, answers = [p for p, _ in rows[:4]], [a for _, a in rows[:4]]
    for example in encode_rows(tokenizer, prompts, answers, 512):
        labels = labels_for(Example(example.input_ids, example.span_ids), "answer")
        assert [t for t in labels if t != -100][-1] == tokenizer.eos_token_id
        assert example.input_ids[0] == tokenizer.bos_token_id  # the template's, and no second one
        assert example.input_ids.count(tokenizer.bos_token_id) == 1


def test_the_generation_block_template_renders_every_row_as_deepseeks(tokenizer, rows):
    prompts, answers = [p for p, _ in rows], [a for _, a in rows]
    tk.check_rendering(tokenizer, tk.generation_template(tokenizer), prompts, answers)


def test_the_megatron_vocabulary_check_takes_it_with_the_toys_rows(tokenizer, folder):
    rows = deepseek_v2.model_vocab_size(tokenizer)
    assert check_vocabulary(tokenizer, {"vocab_size": rows}, folder) == rows


@pytest.mark.slow
def test_a_saved_toy_base_ships_the_hub_files_and_training_keeps_them(tokenizer, folder, rows, tmp_path):
    """``models toy-base`` and a post-trained checkpoint both write the files as the hub ships them."""
    import torch

    from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, load_local, save_toy_base

    spec = ToyModelSpec(hidden_size=32, num_layers=2, num_experts=4, top_k=2, num_heads=2, kv_lora_rank=16)
    model = build_toy_model("deepseek_v2", spec, tokenizer, 0, deepseek_v2.model_vocab_size(tokenizer))
    base = save_toy_base(model, tokenizer, tmp_path / "base")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (base / name).read_bytes() == (folder / name).read_bytes(), name
    loaded_model, loaded = load_local(base)
    assert loaded_model.config.vocab_size == deepseek_v2.model_vocab_size(tokenizer) > len(loaded)
    assert (loaded_model.config.bos_token_id, loaded_model.config.eos_token_id) == (
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
    )
    trained = save_toy_base(loaded_model, loaded, tmp_path / "trained")
    assert (
        json.loads((trained / "tokenizer_config.json").read_text())["tokenizer_class"] == "LlamaTokenizerFast"
    )
    prompt, answer = rows[0]
    ids, spans = tk.answer_span_mask(tokenizer, prompt, answer)
    assert tk.answer_span_mask(load_local(trained)[1], prompt, answer) == (ids, spans)
    with torch.no_grad():
        logits = loaded_model(torch.tensor([ids])).logits
    assert logits.shape[-1] == deepseek_v2.model_vocab_size(tokenizer)
