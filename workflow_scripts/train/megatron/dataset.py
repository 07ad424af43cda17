"""A training split as Megatron-Bridge's chat dataset: one JSON line per row, its prior row id kept.

Bridge's ``GPTSFTChatDataset`` applies the tokenizer's chat template to ``messages`` and
copies every other key of a line into the batch's ``metadata``; ``prior_row`` there is the
row's index in the split and in the ``(N, 2, L, E)`` prior, which the ``forward_step`` reads.
The turns are those of the local backend's ``answer_span_mask``: the prompt as the user
turn, the answer as the assistant turn, no system turn. ``bridge_chat_template`` gives the
template Bridge renders them with, so that its loss mask is the local backend's labels.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import write_text
from workflow_scripts.modeling.tokenizer import check_rendering, generation_template, turn_end_id
from workflow_scripts.train.megatron.spans import ROW_ID_KEY

#: The file name Bridge's ``GPTSFTDatasetConfig(dataset_root=...)`` reads for training.
TRAINING_FILE = "training.jsonl"


def chat_lines(prompts: Iterable[str], answers: Iterable[str]) -> Iterator[str]:
    """One JSON line per (prompt, answer), row ids 0..N-1 in split order."""
    for row, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
        messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
        yield json.dumps({"messages": messages, ROW_ID_KEY: row}, ensure_ascii=False) + "\n"


def write_chat_dataset(prompts: Iterable[str], answers: Iterable[str], out_dir: str | Path) -> Path:
    """Write ``<out_dir>/training.jsonl`` atomically; returns its path."""
    path = Path(out_dir) / TRAINING_FILE
    write_text(path, "".join(chat_lines(prompts, answers)))
    return path


def bridge_chat_template(tokenizer: Any, prompts: Sequence[str], answers: Sequence[str]) -> str:
    """The chat template Bridge's dataset renders the rows with, masking what the local backend trains on.

    Bridge 0.6.2 builds its assistant-only loss mask from a ``{% generation %}`` block or from
    turn markers it knows (ChatML, Kimi/Moonlight, ...) and raises on the first sample of any
    other template (DeepSeek-V2's "User: / Assistant:"); its ChatML boundaries also take
    Qwen3's empty think block and the newline after ``<|im_end|>``. So a fast tokenizer gets
    ``modeling.tokenizer.generation_template``, whose block holds exactly the local backend's
    answer labels, checked to render every row as the model's own template does: the tokens
    trained on are the model's.

    A generation block needs the tokenizer's ``char_to_token``, which a Python-backend one
    (Moonlight's remote code) lacks: transformers raises and Bridge's ``tokenize_chat_example``
    lets the error through. Such a tokenizer keeps its own template, and Bridge masks by the
    turn markers it knows there (``marker_masked_template``).
    """
    if not tokenizer.is_fast:
        return marker_masked_template(tokenizer)
    template = generation_template(tokenizer)
    check_rendering(tokenizer, template, prompts, answers)
    return template


def marker_masked_template(tokenizer: Any) -> str:
    """The tokenizer's own chat template, once Bridge's boundary mask of it is the local backend's labels.

    Bridge infers the boundaries from markers in the template (Moonlight's Kimi markers: an
    assistant turn opens with ``<|im_assistant|>assistant<|im_middle|>`` and ends with
    ``<|im_end|>``) and masks the turn's content and its end token: the local backend's A-span
    tokens and the token that closes the turn (``turn_end_id``), as long as the end Bridge
    scans for is that one token and the turn's opening markers stay out. Anything else is
    refused here rather than trained on.
    """
    from megatron.bridge.data.conversation_processing import infer_assistant_mask_boundary_config

    boundaries = infer_assistant_mask_boundary_config(tokenizer)
    closing = turn_end_id(tokenizer)
    if (
        boundaries is None
        or boundaries.role_end_tokens.get("assistant") != [closing]
        or "assistant" not in boundaries.include_end_tokens_for_roles
        or "assistant" in boundaries.include_start_tokens_for_roles
    ):
        raise ValueError(
            "the tokenizer has no offsets (a Python backend), so Bridge cannot mask by a generation "
            "block, and its chat template has no turn markers Bridge masks by that end at the token "
            f"closing an assistant turn ({closing}): Bridge would not train on the local backend's tokens"
        )
    return tokenizer.chat_template
