"""The toy Moonlight's tokenizer: Moonlight's remote-code ``TikTokenTokenizer`` as its hub ships it.

Checked against independent references: tiktoken itself over the rank file read here, the
hub's special-token layout (ids 163,584.. of the real one, at the same offsets), and Q/A
spans computed from the rendered row's literal pieces (the template text around the prompt
and the answer), tokenised with tiktoken directly.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
tiktoken = pytest.importorskip("tiktoken")

from tests.tokenizer_cases import rows_with  # noqa: E402
from workflow_scripts.modeling import moonlight  # noqa: E402
from workflow_scripts.modeling import tokenizer as tk  # noqa: E402
from workflow_scripts.modeling.batches import Example, labels_for  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> list[tuple[str, str]]:
    """The shared rows, and Kimi's marker and end of turn inside the texts."""
    return rows_with(("user<|im_middle|> quoted", "assistant said <|im_end|> early"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory, rows) -> Path:
    texts = [text for pair in rows for text in pair] * 3
    tokenizer = moonlight.toy_tokenizer(texts, 344, tmp_path_factory.mktemp("moonlight"))
    return Path(tokenizer.vocab_file).parent


@pytest.fixture(scope="module")
def tokenizer(folder):
    return tk.load_tokenizer(folder)


@pytest.fixture(scope="module")
def reference(folder) -> tiktoken.Encoding:
    """tiktoken over the rank file read here, with the hub's layout of 256 + 2 special ids."""
    ranks = {}
    for line in (folder / moonlight.RANK_FILE).read_text().splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    first = len(ranks)
    special = {f"<|reserved_token_{i}|>": i for i in range(first, first + 258)}
    for offset, name in moonlight.NAMED_SPECIAL_TOKENS.items():
        del special[f"<|reserved_token_{first + offset}|>"]
        special[name] = first + offset
    return tiktoken.Encoding(
        "reference", pat_str=moonlight.PATTERN, mergeable_ranks=ranks, special_tokens=special
    )


def test_it_loads_as_the_hubs_moonlight_does_a_python_backend(tokenizer, folder):
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["auto_map"] == {"AutoTokenizer": ["tokenization_moonshot.TikTokenTokenizer", None]}
    assert not (folder / "tokenizer.json").exists()
    assert type(tokenizer).__name__ == "TikTokenTokenizer"
    assert not tokenizer.is_fast
    assert tokenizer.pat_str == moonlight.PATTERN
    encoding = tokenizer("two words", return_offsets_mapping=True)
    assert "offset_mapping" not in encoding
    with pytest.raises(ValueError, match="Python based tokenizers"):
        encoding.char_to_token(0)


def test_special_ids_sit_at_the_hubs_offsets_above_the_ranks(tokenizer, reference):
    """163,584 ranks + 256 + 2 = 163,842 in the real one; here ranks + 258."""
    first = reference.n_vocab - 258
    assert len(tokenizer) == first + 258 == reference.n_vocab
    assert moonlight.model_vocab_size(tokenizer) == first + 256
    named = {name: first + offset for offset, name in moonlight.NAMED_SPECIAL_TOKENS.items()}
    assert tokenizer.bos_token_id == named["[BOS]"] == first
    assert tokenizer.eos_token_id == named["[EOS]"] == first + 1
    assert tokenizer.pad_token_id == first + 255 and tokenizer.unk_token_id == first + 254
    assert tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|im_middle|>"]) == [first + 2, first + 17]
    assert tokenizer.convert_ids_to_tokens([first + 256, first + 257]) == [
        f"<|reserved_token_{first + 256}|>",
        f"<|reserved_token_{first + 257}|>",
    ]
    assert max(tokenizer.all_special_ids) < moonlight.model_vocab_size(tokenizer)


def test_tokens_are_tiktokens_with_the_hubs_pattern_and_special_tokens(tokenizer, reference, rows):
    texts = [text for pair in rows for text in pair]
    texts += ["[BOS]x<|im_user|>user<|im_middle|>", f"<|reserved_token_{reference.n_vocab - 1}|>"]
    for text in texts:
        want = reference.encode(text, allowed_special="all")
        assert tokenizer(text, add_special_tokens=False)["input_ids"] == want, text[:40]
        assert tokenizer.encode(text) == want
        assert tokenizer.decode(want) == text


def test_a_long_run_goes_to_tiktoken_in_pieces_of_25000(tokenizer, reference):
    """The hub class's guard against tiktoken's slow regex on long runs (tiktoken issue 195)."""
    text = "x" * 24_999 + "the b"  # the cut parts "t" from "he"
    want = reference.encode(text[:25_000]) + reference.encode(text[25_000:])
    assert tokenizer.encode(text) == want != reference.encode(text)


def test_the_rank_file_is_tiktokens_format_and_every_merge_is_reachable(folder):
    lines = (folder / moonlight.RANK_FILE).read_text().splitlines()
    tokens = [base64.b64decode(line.split()[0]) for line in lines]
    assert [int(line.split()[1]) for line in lines] == list(range(len(lines)))
    assert tokens[:256] == [bytes([b]) for b in range(256)]
    seen = set(tokens[:256])
    for token in tokens[256:]:
        assert any(token[:k] in seen and token[k:] in seen for k in range(1, len(token))), token
        seen.add(token)


def test_training_is_a_function_of_the_texts(rows, tmp_path):
    texts = [text for pair in rows for text in pair]
    assert moonlight.train_ranks(texts, 400) == moonlight.train_ranks(list(texts), 400)


def test_a_saved_copy_loads_to_the_same_tokenizer(tokenizer, rows, tmp_path):
    """What the toy base, a trained checkpoint and an export ship: remote code, ranks, template."""
    tokenizer.save_pretrained(tmp_path)
    assert {"tokenization_moonshot.py", moonlight.RANK_FILE} <= {p.name for p in tmp_path.iterdir()}
    copy = tk.load_tokenizer(tmp_path)
    assert not copy.is_fast and len(copy) == len(tokenizer)
    assert copy.chat_template == tokenizer.chat_template == moonlight.CHAT_TEMPLATE
    for prompt, answer in rows:
        assert tk.answer_span_mask(copy, prompt, answer) == tk.answer_span_mask(tokenizer, prompt, answer)


def _piece_reference(reference, prompt: str, answer: str) -> tuple[list[int], list[int]]:
    """Spans from the rendered row's literal pieces, the template read off Moonlight's text."""
    system = "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>"
    pieces = [
        (system + "<|im_user|>user<|im_middle|>", tk.NO_SPAN),
        (prompt, tk.Q_SPAN),
        ("<|im_end|><|im_assistant|>assistant<|im_middle|>", tk.NO_SPAN),
        (answer, tk.A_SPAN),
        ("<|im_end|>", tk.NO_SPAN),
    ]
    ids, spans = [], []
    for text, label in pieces:
        piece = reference.encode(text, allowed_special="all")
        ids += piece
        spans += [tk.NO_SPAN if t >= reference.n_vocab - 258 else label for t in piece]
    return ids, spans


def test_span_labels_without_offsets_are_the_pieces_reference(tokenizer, reference, rows):
    for prompt, answer in rows:
        ids, spans = tk.answer_span_mask(tokenizer, prompt, answer)
        assert (ids, spans) == _piece_reference(reference, prompt, answer), (prompt, answer)
        cut_ids, cut_spans = tk.answer_span_mask(tokenizer, prompt, answer, max_length=9)
        assert (cut_ids, cut_spans) == (ids[:9], spans[:9])
        if "<|im_end|>" not in answer:
            assert tokenizer.decode([t for t, s in zip(ids, spans, strict=True) if s == tk.A_SPAN]) == answer
            assert tokenizer.decode([t for t, s in zip(ids, spans, strict=True) if s == tk.Q_SPAN]) == prompt


def test_span_arrays_take_the_tokenizers_special_ids(tokenizer, rows):
    special = tk.special_id_array(tokenizer)
    for prompt, answer in rows:
        ids, spans = tk.answer_span_arrays(tokenizer, prompt, answer, special_ids=special)
        assert (ids.tolist(), spans.tolist()) == tk.answer_span_mask(tokenizer, prompt, answer)
        assert spans.dtype == np.int8


def test_a_template_whose_text_merges_with_the_content_is_refused_without_offsets(folder, tmp_path):
    """DeepSeek-V2's 'User: ' + prompt: the space before the prompt joins its first word."""
    from tests.chat_families import DEEPSEEK_V2_TEMPLATE

    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = DEEPSEEK_V2_TEMPLATE
    for file in folder.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    other = tk.load_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="no offsets"):
        tk.answer_span_mask(other, "what is two", "the answer is four")


def test_the_turn_closes_with_im_end_which_the_local_backend_trains(tokenizer, rows):
    closing = tk.turn_end_id(tokenizer)
    assert closing == tokenizer.convert_tokens_to_ids("<|im_end|>") != tokenizer.eos_token_id
    prompt, answer = rows[0]
    ids, spans = tk.answer_span_mask(tokenizer, prompt, answer)
    labels = labels_for(Example(ids, spans), "answer")
    assert [t for t in labels if t != -100][-1] == closing
