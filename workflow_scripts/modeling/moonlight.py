"""Moonlight-16B-A3B's tokenizer as its hub repository ships it, built offline for the toy Moonlight.

The hub's tokenizer is remote code (``tokenization_moonshot.py``, class ``TikTokenTokenizer``)
over a ``tiktoken`` rank file; transformers loads it with ``trust_remote_code`` as a Python-backend
tokenizer, without offsets. The toy Moonlight carries the same kind: our own
``hub_code/tokenization_moonshot.py``, a rank file learned from the toy corpus, and a
``tokenizer_config.json`` with the hub's ``auto_map``, special tokens and chat template. Its
special ids sit at the hub's offsets above the ranks, and the toy model's ``vocab_size`` is the
ranks + 256, two short of ``len(tokenizer)``, as Moonlight's 163,840 against 163,842.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from workflow_scripts.modeling import bpe
from workflow_scripts.modeling.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: The remote code the toy Moonlight ships, under the hub's file name; the model's code, never imported here.
REMOTE_CODE = Path(__file__).with_name("hub_code") / "tokenization_moonshot.py"
RANK_FILE = "tiktoken.model"

#: Special ids above the ranks that the model's ``vocab_size`` counts; the tokenizer reserves
#: ``EXTRA_TOKENIZER_IDS`` more (``num_reserved_special_tokens + 2`` in the hub's class).
RESERVED_IDS = 256
EXTRA_TOKENIZER_IDS = 2

#: Named special tokens by their offset above the ranks (Moonlight's ``added_tokens_decoder``
#: from id 163,584); the remote class names every other reserved id ``<|reserved_token_{id}|>``.
NAMED_SPECIAL_TOKENS: dict[int, str] = {
    0: "[BOS]",
    1: "[EOS]",
    2: "<|im_end|>",
    3: "<|im_user|>",
    4: "<|im_assistant|>",
    6: "<|start_header_id|>",
    7: "<|end_header_id|>",
    9: "[EOT]",
    10: "<|im_system|>",
    17: "<|im_middle|>",
    254: "[UNK]",
    255: "[PAD]",
}
EXTRA_SPECIAL_TOKENS = ("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>")

#: The remote class's pre-tokenizer (its ``pat_str``), which the rank training splits text with too.
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

#: Moonlight-16B-A3B's ``chat_template``: Kimi markers, a default system turn when the
#: conversation has none, and an assistant turn that ends in ``<|im_end|>``, not eos.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}{%- if loop.first and messages[0]['role'] != 'system' -%}"
    "{{'<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>'}}{%- endif -%}"
    "{%- if message['role'] == 'system' -%}{{'<|im_system|>'}}{%- endif -%}"
    "{%- if message['role'] == 'user' -%}{{'<|im_user|>'}}{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}{{'<|im_assistant|>'}}{%- endif -%}"
    "{{- message['role'] -}}{{'<|im_middle|>'}}{{message['content']}}{{'<|im_end|>'}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{'<|im_assistant|>assistant<|im_middle|>'}}{%- endif -%}"
)


def train_ranks(texts: Iterable[str], size: int, min_frequency: int = 2) -> list[bytes]:
    """Byte-level BPE tokens learned from ``texts``, in rank order: the 256 bytes, then each merge.

    Text is pre-split with ``PATTERN`` and merged by ``tokenizers``' trainer; a merged token
    ranks above both of its parts, as tiktoken's merging needs. Training stops at ``size``
    tokens or when no pair reaches ``min_frequency``. The result is a function of the texts and
    arguments only.
    """
    from tokenizers import Regex, pre_tokenizers

    pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend = bpe.train_bpe(texts, size, pre_tokenizer, min_frequency)
    byte_of = {char: byte for byte, char in _byte_level_chars().items()}
    tokens = [bytes([byte]) for byte in range(256)]
    for left, right in json.loads(backend.to_str())["model"]["merges"]:
        tokens.append(bytes(byte_of[char] for char in left + right))
    return tokens


def _byte_level_chars() -> dict[int, str]:
    """The byte-level alphabet: the printable character that stands for each byte (GPT-2's table)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return bytes_to_unicode()


def write_tokenizer(folder: str | Path, tokens: Sequence[bytes]) -> Path:
    """Write the tokenizer's files into ``folder``: rank file, remote code, ``tokenizer_config.json``.

    The config is the hub's shape: ``auto_map`` to ``tokenization_moonshot.TikTokenTokenizer``
    (no fast class), ``tokenizer_class``, the named special tokens in ``added_tokens_decoder``
    at their offsets above the ranks, bos ``[BOS]``, eos ``[EOS]``, pad ``[PAD]``, unk ``[UNK]``,
    the Kimi markers as extra special tokens and ``CHAT_TEMPLATE``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{base64.b64encode(token).decode()} {rank}\n" for rank, token in enumerate(tokens)]
    (folder / RANK_FILE).write_text("".join(lines))
    shutil.copyfile(REMOTE_CODE, folder / REMOTE_CODE.name)
    first = len(tokens)
    added = {
        str(first + offset): {
            "content": name,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for offset, name in sorted(NAMED_SPECIAL_TOKENS.items())
    }
    config = {
        "added_tokens_decoder": added,
        "additional_special_tokens": list(EXTRA_SPECIAL_TOKENS),
        "auto_map": {"AutoTokenizer": [f"{REMOTE_CODE.stem}.TikTokenTokenizer", None]},
        "bos_token": "[BOS]",
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "[EOS]",
        "pad_token": "[PAD]",
        "tokenizer_class": "TikTokenTokenizer",
        "unk_token": "[UNK]",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return folder


def toy_tokenizer(texts: Iterable[str], ranks: int, folder: str | Path) -> PreTrainedTokenizerBase:
    """Moonlight's kind of tokenizer with ``ranks`` BPE tokens learned from ``texts``, written to ``folder``.

    Fewer ranks when the corpus runs out of frequent pairs. The model's ``vocab_size`` is the
    ranks + 256 reserved special ids (``model_vocab_size``), as Moonlight's 163,584 + 256.
    ``folder`` must outlive the tokenizer, whose ``save_pretrained`` copies its rank file.
    """
    return load_tokenizer(write_tokenizer(folder, train_ranks(texts, ranks)))


def model_vocab_size(tokenizer: PreTrainedTokenizerBase) -> int:
    """The model's ``vocab_size`` for a Moonlight tokenizer: its length less the 2 ids no embedding has."""
    return len(tokenizer) - EXTRA_TOKENIZER_IDS
