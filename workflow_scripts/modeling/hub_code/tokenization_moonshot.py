"""Moonlight-16B-A3B's tokenizer class, ``TikTokenTokenizer``, written for the toy Moonlight.

Moonlight's hub repository ships its tokenizer as remote code: this module's name, a
``tiktoken`` rank file (``tiktoken.model``, one ``base64(token) rank`` line per BPE token) and a
``tokenizer_config.json`` whose ``auto_map`` names this class. ``AutoTokenizer.from_pretrained(
..., trust_remote_code=True)`` loads it as a Python-backend tokenizer (transformers 5.x
``PythonBackend``): no Rust tokenizer, so no ``offset_mapping`` and no ``char_to_token``. The
toy-base builder copies this file into the toy Moonlight's base folder, so that every stage
meets the kind of tokenizer the paper's Moonlight has; nothing in ``workflow_scripts`` imports it.

It behaves as the hub's class: the same pre-tokenizer pattern; 256 + 2 special ids right above
the BPE ranks, named by the config's ``added_tokens_decoder`` and otherwise
``<|reserved_token_{id}|>``, so that ``len(tokenizer)`` is the ranks + 258 (Moonlight: 163,842,
two more than its model's ``vocab_size``); every special token's text encodes to its id; text
goes to tiktoken in pieces it can encode; ``encode`` and ``decode`` without further arguments
call tiktoken directly. One difference: the rank file is read here, not with
``tiktoken.load.load_tiktoken_bpe``, which caches every file by its path in the temporary
directory and would hand a rebuilt toy base its predecessor's ranks.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tiktoken
from transformers.convert_slow_tokenizer import bytes_to_unicode
from transformers.tokenization_utils import PreTrainedTokenizer

VOCAB_FILES_NAMES = {"vocab_file": "tiktoken.model"}

#: Characters tiktoken encodes in one call without a panic.
MAX_ENCODE_CHARS = 400_000
#: Longest run of whitespace, or of other characters, handed to tiktoken in one call: longer runs
#: make its regex backtrack for minutes (tiktoken issue 195).
MAX_RUN_CHARS = 25_000

#: Moonlight's pre-tokenizer: Han runs; words (an optional leading symbol, capitals, lower case,
#: an English contraction) in two orders; up to three digits; punctuation runs with their line
#: breaks; line breaks with the spaces before them; spaces.
PATTERN = "|".join(
    [
        r"[\p{Han}]+",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
        r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
        r"[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)

#: The hub class's extra special tokens when its config names none.
DEFAULT_EXTRA_SPECIAL_TOKENS = (
    "<|im_end|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "[EOT]",
    "<|im_system|>",
    "<|im_middle|>",
)


def read_ranks(path: str | os.PathLike[str]) -> dict[bytes, int]:
    """The BPE ranks of a tiktoken file: ``base64(token) rank`` per line, blank lines skipped."""
    ranks = {}
    for number, line in enumerate(Path(path).read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as error:
            raise ValueError(f"{path}, line {number}: not 'base64-token rank'") from error
    return ranks


def runs(text: str, limit: int) -> Iterator[str]:
    """``text`` cut so that no piece holds more than ``limit`` whitespace, or other, characters in a row."""
    start, length = 0, 0
    in_space = text[:1].isspace()
    for index, char in enumerate(text):
        if char.isspace() != in_space:
            in_space, length = not in_space, 1
            continue
        length += 1
        if length > limit:
            yield text[start:index]
            start, length = index, 1
    yield text[start:]


class TikTokenTokenizer(PreTrainedTokenizer):
    """A tiktoken BPE with Moonlight's pattern and special-token layout, as a transformers tokenizer."""

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]
    num_reserved_special_tokens = 256
    pat_str = PATTERN

    def __init__(
        self,
        vocab_file: str,
        bos_token: Any = "[BOS]",
        eos_token: Any = "[EOS]",
        unk_token: Any = None,
        pad_token: Any = None,
        additional_special_tokens: list[str] | None = None,
        added_tokens_decoder: dict[int, Any] | None = None,
        **kwargs: Any,
    ):
        if not os.path.isfile(vocab_file):
            raise FileNotFoundError(f"no tiktoken rank file at {vocab_file}")
        if additional_special_tokens is None:
            additional_special_tokens = list(kwargs.pop("extra_special_tokens", None) or ())
        if not additional_special_tokens:
            additional_special_tokens = list(DEFAULT_EXTRA_SPECIAL_TOKENS)
        names = {int(i): str(getattr(t, "content", t)) for i, t in (added_tokens_decoder or {}).items()}
        self.vocab_file = vocab_file
        ranks = read_ranks(vocab_file)
        first = len(ranks)
        self.special_tokens = {
            names.get(i, f"<|reserved_token_{i}|>"): i
            for i in range(first, first + self.num_reserved_special_tokens + 2)
        }
        self.model = tiktoken.Encoding(
            name=Path(vocab_file).name,
            pat_str=self.pat_str,
            mergeable_ranks=ranks,
            special_tokens=self.special_tokens,
        )
        self.n_words: int = self.model.n_vocab
        self.bos_id = self.special_tokens[str(bos_token)]
        self.eos_id = self.special_tokens[str(eos_token)]
        self.pad_id = self.special_tokens[str(pad_token)]
        self.unk_id = self.special_tokens[str(unk_token)]
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {char: byte for byte, char in self.byte_encoder.items()}
        self.decoder = {
            i: "".join(self.byte_encoder[byte] for byte in self.model.decode_single_token_bytes(i))
            for i in range(self.n_words)
        }
        self.encoder = {token: i for i, token in self.decoder.items()}
        super().__init__(
            bos_token=bos_token,
            eos_token=eos_token,
            unk_token=unk_token,
            pad_token=pad_token,
            additional_special_tokens=additional_special_tokens,
            **kwargs,
        )

    def encode(self, text: Any, allow_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        """tiktoken's ids of ``text``, special tokens' text included; with more arguments, the base's."""
        if kwargs:
            return super().encode(text, **kwargs)
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        special: dict[str, Any] = (
            {"allowed_special": "all"} if allow_special_tokens else {"disallowed_special": ()}
        )
        ids: list[int] = []
        for start in range(0, len(text), MAX_ENCODE_CHARS):
            for piece in runs(text[start : start + MAX_ENCODE_CHARS], MAX_RUN_CHARS):
                ids.extend(self.model.encode(piece, **special))
        return ids

    def decode(self, token_ids: Any, **kwargs: Any) -> str:
        """tiktoken's text of ``token_ids``; with further arguments, the base class's."""
        if kwargs:
            return super().decode(token_ids, **kwargs)
        return self.model.decode([token_ids] if isinstance(token_ids, int) else list(token_ids))

    @property
    def vocab_size(self) -> int:
        return self.n_words

    def get_vocab(self) -> dict[str, int]:
        return self.encoder

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [self.decoder[i] for i in self.encode(text)]

    def _convert_token_to_id(self, token: str) -> int:
        return self.encoder.get(token, self.unk_id)

    def _convert_id_to_token(self, index: int) -> str | None:
        return self.decoder.get(index)

    @staticmethod
    def clean_up_tokenization(out_string: str) -> str:
        return out_string

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return bytes(self.byte_decoder[char] for char in "".join(tokens)).decode("utf-8", "replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        if not os.path.isdir(save_directory):
            raise ValueError(f"vocabulary path ({save_directory}) should be a directory")
        name = (filename_prefix + "-" if filename_prefix else "") + VOCAB_FILES_NAMES["vocab_file"]
        target = os.path.join(save_directory, name)
        if os.path.abspath(self.vocab_file) != os.path.abspath(target):
            shutil.copyfile(self.vocab_file, target)
        return (target,)
