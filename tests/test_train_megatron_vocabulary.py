"""The model's embedding rows against its tokenizer: Moonlight's 163,840 rows and 163,842 tokens.

A stand-in for Moonlight's tokenizer keeps the real numbers (ids are all these checks read); the
toy Moonlight's remote-code tokenizer, two ids longer than its model, passes the same check, and
Bridge's own start-up check (the Megatron environment) keeps the base's rows. DeepSeek-V2-Lite's
and Qwen3's tokenizers are shorter than their models, with named tokens above the BPE: stand-ins
with their real numbers here, their toys' tokenizers in ``test_deepseek_v2_tokenizer`` and
``test_qwen3_tokenizer``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from workflow_scripts.errors import UserInputError
from workflow_scripts.train.megatron.vocabulary import check_row, check_vocabulary

#: Moonlight-16B-A3B: 163,584 BPE ranks, 256 + 2 special ids above them, a model of 163,840 rows.
RANKS, ROWS, TOKENS = 163_584, 163_840, 163_842
#: Its named special tokens (``tokenizer_config.json``'s ``added_tokens_decoder``).
NAMED = {
    RANKS: "[BOS]",
    RANKS + 1: "[EOS]",
    RANKS + 2: "<|im_end|>",
    RANKS + 17: "<|im_middle|>",
    ROWS - 1: "[PAD]",
}


@dataclass
class Tokenizer:
    """What the checks read of a tokenizer: its length, special and added tokens, token names."""

    size: int = TOKENS
    added: dict[int, str] = field(default_factory=lambda: dict(NAMED))

    def __len__(self) -> int:
        return self.size

    @property
    def all_special_ids(self) -> list[int]:
        return sorted(self.added)

    @property
    def added_tokens_decoder(self) -> dict[int, str]:
        return self.added

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self.added.get(i, f"<|reserved_token_{i}|>") for i in ids]


#: Tokenizers shorter than their models: (model rows, ``len(tokenizer)``, named tokens by id).
#: DeepSeek-V2-Lite: 100,000 BPE tokens, bos and eos above; Qwen3-30B-A3B: 151,643, then 26 added.
SHORTER = {
    "deepseek_v2_lite": (
        102_400,
        100_002,
        {100_000: "<｜begin▁of▁sentence｜>", 100_001: "<｜end▁of▁sentence｜>"},
    ),
    "qwen3_30b": (
        151_936,
        151_669,
        {151_643: "<|endoftext|>", 151_644: "<|im_start|>", 151_645: "<|im_end|>", 151_668: "</think>"},
    ),
}


@pytest.mark.parametrize("model", SHORTER)
def test_a_tokenizer_shorter_than_its_model_is_accepted_and_refused_on_fewer_rows(model, tmp_path):
    rows, size, named = SHORTER[model]
    tokenizer = Tokenizer(size=size, added=dict(named))
    assert check_vocabulary(tokenizer, {"vocab_size": rows}, tmp_path) == rows
    assert check_vocabulary(tokenizer, {"vocab_size": size}, tmp_path) == size
    last = max(named)
    with pytest.raises(UserInputError, match=f"{last}: '{re.escape(named[last])}'"):
        check_vocabulary(tokenizer, {"vocab_size": last}, tmp_path)
    check_row(0, [0, last], rows)


def test_moonlights_two_reserved_ids_past_its_rows_are_accepted(tmp_path):
    assert check_vocabulary(Tokenizer(), {"vocab_size": ROWS}, tmp_path) == ROWS


def test_a_named_token_past_the_rows_is_refused_naming_both_sizes(tmp_path):
    tokenizer = Tokenizer(size=TOKENS + 1, added={**NAMED, TOKENS: "<added_after_pretraining>"})
    with pytest.raises(UserInputError) as error:
        check_vocabulary(tokenizer, {"vocab_size": ROWS}, tmp_path)
    message = str(error.value)
    assert f"the tokenizer has {TOKENS + 1} tokens, the model's vocab_size (config.json) {ROWS}" in message
    assert "<added_after_pretraining>" in message and str(tmp_path) in message
    with pytest.raises(UserInputError, match=r"\[PAD\]"):
        check_vocabulary(Tokenizer(), {"vocab_size": ROWS - 1}, tmp_path)


def test_a_row_spelling_a_reserved_token_past_the_rows_is_refused_naming_it():
    check_row(7, [RANKS, ROWS - 1, 5], ROWS)
    with pytest.raises(ValueError, match=f"split row 7: token 1 is id {ROWS}, past the model's {ROWS}"):
        check_row(7, [5, ROWS, TOKENS - 1], ROWS)


@pytest.mark.slow
def test_the_import_takes_the_toy_moonlight_whose_tokenizer_is_longer_than_its_model(tmp_path):
    """The remote-code tokenizer as ``megatron-import`` and the training load it."""
    from tests.chat_families import moonlight_remote_tokenizer
    from tests.dag import toy_rows
    from workflow_scripts.modeling.moonlight import model_vocab_size
    from workflow_scripts.modeling.tokenizer import load_tokenizer

    prompts, answers = toy_rows()
    tokenizer = moonlight_remote_tokenizer(prompts + answers, tmp_path / "tokenizer")
    rows = model_vocab_size(tokenizer)
    assert len(tokenizer) == rows + 2 and not tokenizer.is_fast
    loaded = load_tokenizer(tmp_path / "tokenizer")
    assert check_vocabulary(loaded, {"vocab_size": rows}, tmp_path) == rows
    with pytest.raises(UserInputError, match="have no embedding row"):
        check_vocabulary(loaded, {"vocab_size": rows - 1}, tmp_path)


@pytest.mark.megatron
def test_bridges_start_up_keeps_the_bases_rows_for_moonlights_tokenizer(monkeypatch):
    """Bridge 0.6.2 refuses 163,842 tokens on 163,840 rows; after the patch it keeps the rows, unpadded."""
    pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")
    from tests import bridge_cpu

    bridge_cpu.install()
    import megatron.bridge.training.setup as bridge_setup

    from workflow_scripts.train.megatron.vocabulary import bridge_accepts_reserved_ids

    monkeypatch.setattr(
        bridge_setup, "_validate_and_set_vocab_size", bridge_setup._validate_and_set_vocab_size
    )
    with pytest.raises(ValueError, match=f"Model vocab_size \\({ROWS}\\) cannot be smaller"):
        bridge_setup._validate_and_set_vocab_size(ROWS, TOKENS)
    bridge_accepts_reserved_ids(ROWS)
    assert bridge_setup._validate_and_set_vocab_size(ROWS, TOKENS) == (ROWS, False)
    assert bridge_setup._validate_and_set_vocab_size(ROWS + 128, TOKENS) == (ROWS + 128, False)
    with pytest.raises(ValueError, match="cannot be smaller"):
        bridge_setup._validate_and_set_vocab_size(ROWS - 1, TOKENS)
