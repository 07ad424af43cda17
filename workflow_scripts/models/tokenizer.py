"""Byte-level BPE tokenizer for the toy models, trained offline on local text.

``train_tokenizer`` trains a byte-level BPE with the ``tokenizers`` library and wraps it
as a ``transformers.PreTrainedTokenizerFast`` with bos/eos/pad set and a Jinja chat
template, so the toy checkpoints load with ``AutoTokenizer`` and ``apply_chat_template``
like the paper's models.

Chat format (``CHAT_TEMPLATE``)::

    <|bos|><|system|>{system}<|eos|><|user|>{prompt}<|eos|><|assistant|>{answer}<|eos|>

Every turn is its role token, the message content verbatim (no stripping, no added
whitespace) and ``<|eos|>``; ``add_generation_prompt=True`` appends ``<|assistant|>``.
Content is therefore delimited by special tokens only, which is what makes the span labels
of ``answer_span_mask`` exact.

``answer_span_mask`` labels the tokens of a rendered (prompt, answer) pair with the span
convention of ``workflow_scripts.routing``: ``0`` (Q), ``1`` (A), ``-1`` (no span).

torch and transformers are imported inside the functions that need them, so importing this
module is cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|eos|>"
PAD_TOKEN = "<|pad|>"
SYSTEM_TOKEN = "<|system|>"
USER_TOKEN = "<|user|>"
ASSISTANT_TOKEN = "<|assistant|>"

#: Special tokens in id order: they take ids 0..5 in every trained vocabulary.
SPECIAL_TOKENS: tuple[str, ...] = (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, SYSTEM_TOKEN, USER_TOKEN, ASSISTANT_TOKEN)

Q_SPAN = 0
A_SPAN = 1
NO_SPAN = -1

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role: ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|' + message['role'] + '|>' }}{{ message['content'] }}{{ eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    *,
    min_frequency: int = 2,
    model_max_length: int = 4096,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts`` and wrap it with special tokens and a chat template.

    Args:
        texts: training corpus (any iterable of strings; consumed once).
        vocab_size: target vocabulary size including the 256 byte symbols and the
            special tokens. Training stops earlier when no pair reaches ``min_frequency``,
            so ``len(tokenizer)`` can be smaller on a tiny corpus.
        min_frequency: minimum pair count for a merge.
        model_max_length: stored as the tokenizer's ``model_max_length``.

    Returns:
        A ``PreTrainedTokenizerFast`` with ``bos_token`` ``<|bos|>``, ``eos_token``
        ``<|eos|>``, ``pad_token`` ``<|pad|>``, the role tokens as additional special
        tokens and ``chat_template`` set to ``CHAT_TEMPLATE``. The result is a function of
        the texts and arguments only: training twice gives identical ``tokenizer.json``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size {vocab_size} is below the byte alphabet plus special tokens")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[SYSTEM_TOKEN, USER_TOKEN, ASSISTANT_TOKEN],
        model_max_length=model_max_length,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _render(tokenizer: PreTrainedTokenizerFast, messages: list[dict[str, str]], generation: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)


def answer_span_mask(
    tokenizer: PreTrainedTokenizerFast, prompt: str, answer: str
) -> tuple[list[int], list[int]]:
    """Tokenise the chat rendering of one (prompt, answer) pair and label every token's span.

    The pair is rendered through the tokenizer's chat template as
    ``[user: prompt, assistant: answer]`` and the rendered string is tokenised once, with
    ``return_offsets_mapping``. The character spans of the prompt and the answer in the
    rendered string are located from the template itself: the answer starts where the
    rendering of ``[user: prompt]`` with ``add_generation_prompt=True`` ends, and the
    prompt is the first occurrence of ``prompt`` before that point.

    Labelling rule, per token with character span ``[s, e)``:

    * special tokens (bos, role tokens, eos) and zero-width tokens get ``-1``;
    * otherwise the token gets ``0`` (Q) if ``[s, e)`` overlaps the prompt's characters,
      ``1`` (A) if it overlaps the answer's characters (the larger overlap wins if both),
      and ``-1`` if it overlaps neither (template text).

    Since the template delimits content with special tokens only, no text token straddles
    content and template, so the Q tokens decode to exactly the prompt and the A tokens to
    exactly the answer (a multi-byte character split over byte-level tokens is covered by
    all of its tokens, which all carry its span).

    Returns:
        ``(input_ids, span_ids)``: two equally long lists of ints.
    """
    prompt_turn = [{"role": "user", "content": prompt}]
    full = _render(tokenizer, [*prompt_turn, {"role": "assistant", "content": answer}], generation=False)
    prefix = _render(tokenizer, prompt_turn, generation=True)
    if not full.startswith(prefix) or not full.startswith(answer, len(prefix)):
        raise ValueError("chat template does not render the answer right after the generation prompt")
    a_start, a_end = len(prefix), len(prefix) + len(answer)
    q_start = full.find(prompt) if prompt else a_start
    if q_start < 0 or q_start + len(prompt) > a_start:
        raise ValueError("prompt not found before the answer in the rendered chat")
    q_end = q_start + len(prompt)

    encoding = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    input_ids: list[int] = list(encoding["input_ids"])
    offsets: Sequence[tuple[int, int]] = encoding["offset_mapping"]
    special = set(tokenizer.all_special_ids)
    span_ids = [
        _label(tok, s, e, special, (q_start, q_end), (a_start, a_end))
        for tok, (s, e) in zip(input_ids, offsets, strict=True)
    ]
    return input_ids, span_ids


def _overlap(s: int, e: int, span: tuple[int, int]) -> int:
    return max(0, min(e, span[1]) - max(s, span[0]))


def _label(token_id: int, s: int, e: int, special: set[int], q: tuple[int, int], a: tuple[int, int]) -> int:
    if token_id in special or e <= s:
        return NO_SPAN
    q_overlap, a_overlap = _overlap(s, e, q), _overlap(s, e, a)
    if q_overlap == 0 and a_overlap == 0:
        return NO_SPAN
    return Q_SPAN if q_overlap >= a_overlap else A_SPAN
