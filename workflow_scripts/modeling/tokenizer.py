"""Byte-level BPE tokenizer for the toy models, trained offline on local text, and Q/A span labels.

``train_tokenizer`` wraps a ``tokenizers`` BPE as a ``PreTrainedTokenizerFast`` with a generic
chat template (the toy bases ship their hubs' kinds instead: ``modeling.moonlight``,
``modeling.deepseek_v2``, ``modeling.qwen3``); message content is delimited by special tokens
only, which makes ``answer_span_mask``'s labels exact: ``0`` (Q), ``1`` (A), ``-1`` (no span),
the convention of ``workflow_scripts.routing``. The span labels and the template analysis take
any of them, also a Python-backend tokenizer, which has no offsets (Moonlight's remote code).
torch and transformers are imported inside functions, so importing this module is cheap.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

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


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerBase:
    """A checkpoint's tokenizer as every stage loads it: AutoTokenizer, offline, with the hub's code.

    Moonlight ships its tokenizer class as remote code (``trust_remote_code``); one function so
    that priors, training, Bridge's import and export and generation all meet the same object.
    """
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True, local_files_only=True)


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

    Chat format (``CHAT_TEMPLATE``)::

        <|bos|><|system|>{system}<|eos|><|user|>{prompt}<|eos|><|assistant|>{answer}<|eos|>

    Every turn is its role token, the message content verbatim (no stripping, no added
    whitespace) and ``<|eos|>``; ``add_generation_prompt=True`` appends ``<|assistant|>``.
    Content is therefore delimited by special tokens only, which is what makes the span labels
    of ``answer_span_mask`` exact.

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


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], generation: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)


def _pair(prompt: str, answer: str | None) -> list[dict[str, str]]:
    """The conversation of one row: the prompt as the user turn, the answer (if any) as the assistant's."""
    turns = [{"role": "user", "content": prompt}]
    return turns if answer is None else [*turns, {"role": "assistant", "content": answer}]


def _content_start(full: str, empty: str, content: str, after: int) -> int:
    """Where ``content`` starts in ``full``, the rendering of which ``empty`` renders with it left empty.

    The template renders a message's content verbatim when ``full`` is ``empty`` with ``content``
    inserted at one point ``p`` (``full[:p] == empty[:p]``, ``full[p + len(content):] == empty[p:]``).
    The template text around the content may differ from the generation prompt (DeepSeek-V2's
    turn is ``'Assistant: '`` after the prompt ``'Assistant:'``, Qwen3 inserts an empty think
    block), so the content is located this way rather than after the generation prompt. When
    several points fit (content that repeats the template text next to it), the first at or
    after ``after`` is taken, else the last before it.
    """
    size = len(content)
    if len(full) != len(empty) + size:
        raise ValueError("chat template does not render the message content verbatim")

    def fits(p: int) -> bool:
        return full[:p] == empty[:p] and full[p + size :] == empty[p:]

    def points(start: int, stop: int) -> Iterator[int]:
        p = full.find(content, start, stop + size)
        while 0 <= p <= stop:
            if fits(p):
                yield p
            p = full.find(content, p + 1, stop + size)

    first_after = next(points(after, len(empty)), None)
    if first_after is not None:
        return first_after
    before = list(points(0, after - 1)) if after else []
    if not before:
        raise ValueError("chat template does not render the message content verbatim")
    return before[-1]


