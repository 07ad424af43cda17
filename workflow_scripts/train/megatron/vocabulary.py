"""The token ids a model's data can take against the rows its embedding has, under Megatron-Bridge.

Bridge 0.6.2 builds the model with the HF base's ``vocab_size`` rows and does not pad a preset
vocabulary (``megatron/bridge/training/setup.py``, ``_validate_and_set_vocab_size``: a model
vocabulary at least the tokenizer's is kept, ``should_pad_vocab`` false), but refuses at
start-up, on every rank, a tokenizer longer than it: ``len(tokenizer)``, which is Megatron-Core's
``HuggingFaceTokenizer.vocab_size``. Moonlight's tokenizer is longer by design: its remote code
reserves 256 + 2 special ids above its 163,584 BPE ranks, and the model's 163,840 rows stop two
short. Those two ids have no embedding in the HF model either, and text takes them only by
spelling ``<|reserved_token_163840|>`` or ``<|reserved_token_163841|>``.

So the rule is on the ids the data can take, not on the tokenizer's length: the tokenizer's
named tokens (bos, eos, pad, unk, its extra special and added tokens: what chat templates and
generation write) lie below the rows (``check_vocabulary``, at import and training), every
training row's tokens too (``check_row``, as the span table encodes each row), and Bridge's
start-up then compares its model with the rows (``bridge_accepts_reserved_ids``). Bridge's own
Moonlight recipe instead sets the model vocabulary to 163,842: its HF loader pads the embedding
and the output layer with zero rows (``ColumnParallelMapping.hf_to_megatron``), whose logits
then enter every softmax of training, and its export gathers every row back, two more than the
HF config counts. Here the embedding stays the base's, as in the local backend and the export.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.errors import UserInputError


def named_token_ids(tokenizer: Any) -> list[int]:
    """The ids of the tokenizer's special and added tokens, which text and templates write by name."""
    return sorted({*tokenizer.all_special_ids, *tokenizer.added_tokens_decoder})


def check_vocabulary(tokenizer: Any, hf_config: dict[str, Any], hf_base: Path) -> int:
    """The model's embedding rows, once no named token of the tokenizer lies at or past them.

    A tokenizer may be longer than the model (Moonlight's, by 2 reserved ids); a named token
    past the rows (a token added after pretraining, a tokenizer of another model) would be
    written by every chat template or generation that uses it, and is refused naming both sizes.
    """
    rows = int(hf_config["vocab_size"])
    past = [token_id for token_id in named_token_ids(tokenizer) if token_id >= rows]
    if past:
        names = tokenizer.convert_ids_to_tokens(past)
        raise UserInputError(
            f"{hf_base}: the tokenizer has {len(tokenizer)} tokens, the model's vocab_size "
            f"(config.json) {rows}; its named tokens {dict(zip(past, names, strict=True))} have no "
            "embedding row"
        )
    return rows


def check_row(row: int, token_ids: Sequence[int], rows: int) -> None:
    """Raise ``ValueError`` naming the split row and its token when an id has no embedding row."""
    for position, token_id in enumerate(token_ids):
        if token_id >= rows:
            raise ValueError(
                f"split row {row}: token {position} is id {token_id}, past the model's {rows} embedding "
                "rows: a reserved special token spelled out in the text, or another model's tokenizer"
            )


def bridge_accepts_reserved_ids(rows: int) -> None:
    """Make Bridge's start-up compare the model with the ``rows`` ids data can take, not ``len(tokenizer)``.

    Patches ``_validate_and_set_vocab_size`` of ``megatron.bridge.training.setup`` in this
    process (the training entry point, after ``check_vocabulary``): a tokenizer longer than
    ``rows`` counts as ``rows`` long, so a preset model vocabulary of ``rows`` is kept
    unpadded, and a smaller one is still refused by Bridge.
    """
    import megatron.bridge.training.setup as bridge_setup

    original = bridge_setup._validate_and_set_vocab_size

    def validate(
        model_vocab_size: int | None, tokenizer_vocab_size: int, use_tokenizer_vocab_size: bool = False
    ) -> tuple[int, bool]:
        return original(model_vocab_size, min(tokenizer_vocab_size, rows), use_tokenizer_vocab_size)

    bridge_setup._validate_and_set_vocab_size = validate
