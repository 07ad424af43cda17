"""DeepSeek-V2-Lite's tokenizer as its hub repository ships it, built offline for the toy DeepSeek-V2.

The hub ships a byte-level BPE in ``tokenizer.json`` (100,000 BPE tokens, bos
``<｜begin▁of▁sentence｜>`` at 100,000 and eos ``<｜end▁of▁sentence｜>`` at 100,001, so
``len(tokenizer)`` is 100,002 against the model's 102,400 rows) and a ``tokenizer_config.json``
naming ``LlamaTokenizerFast`` with ``add_bos_token`` true, eos as pad, no unk, and its
"User: ... Assistant: ..." chat template. The toy carries the same two files over a BPE learned
from the toy corpus. The class name does not say what loads: transformers 5.24 reads a
``LlamaTokenizer`` name over a byte-level ``tokenizer.json`` as ``TokenizersBackend`` (the file
as it is, bos added by ``add_bos_token``), while ``LlamaTokenizer`` itself would rebuild a
SentencePiece-style Metaspace pipeline; ``modeling.tokenizer.load_tokenizer`` is the pipeline's load.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from workflow_scripts.modeling import bpe
from workflow_scripts.modeling.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BOS_TOKEN = "<｜begin▁of▁sentence｜>"
EOS_TOKEN = "<｜end▁of▁sentence｜>"

#: The class ``tokenizer_config.json`` names, as the hub's does.
TOKENIZER_CLASS = "LlamaTokenizerFast"

#: DeepSeek-V2-Lite's ``chat_template``: bos first, "User: " turns ending in a blank line, an
#: assistant turn that ends in eos; the generation prompt is "Assistant:" without the space.
CHAT_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}"
    "{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}"
    "{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

#: The pre-tokenizer's splits, each isolating its matches in turn, then byte-level bytes: the
#: kind of DeepSeek LLM's (a newline alone, a letter run or a punctuation run with at most one
#: leading space, trailing whitespace, a CJK run, a digit run), written here for the toy.
SPLITS = (
    r"[\r\n]",
    r"\s?[\p{L}&&[^\p{Han}\p{Hangul}]]+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[\p{Han}\p{Hangul}]+",
    r"\p{N}+",
)


def pre_tokenizer():
    """The ``tokenizers`` pre-tokenizer of ``SPLITS``, then ByteLevel without its own regex."""
    from tokenizers import Regex, pre_tokenizers

    splits = [pre_tokenizers.Split(Regex(pattern), behavior="isolated") for pattern in SPLITS]
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)
    return pre_tokenizers.Sequence([*splits, byte_level])


def write_tokenizer(folder: str | Path, texts: Iterable[str], ranks: int) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``: the hub's two files.

    ``tokenizer.json``: the BPE of ``ranks`` tokens learned from ``texts`` (``bpe.train_bpe``;
    fewer when the corpus runs out of frequent pairs), bos and eos as the next two ids, a post
    processor that writes bos before a sequence, the ByteLevel decoder. ``tokenizer_config.json``:
    ``TOKENIZER_CLASS``, ``add_bos_token`` true, bos, eos and pad (eos) as DeepSeek's legacy
    ``AddedToken`` entries, no unk, ``CHAT_TEMPLATE``.
    """
    from tokenizers import decoders

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    backend = bpe.train_bpe(texts, ranks, pre_tokenizer())
    backend.decoder = decoders.ByteLevel()
    first = backend.get_vocab_size()
    bos = {"id": BOS_TOKEN, "type_id": 0}
    post_processor = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": bos}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": bos},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": BOS_TOKEN, "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {BOS_TOKEN: {"id": BOS_TOKEN, "ids": [first], "tokens": [BOS_TOKEN]}},
    }
    added = [
        bpe.added_token(first, BOS_TOKEN, normalized=True),
        bpe.added_token(first + 1, EOS_TOKEN, normalized=True),
    ]
    bpe.write_json(folder / "tokenizer.json", bpe.with_added_tokens(backend, added, post_processor))

    def legacy(content: str) -> dict:
        return {
            "__type": "AddedToken",
            "content": content,
            "lstrip": False,
            "normalized": True,
            "rstrip": False,
            "single_word": False,
        }

    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": legacy(BOS_TOKEN),
        "clean_up_tokenization_spaces": False,
        "eos_token": legacy(EOS_TOKEN),
        "legacy": True,
        "model_max_length": 16384,
        "pad_token": legacy(EOS_TOKEN),
        "sp_model_kwargs": {},
        "unk_token": None,
        "tokenizer_class": TOKENIZER_CLASS,
        "chat_template": CHAT_TEMPLATE,
    }
    bpe.write_json(folder / "tokenizer_config.json", config)
    return folder


def toy_tokenizer(texts: Iterable[str], ranks: int, folder: str | Path) -> PreTrainedTokenizerBase:
    """DeepSeek-V2-Lite's kind of tokenizer, ``ranks`` BPE tokens learned from ``texts``, in ``folder``."""
    return load_tokenizer(write_tokenizer(folder, texts, ranks))


def model_vocab_size(tokenizer: PreTrainedTokenizerBase) -> int:
    """The toy model's ``vocab_size``: more rows than tokens, as DeepSeek-V2-Lite's 102,400 for 100,002."""
    return bpe.model_rows(len(tokenizer))