def answer_span_mask(
    tokenizer: PreTrainedTokenizerBase, prompt: str, answer: str, max_length: int | None = None
) -> tuple[list[int], list[int]]:
    """Tokenise the chat rendering of one (prompt, answer) pair and label every token's span.

    The pair is rendered through the tokenizer's chat template as
    ``[user: prompt, assistant: answer]``. The character spans of the prompt and the answer
    in the rendered string are located from the template itself: each is where the rendering
    differs from the one with that message left empty (``_content_start``), which also holds
    for templates whose assistant turn does not start with the generation prompt
    (DeepSeek-V2, Qwen3). A fast tokenizer tokenises the rendered string once, with offsets;
    a Python-backend one, which has no offsets (Moonlight's remote code), tokenises it by its
    pieces (``_encode_pieces``), proven to give the whole string's tokens.

    Labelling rule, per token with character span ``[s, e)``:

    * special tokens (bos, role tokens, eos) and zero-width tokens get ``-1``;
    * otherwise the token gets ``0`` (Q) if ``[s, e)`` overlaps the prompt's characters,
      ``1`` (A) if it overlaps the answer's characters (the larger overlap wins, Q on a
      tie), and ``-1`` if it overlaps neither (template text).

    Since the template delimits content with special tokens only, no text token straddles
    content and template, so the Q tokens decode to exactly the prompt and the A tokens to
    exactly the answer (a multi-byte character split over byte-level tokens is covered by
    all of its tokens, which all carry its span).

    Args:
        tokenizer, prompt, answer: the tokenizer (with its chat template) and the pair.
        max_length: when given, only the first ``max_length`` tokens are labelled and
            returned; the result equals the untruncated one cut to ``max_length`` (every
            token's label depends on that token alone).

    Returns:
        ``(input_ids, span_ids)``: two equally long lists of ints.
    """
    input_ids, span_ids = answer_span_arrays(tokenizer, prompt, answer, max_length)
    return input_ids.tolist(), span_ids.tolist()


#: Message contents the template is rendered with to cut it into its literal pieces; any text
#: the template renders verbatim would do (``_content_start`` locates it exactly).
_PROMPT_PROBE, _ANSWER_PROBE = "prompt-probe", "answer-probe"


def generation_template(tokenizer: PreTrainedTokenizerBase) -> str:
    """The tokenizer's chat template for one ``[user, assistant]`` row, with a ``{% generation %}`` block.

    Megatron-Bridge's assistant-only loss mask follows a generation block. The block holds
    what the local backend trains on (``modeling.batches.labels_for``): the answer and the one
    token that closes its turn (DeepSeek-V2: eos; Moonlight: ``<|im_end|>``; Qwen3:
    ``<|im_end|>``, not the newline after it, nor the empty think block before the answer).
    The template is cut, by rendering it, into the literal text before the prompt, between
    prompt and answer, and after the answer (and after a lone user turn, with and without
    the generation prompt); the result renders those pieces around the messages' contents.
    It renders the conversations of the chat dataset only and refuses any other shape;
    ``check_rendering`` confirms it renders a split's rows as the tokenizer's own does.
    Fast tokenizers only (the closing token's text comes from offsets): Bridge's generation
    block itself needs a fast tokenizer's ``char_to_token``.
    """
    full, q, a = _probe_row(tokenizer)
    generation_prompt = _render(tokenizer, _pair(_PROMPT_PROBE, None), generation=True)
    prompt_end = q + len(_PROMPT_PROBE)
    user_turn = _render(tokenizer, _pair(_PROMPT_PROBE, None), generation=False)
    if not (user_turn.startswith(full[:prompt_end]) and generation_prompt.startswith(full[:prompt_end])):
        raise ValueError("chat template renders a lone user turn unlike the start of a whole row")
    after_answer = full[a + len(_ANSWER_PROBE) :]
    closing = _first_token_text(tokenizer, after_answer)
    literal = {
        "before_prompt": full[:q],
        "before_answer": full[prompt_end:a],
        "closing": closing,
        "after_turn": after_answer[len(closing) :],
        "after_user": user_turn[prompt_end:],
        "generation_prompt": generation_prompt[prompt_end:],
    }
    text = {name: _jinja_string(value) for name, value in literal.items()}
    return (
        "{% if messages | length > 2 or messages[0]['role'] != 'user'"
        " or (messages | length == 2 and messages[1]['role'] != 'assistant') %}"
        "{{ raise_exception('this template renders one user turn and at most one assistant turn') }}"
        "{% endif %}"
        f"{{{{ {text['before_prompt']} }}}}{{{{ messages[0]['content'] }}}}"
        "{% if messages | length == 2 %}"
        f"{{{{ {text['before_answer']} }}}}"
        "{% generation %}{{ messages[1]['content'] }}"
        f"{{{{ {text['closing']} }}}}{{% endgeneration %}}{{{{ {text['after_turn']} }}}}"
        f"{{% elif add_generation_prompt %}}{{{{ {text['generation_prompt']} }}}}"
        f"{{% else %}}{{{{ {text['after_user']} }}}}{{% endif %}}"
    )


