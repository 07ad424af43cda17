"""Byte-level BPE vocabularies learned offline, and the ``tokenizer.json`` pieces the hubs' files carry.

The toy DeepSeek-V2 and Qwen3 ship their hubs' kind of tokenizer (``modeling.deepseek_v2``,
``modeling.qwen3``): a byte-level BPE whose ids ``0..size-1`` are the 256 byte symbols and the
learned merges, with the family's special tokens added above them, as the real vocabularies have
theirs above 100,000 and 151,643 BPE tokens. ``tokenizers`` is imported inside functions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Embedding rows are the tokenizer's length rounded up to this multiple, so that, as in both
#: hub models (DeepSeek-V2-Lite: 102,400 rows for 100,002 tokens; Qwen3: 151,936 for 151,669),
#: the model has rows no token maps to.
ROW_MULTIPLE = 128


def train_bpe(texts: Iterable[str], size: int, pre_tokenizer: Any, min_frequency: int = 2) -> Any:
    """A ``tokenizers.Tokenizer`` whose BPE holds at most ``size`` tokens learned from ``texts``.

    Ids ``0..255`` are the byte-level alphabet, the merges follow in the order they were
    learned; no special token is in the model (the families add theirs above it). Training
    stops at ``size`` tokens or when no pair reaches ``min_frequency``; the result is a function
    of the texts and arguments only.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if size <= 256:
        raise ValueError(f"a vocabulary of {size} tokens leaves no merge above the 256 bytes")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        min_frequency=min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return backend


def added_token(token_id: int, content: str, *, special: bool = True, normalized: bool = False) -> dict:
    """One entry of ``tokenizer.json``'s ``added_tokens``."""
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": normalized,
        "special": special,
    }


def with_added_tokens(backend: Any, added: list[dict], post_processor: dict | None) -> dict:
    """``backend``'s ``tokenizer.json`` as a dict, with ``added`` tokens above its vocabulary.

    ``added`` must take consecutive ids from the BPE's size on, which is where ``tokenizers``
    puts a token it adds, so the written file and the loaded tokenizer agree on every id.
    """
    payload = json.loads(backend.to_str())
    first = len(payload["model"]["vocab"])
    ids = [token["id"] for token in added]
    if ids != list(range(first, first + len(added))):
        raise ValueError(f"added tokens take ids {ids}, not the consecutive ids from {first}")
    payload["added_tokens"] = added
    payload["post_processor"] = post_processor
    return payload


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` as the hubs' files are: indented, non-ASCII characters as they are."""
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def model_rows(tokenizer_length: int) -> int:
    """The toy model's ``vocab_size``: ``tokenizer_length`` rounded up to ``ROW_MULTIPLE``."""
    return -(-tokenizer_length // ROW_MULTIPLE) * ROW_MULTIPLE
