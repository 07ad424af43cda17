"""``answer_span_mask`` (vectorised) against a per-token reference of its labelling rule."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("transformers")

from workflow_scripts.modeling import tokenizer as tk  # noqa: E402

WORDS = ["alpha", "beta", "héllo", "🙂", "sum", "of", "the", "is", "def", "x", "\n", "  ", "$1$", "=", "✓"]


def _text(rng: np.random.Generator, low: int, high: int) -> str:
    return "".join(
        str(w) + str(rng.choice(["", " ", "\n"])) for w in rng.choice(WORDS, size=rng.integers(low, high))
    )


def _rows(count: int, seed: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    rows = [(_text(rng, 1, 15), _text(rng, 1, 60)) for _ in range(count)]
    rows += [("", "an empty prompt"), ("  spaces around  ", " x "), ("repeat repeat", "repeat repeat")]
    return rows


@pytest.fixture(scope="module")
def tokenizer():
    texts = [t for pair in _rows(60, seed=1) for t in pair]
    return tk.train_tokenizer(texts, 300)


def _reference(tokenizer, prompt: str, answer: str) -> tuple[list[int], list[int]]:
    """The labelling rule token by token (the implementation before vectorisation)."""
    turn = [{"role": "user", "content": prompt}]
    full = tokenizer.apply_chat_template([*turn, {"role": "assistant", "content": answer}], tokenize=False)
    prefix = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
    a = (len(prefix), len(prefix) + len(answer))
    q_start = full.find(prompt) if prompt else a[0]
    q = (q_start, q_start + len(prompt))
    encoding = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    special = set(tokenizer.all_special_ids)

    def overlap(s: int, e: int, span: tuple[int, int]) -> int:
        return max(0, min(e, span[1]) - max(s, span[0]))

    spans = []
    for tok, (s, e) in zip(encoding["input_ids"], encoding["offset_mapping"], strict=True):
        q_overlap, a_overlap = overlap(s, e, q), overlap(s, e, a)
        if tok in special or e <= s or (q_overlap == 0 and a_overlap == 0):
            spans.append(tk.NO_SPAN)
        else:
            spans.append(tk.Q_SPAN if q_overlap >= a_overlap else tk.A_SPAN)
    return list(encoding["input_ids"]), spans


@pytest.mark.parametrize("seed", [0, 1])
def test_answer_span_mask_matches_the_per_token_reference(tokenizer, seed) -> None:
    special = tk.special_id_array(tokenizer)
    for prompt, answer in _rows(25, seed=seed + 10):
        ids, spans = _reference(tokenizer, prompt, answer)
        assert tk.answer_span_mask(tokenizer, prompt, answer) == (ids, spans)
        assert {0, 1} <= set(spans) or not prompt
        for max_length in (0, 1, 5, len(ids) - 1, len(ids), len(ids) + 3):
            got = tk.answer_span_mask(tokenizer, prompt, answer, max_length)
            assert got == (ids[:max_length], spans[:max_length])
            arr_ids, arr_spans = tk.answer_span_arrays(tokenizer, prompt, answer, max_length, special)
            assert arr_ids.dtype == np.int64 and arr_spans.dtype == np.int8
            assert arr_ids.tolist() == ids[:max_length] and arr_spans.tolist() == spans[:max_length]


def test_answer_span_mask_tokens_match_the_tokenizer_call_under_backend_settings(tokenizer) -> None:
    """A backend with truncation set goes through ``tokenizer(...)``; tokens are the same."""
    prompt, answer = "what is alpha beta?", "alpha beta " * 20
    expected = _reference(tokenizer, prompt, answer)
    tokenizer.backend_tokenizer.enable_truncation(8)
    try:
        assert tk.answer_span_mask(tokenizer, prompt, answer) == expected
    finally:
        tokenizer.backend_tokenizer.no_truncation()
    with pytest.raises(ValueError, match="non-negative"):
        tk.answer_span_mask(tokenizer, prompt, answer, -1)


# ---------------------------------------------------------------- prefix tokenisation

ADDED = ["<|im_start|>", "<|im_end|>", "<|x|>"]
PIECES = ["word", " word", "héllo", "e\u0301", "🙂", "12345678901234", "  ", "\n", "\n\n  ", "'s", "x+y="]
PIECES += ["\t", "\\frac{1}{2}"]
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _piece_text(rng: np.random.Generator, pieces: int, special: float) -> str:
    return "".join(
        str(rng.choice(ADDED)) if rng.random() < special else str(rng.choice(PIECES)) for _ in range(pieces)
    )


def _backend(kind: str):
    """Tokenizers of the pre-tokenisation families real checkpoints use, trained on the piece texts."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    if kind == "byte_level":  # GPT-2 style, the toy models'
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif kind == "qwen":  # NFC, a split regex with lookahead, then bytes
        backend.normalizer = normalizers.NFC()
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    elif kind == "metaspace":  # SentencePiece style
        backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
        backend.decoder = decoders.Metaspace(prepend_scheme="first")
    alphabet = pre_tokenizers.ByteLevel.alphabet() if kind != "metaspace" else []
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=ADDED, initial_alphabet=alphabet, show_progress=False
    )
    rng = np.random.default_rng(3)
    backend.train_from_iterator([_piece_text(rng, 40, 0.0) for _ in range(200)], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, additional_special_tokens=ADDED)


@pytest.mark.slow
@pytest.mark.parametrize("chars_per_token", [1, 2, tk.PREFIX_CHARS_PER_TOKEN])
@pytest.mark.parametrize("kind", ["byte_level", "qwen", "metaspace"])
def test_prefix_tokenisation_equals_tokenising_the_whole_text(kind, chars_per_token, monkeypatch) -> None:
    """Cutting the encoding of a prefix gives the whole text's first tokens, whatever sits at the cut.

    First tries of 1 and 2 characters per token put the cut right after the kept tokens, where
    a split added token or an unfinished word would change them if the rule let them through.
    """
    monkeypatch.setattr(tk, "PREFIX_CHARS_PER_TOKEN", chars_per_token)
    tokenizer = _backend(kind)
    backend = tokenizer.backend_tokenizer
    rng = np.random.default_rng(chars_per_token)
    texts = [_piece_text(rng, int(rng.integers(30, 300)), 0.15) for _ in range(40)]
    prefix_used = checked = 0
    for text in texts:
        whole = backend.encode(text, add_special_tokens=False)
        for max_length in sorted({1, 2, 3, 5, 10, 25, 60, len(whole.ids) // 2, len(whole.ids)}):
            ids, offsets = tk._encode_with_offsets(tokenizer, text, max_length)
            assert list(ids) == whole.ids[:max_length], (kind, text[:80], max_length)
            assert list(offsets) == whole.offsets[:max_length]
            prefix_used += tk._prefix_encoding(backend, text, max_length) is not None
            checked += 1
    assert prefix_used > checked // 2  # the fast path is what was checked, not only the fallback