def _probe_row(tokenizer: PreTrainedTokenizerBase) -> tuple[str, int, int]:
    """The template's rendering of the probe row and where its prompt and its answer start."""
    full = _render(tokenizer, _pair(_PROMPT_PROBE, _ANSWER_PROBE), generation=False)
    generation_prompt = _render(tokenizer, _pair(_PROMPT_PROBE, None), generation=True)
    after_prompt = len(generation_prompt) if full.startswith(generation_prompt) else 0
    empty_answer = _render(tokenizer, _pair(_PROMPT_PROBE, ""), generation=False)
    q = _content_start(full, _render(tokenizer, _pair("", _ANSWER_PROBE), generation=False), _PROMPT_PROBE, 0)
    return full, q, _content_start(full, empty_answer, _ANSWER_PROBE, after_prompt)


def turn_end_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id of the token that closes an assistant turn in the tokenizer's chat template.

    The first token after the answer: eos for DeepSeek-V2 and the toys' own template,
    ``<|im_end|>`` for Moonlight (whose eos is ``[EOS]``) and Qwen3. It is what the local
    backend trains a model to emit after its answer (``modeling.batches.labels_for``), so
    generation stops there.
    """
    full, _, a = _probe_row(tokenizer)
    after = _plain_ids(tokenizer, full[a + len(_ANSWER_PROBE) :])
    if not after:
        raise ValueError("the chat template renders nothing after the assistant's answer")
    return after[0]


def _first_token_text(tokenizer: PreTrainedTokenizerBase, text: str) -> str:
    """The characters of ``text``'s first token ("" for empty text)."""
    if not text:
        return ""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return text[: offsets[0][1]]


def _jinja_string(text: str) -> str:
    """``text`` as a Jinja string literal, every character but letters, digits and spaces escaped.

    Jinja decodes Python's unicode escapes in string literals, so the template renders
    ``text`` unchanged; its source, though, never spells a chat marker: Bridge looks for
    markers it knows (``<|im_start|>assistant``, ``<|im_assistant|>``) in the template source
    and, finding them, would mask by its own turn boundaries instead of the generation block.
    """
    return (
        "'"
        + "".join(
            char if char.isascii() and (char.isalnum() or char == " ") else f"\\U{ord(char):08x}"
            for char in text
        )
        + "'"
    )


def check_rendering(
    tokenizer: PreTrainedTokenizerBase, template: str, prompts: Iterable[str], answers: Iterable[str]
) -> None:
    """Raise ``ValueError`` naming the first row that ``template`` renders unlike the tokenizer's own."""
    for row, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
        messages = _pair(prompt, answer)
        own = _render(tokenizer, messages, generation=False)
        other = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
        if other != own:
            raise ValueError(
                f"split row {row}: the generation-block template renders it unlike the model's own"
            )


