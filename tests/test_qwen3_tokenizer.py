"""The toy Qwen3-MoE's tokenizer: Qwen3-30B-A3B-Base's ``Qwen2Tokenizer`` files as its hub ships them.

Checked against independent references: a ``tokenizers`` BPE read from the saved ``vocab.json`` and
``merges.txt`` with the split regex of transformers' own ``Qwen2Tokenizer``, the saved
``tokenizer.json`` read by ``tokenizers`` alone, the hub's ids of its added tokens (151,643 on, at
the same offsets above the BPE), and Q/A spans computed from the row spelled out by hand from Qwen3's
template text, labelled with the reference's offsets.
"""

from __future__ import annotations

import json
import unicodedata
from functools import partial
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: E402
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX  # noqa: E402

from tests.tokenizer_cases import offset_reference_spans, rows_with  # noqa: E402
from workflow_scripts.evaluate.generation import stop_ids  # noqa: E402
from workflow_scripts.modeling import qwen3  # noqa: E402
from workflow_scripts.modeling import tokenizer as tk  # noqa: E402
from workflow_scripts.modeling.batches import Example, encode_rows, labels_for  # noqa: E402
from workflow_scripts.train.megatron.vocabulary import check_vocabulary, named_token_ids  # noqa: E402

#: Qwen3-30B-A3B's ids of its added tokens (``added_tokens_decoder``); the BPE holds 151,643.
HUB_BPE = 151_643
HUB_IDS = {
    "<|endoftext|>": 151_643,
    "<|im_start|>": 151_644,
    "<|im_end|>": 151_645,
    "<|video_pad|>": 151_656,
    "<tool_call>": 151_657,
    "</tool_call>": 151_658,
    "<|file_sep|>": 151_664,
    "<tool_response>": 151_665,
    "</tool_response>": 151_666,
    "<think>": 151_667,
    "</think>": 151_668,
}
nfc = partial(unicodedata.normalize, "NFC")
NOT_SPECIAL = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")


@pytest.fixture(scope="module")
def rows() -> list[tuple[str, str]]:
    """The shared rows, Qwen3's markers and end of turn inside the texts, and decomposed characters (NFC)."""
    return rows_with(
        ("user<|im_start|> quoted", "assistant said <|im_end|> early"),
        ("cafe\u0301 decomposed", "e\u0301 too"),
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory, rows) -> Path:
    texts = [text for pair in rows for text in pair] * 3
    return qwen3.write_tokenizer(tmp_path_factory.mktemp("qwen3"), texts, 400)


@pytest.fixture(scope="module")
def tokenizer(folder):
    return tk.load_tokenizer(folder)


@pytest.fixture(scope="module")
def reference(folder) -> Tokenizer:
    """``vocab.json`` + ``merges.txt`` with the Qwen2 class's own regex, NFC and byte-level bytes."""
    backend = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    for token_id, token in sorted(config["added_tokens_decoder"].items(), key=lambda item: int(item[0])):
        added = AddedToken(token["content"], special=token["special"], normalized=False)
        backend.add_special_tokens([added]) if token["special"] else backend.add_tokens([added])
        assert backend.token_to_id(token["content"]) == int(token_id)
    return backend


def test_the_config_is_the_hubs_and_loads_as_qwen2tokenizer(tokenizer, folder):
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "Qwen2Tokenizer"
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == (
        None,
        "<|endoftext|>",
        "<|endoftext|>",
    )
    assert (config["add_bos_token"], config["unk_token"], config["chat_template"]) == (
        False,
        None,
        qwen3.CHAT_TEMPLATE,
    )
    assert config["additional_special_tokens"][:2] == ["<|im_start|>", "<|im_end|>"]
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["merges.txt", "tokenizer.json", "tokenizer_config.json", "vocab.json"]
    assert type(tokenizer).__name__ == "Qwen2Tokenizer" and tokenizer.is_fast
    assert qwen3.PATTERN == PRETOKENIZE_REGEX


def test_added_tokens_sit_at_the_hubs_offsets_above_the_bpe(tokenizer, folder):
    """151,643 BPE tokens + 26 added = 151,669 in the real one, against 151,936 model rows."""
    first = len(json.loads((folder / "vocab.json").read_text()))
    assert len(tokenizer) == first + 26
    for name, hub_id in HUB_IDS.items():
        assert tokenizer.convert_tokens_to_ids(name) == first + hub_id - HUB_BPE, name
    assert tokenizer.bos_token is None and tokenizer.unk_token is None
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == first
    special = set(tokenizer.all_special_ids)
    assert all(tokenizer.convert_tokens_to_ids(name) not in special for name in NOT_SPECIAL)
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in special
    rows = qwen3.model_vocab_size(tokenizer)
    assert rows > len(tokenizer) and max(named_token_ids(tokenizer)) == len(tokenizer) - 1 < rows