def special_id_array(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """The tokenizer's special token ids as a sorted int64 array (for ``answer_span_arrays``)."""
    return np.unique(np.asarray(tokenizer.all_special_ids, dtype=np.int64))


def answer_span_arrays(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    answer: str,
    max_length: int | None = None,
    special_ids: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``answer_span_mask`` as numpy arrays: ``(input_ids int64, span_ids int8)``.

    ``special_ids`` (``special_id_array(tokenizer)``) may be passed to build it once for many
    rows; by default it is read from the tokenizer.
    """
    if max_length is not None and max_length < 0:
        raise ValueError(f"max_length must be non-negative, got {max_length}")
    full = _render(tokenizer, _pair(prompt, answer), generation=False)
    generation_prompt = _render(tokenizer, _pair(prompt, None), generation=True)
    after_prompt = len(generation_prompt) if full.startswith(generation_prompt) else 0
    empty_answer = _render(tokenizer, _pair(prompt, ""), generation=False)
    empty_prompt = _render(tokenizer, _pair("", answer), generation=False)
    a_start = _content_start(full, empty_answer, answer, after_prompt)
    q_start = _content_start(full, empty_prompt, prompt, 0)
    a_end, q_end = a_start + len(answer), q_start + len(prompt)
    if q_end > a_start:
        raise ValueError("chat template does not render the prompt before the answer")

    if special_ids is None:
        special_ids = special_id_array(tokenizer)
    if not tokenizer.is_fast:
        return _encode_pieces(tokenizer, full, (q_start, q_end), (a_start, a_end), max_length, special_ids)
    ids, offsets = _encode_with_offsets(tokenizer, full, max_length)
    input_ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    bounds = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    if len(bounds) != len(input_ids):
        raise ValueError(f"{len(input_ids)} token ids but {len(bounds)} offsets")
    return input_ids, _span_labels(input_ids, bounds, special_ids, (q_start, q_end), (a_start, a_end))


def _encode_pieces(
    tokenizer: PreTrainedTokenizerBase,
    full: str,
    q: tuple[int, int],
    a: tuple[int, int],
    max_length: int | None,
    special_ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``answer_span_arrays`` for a tokenizer without offsets: the rendering tokenised piece by piece.

    The rendered row is cut at the prompt's and the answer's bounds into five pieces (template,
    prompt, template, answer, template), each tokenised alone; a piece's tokens take its label
    (special tokens ``-1``, as with offsets). This is exact when no token straddles a cut,
    which the templates that delimit content with special tokens guarantee (a tokenizer splits
    on its special tokens before anything else), and it is checked on every row: the pieces'
    tokens must be the whole rendering's, which is what the model, Bridge and generation see.
    A template whose text merges with the content (DeepSeek-V2's ``"User: "``) needs a fast
    tokenizer's offsets, and is refused here.

    Chosen over converting Moonlight's tokenizer to a fast one at download: the tokens stay the
    remote code's own, with nothing to prove equivalent on every text.
    """
    bounds = (0, q[0], q[1], a[0], a[1], len(full))
    labels = (NO_SPAN, Q_SPAN, NO_SPAN, A_SPAN, NO_SPAN)
    ids: list[int] = []
    spans: list[int] = []
    for start, stop, label in zip(bounds, bounds[1:], labels, strict=False):
        piece = _plain_ids(tokenizer, full[start:stop])
        ids.extend(piece)
        spans.extend([label] * len(piece))
    if ids != _plain_ids(tokenizer, full):
        raise ValueError(
            "the chat rendering tokenised whole differs from its pieces tokenised one by one: a token "
            "straddles template and content, and this tokenizer has no offsets to label it"
        )
    input_ids = np.asarray(ids[:max_length], dtype=np.int64)
    span_ids = np.asarray(spans[:max_length], dtype=np.int8)
    span_ids[np.isin(input_ids, special_ids)] = NO_SPAN
    return input_ids, span_ids


def _plain_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """``text``'s token ids without added special tokens (as the chat template's rendering is tokenised)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


#: The first prefix tokenised when only ``max_length`` tokens are kept, in characters per kept
#: token: subword tokenizers average 3-5 characters per token on prose, code and LaTeX, so one
#: try nearly always suffices; a prefix that proves too short is doubled.
PREFIX_CHARS_PER_TOKEN = 6


def _plain_backend(tokenizer: PreTrainedTokenizerFast) -> Any:
    """The Rust tokenizer when calling it directly gives what ``tokenizer(...)`` would, else None.

    That holds when its state is the one ``tokenizer(...)`` sets for a plain call (no truncation,
    no padding, special tokens not split); the direct call skips the ``BatchEncoding`` conversion.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if (
        backend is not None
        and backend.truncation is None
        and backend.padding is None
        and bool(getattr(backend, "encode_special_tokens", False))
        == bool(getattr(tokenizer, "split_special_tokens", False))
    ):
        return backend
    return None


def _complete_words(encoding: Any, max_length: int, limit: int) -> bool:
    """Whether the first ``max_length`` tokens of a prefix's encoding are those of the whole text.

    Pre-tokenisation splits text into words left to right, each decided by its own characters
    and at most one character after it, and the model tokenises every word on its own. So a word
    that is followed by another word of the prefix, and ends before ``limit`` (clear of any
    added token the cut may have split), is the same word with the same tokens in the whole
    text. The first ``max_length`` tokens qualify when the word of the last of them does.
    """
    words = encoding.word_ids
    if len(words) <= max_length:
        return False
    end = max_length - 1
    while end + 1 < len(words) and words[end + 1] == words[max_length - 1]:
        end += 1
    return end + 1 < len(words) and encoding.offsets[end][1] < limit


def _prefix_encoding(backend: Any, text: str, max_length: int) -> Any:
    """The encoding of a prefix of ``text`` whose first ``max_length`` tokens are the whole text's.

    Tries ``max_length x PREFIX_CHARS_PER_TOKEN`` characters (plus a margin of the longest
    added token) and doubles that until ``_complete_words`` holds; None when the prefix would
    be the whole text.
    """
    added = backend.get_added_tokens_decoder().values()
    margin = max((len(token.content) for token in added), default=0) + 2
    cut = max_length * PREFIX_CHARS_PER_TOKEN + margin
    while cut < len(text):
        encoding = backend.encode(text[:cut], add_special_tokens=False)
        if _complete_words(encoding, max_length, cut - margin):
            return encoding
        cut *= 2
    return None


def _encode_with_offsets(
    tokenizer: PreTrainedTokenizerFast, text: str, max_length: int | None = None
) -> tuple[Sequence[int], Sequence[Any]]:
    """Token ids and character offsets of ``text`` without added special tokens, cut to ``max_length``.

    With ``max_length``, only a prefix of ``text`` is tokenised when ``_complete_words`` shows
    that its first ``max_length`` tokens are the whole text's (``_prefix_encoding``): a row of
    thousands of characters cut to a few hundred tokens costs a few hundred tokens' work. The
    result is the same as tokenising the whole text and cutting.
    """
    backend = _plain_backend(tokenizer)
    if backend is None:
        encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return encoding["input_ids"][:max_length], encoding["offset_mapping"][:max_length]
    encoding = None if max_length is None else _prefix_encoding(backend, text, max_length)
    if encoding is None:
        encoding = backend.encode(text, add_special_tokens=False)
    return encoding.ids[:max_length], encoding.offsets[:max_length]


def _span_labels(
    input_ids: np.ndarray,
    bounds: np.ndarray,
    special_ids: np.ndarray,
    q: tuple[int, int],
    a: tuple[int, int],
) -> np.ndarray:
    """Span label of every token (the rule of ``answer_span_mask``), vectorised: int8 ``(T,)``."""
    starts, ends = bounds[:, 0], bounds[:, 1]
    q_overlap = np.maximum(np.minimum(ends, q[1]) - np.maximum(starts, q[0]), 0)
    a_overlap = np.maximum(np.minimum(ends, a[1]) - np.maximum(starts, a[0]), 0)
    spans = np.where(q_overlap >= a_overlap, Q_SPAN, A_SPAN).astype(np.int8)
    special = (input_ids[:, None] == np.asarray(special_ids, dtype=np.int64)[None, :]).any(axis=1)
    outside = ((q_overlap == 0) & (a_overlap == 0)) | (ends <= starts) | special
    spans[outside] = NO_SPAN
    return spans