def test_nothing_is_added_to_a_plain_encode(tokenizer, reference):
    text = "the sum of 12 and 30"
    assert tokenizer(text)["input_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer(text)["input_ids"] == reference.encode(text).ids


def test_tokens_are_the_vocab_and_merges_own_and_the_json_files(tokenizer, reference, folder, rows):
    """transformers rebuilds normalizer, split and decoder itself: they must agree with both files."""
    from_json = Tokenizer.from_file(str(folder / "tokenizer.json"))
    texts = [text for pair in rows for text in pair] + ["<think>\nx\n</think>\n\n<|im_start|>y", "1234567"]
    for text in texts:
        want = reference.encode(text, add_special_tokens=False).ids
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == want, text[:40]
        assert from_json.encode(text, add_special_tokens=False).ids == want, text[:40]
        if "<|" not in text:
            assert tokenizer.decode(want) == reference.decode(want, skip_special_tokens=False)
    assert [
        tokenizer.decode([t]) for t in tokenizer("1234567", add_special_tokens=False)["input_ids"]
    ] == list("1234567")


def test_the_template_renders_qwen3s_pieces(tokenizer):
    turn = [{"role": "user", "content": "q"}]
    prompt = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
    row = tokenizer.apply_chat_template([*turn, {"role": "assistant", "content": "a"}], tokenize=False)
    assert row == "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na<|im_end|>\n"
    quiet = tokenizer.apply_chat_template(
        turn, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert quiet == prompt + "<think>\n\n</think>\n\n"


def _reference_spans(reference: Tokenizer, prompt: str, answer: str) -> tuple[list[int], list[int]]:
    """The row spelled from Qwen3's template text."""
    special = {reference.token_to_id(name) for name in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")}
    pieces = (
        "<|im_start|>user\n",
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "<|im_end|>\n",
    )
    return offset_reference_spans(reference, special, pieces, prompt, answer)


def test_span_labels_are_the_references_and_a_cut_keeps_a_prefix(tokenizer, reference, rows):
    for prompt, answer in rows:
        ids, spans = tk.answer_span_mask(tokenizer, prompt, answer)
        assert (ids, spans) == _reference_spans(reference, prompt, answer), (prompt, answer)
        assert tk.answer_span_mask(tokenizer, prompt, answer, max_length=9) == (ids[:9], spans[:9])
        if "<|im_end|>" not in answer and "<|im_start|>" not in prompt:
            decoded = {
                s: tokenizer.decode([t for t, x in zip(ids, spans, strict=True) if x == s]) for s in (0, 1)
            }
            # NFC: a decomposed character decodes composed, as the model saw it.
            assert decoded == {tk.Q_SPAN: nfc(prompt), tk.A_SPAN: nfc(answer)}


def test_the_turn_closes_with_im_end_which_training_labels_and_generation_stops_at(tokenizer, rows):
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tk.turn_end_id(tokenizer) == im_end != tokenizer.eos_token_id
    assert stop_ids(tokenizer) == sorted([tokenizer.eos_token_id, im_end])
    prompts, answers = [p for p, _ in rows[:4]], [a for _, a in rows[:4]]
    think = tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    for example in encode_rows(tokenizer, prompts, answers, 512):
        labels = [t for t in labels_for(Example(example.input_ids, example.span_ids), "answer") if t != -100]
        assert labels[-1] == im_end and not set(think) & set(labels)
        assert set(think) <= set(example.input_ids)


def test_the_generation_block_template_renders_every_row_as_qwen3s(tokenizer, rows):
    prompts, answers = [p for p, _ in rows], [a for _, a in rows]
    tk.check_rendering(tokenizer, tk.generation_template(tokenizer), prompts, answers)


def test_the_megatron_vocabulary_check_takes_it_with_the_toys_rows(tokenizer, folder):
    rows = qwen3.model_vocab_size(tokenizer)
    assert check_vocabulary(tokenizer, {"vocab_size": rows}, folder) == rows


@pytest.mark.slow
def test_a_saved_toy_base_ships_the_hub_files_and_training_keeps_them(tokenizer, folder, rows, tmp_path):
    """``models toy-base`` and a post-trained checkpoint both write the four files as the hub ships them."""
    from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, load_local, save_toy_base

    spec = ToyModelSpec(
        hidden_size=32, num_layers=2, num_experts=4, top_k=2, num_heads=2, first_dense_layers=0
    )
    model = build_toy_model("qwen3_moe", spec, tokenizer, 0, qwen3.model_vocab_size(tokenizer))
    base = save_toy_base(model, tokenizer, tmp_path / "base")
    for name in ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json"):
        assert (base / name).read_bytes() == (folder / name).read_bytes(), name
    loaded_model, loaded = load_local(base)
    assert loaded_model.config.vocab_size == qwen3.model_vocab_size(tokenizer) > len(loaded)
    assert (
        loaded_model.config.eos_token_id == tokenizer.eos_token_id
        and loaded_model.config.bos_token_id is None
    )
    trained = save_toy_base(loaded_model, loaded, tmp_path / "trained")
    assert (trained / "vocab.json").read_bytes() == (folder / "vocab.json").read_bytes()
    prompt, answer = rows[0]
    want = tk.answer_span_mask(tokenizer, prompt, answer)
    assert tk.answer_span_mask(load_local(trained)[1], prompt, answer) == want
