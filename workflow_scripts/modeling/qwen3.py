"""Qwen3-30B-A3B-Base's tokenizer as its hub repository ships it, built offline for the toy Qwen3-MoE.

The hub ships ``vocab.json`` + ``merges.txt`` (151,643 byte-level BPE tokens) and the same BPE in
``tokenizer.json`` with 26 added tokens above it (``<|endoftext|>`` at 151,643, ``<|im_start|>``,
``<|im_end|>``, ..., ``<think>``/``</think>`` last, at 151,667/151,668), so ``len(tokenizer)`` is
151,669 against the model's 151,936 rows; its ``tokenizer_config.json`` names ``Qwen2Tokenizer``,
eos and pad ``<|endoftext|>``, no bos, and a chat template with a thinking block. transformers
loads ``Qwen2Tokenizer`` by rebuilding the normalizer (NFC), pre-tokenizer (its split regex,
then byte-level) and decoder itself from the vocabulary and merges; only the post-processor and
the added tokens come from the files. The toy carries the same four files over a BPE learned
from the toy corpus with that pre-tokenizer.
"""

# ruff: noqa: E501  (the chat template is the hub's text verbatim)
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from workflow_scripts.modeling import bpe
from workflow_scripts.modeling.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

EOS_TOKEN = "<|endoftext|>"

#: The class ``tokenizer_config.json`` names, as the hub's does.
TOKENIZER_CLASS = "Qwen2Tokenizer"

#: The added tokens in id order from the BPE's size on, and whether each is special: Qwen's
#: tool and think tags are added but not special (a decode that skips special tokens keeps them).
ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

#: ``additional_special_tokens`` of the hub's config: the chat and vision markers.
EXTRA_SPECIAL_TOKENS: tuple[str, ...] = tuple(name for name, _ in ADDED_TOKENS[1:14])

#: Qwen's pre-tokenizer split (single digits, a letter run with one leading non-letter, ...),
#: applied before byte-level bytes: the regex ``Qwen2Tokenizer`` rebuilds at load.
PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: Qwen3's ``chat_template``: ChatML turns, tools, and the reasoning handling that renders the
#: last assistant turn after a ``<think>`` block (empty when the message has no reasoning).
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""


def pre_tokenizer():
    """The ``tokenizers`` pre-tokenizer: ``PATTERN`` isolated, then ByteLevel without its own regex."""
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )


def write_tokenizer(folder: str | Path, texts: Iterable[str], ranks: int) -> Path:
    """Write ``vocab.json``, ``merges.txt``, ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``.

    The BPE of ``ranks`` tokens is learned from ``texts`` (``bpe.train_bpe``, NFC-normalised as
    the hub's; fewer tokens when the corpus runs out of frequent pairs). ``tokenizer.json`` adds
    ``ADDED_TOKENS`` from id ``ranks`` on, with a byte-level post-processor and decoder;
    ``tokenizer_config.json`` names ``TOKENIZER_CLASS``, lists the added tokens in
    ``added_tokens_decoder``, the chat markers as extra special tokens, eos and pad
    ``<|endoftext|>``, no bos and no unk, and ``CHAT_TEMPLATE``.
    """
    from tokenizers import decoders, normalizers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    normalize = normalizers.NFC()
    backend = bpe.train_bpe((normalize.normalize_str(text) for text in texts), ranks, pre_tokenizer())
    backend.normalizer = normalize
    backend.decoder = decoders.ByteLevel()
    backend.model.save(str(folder))  # vocab.json, merges.txt
    first = backend.get_vocab_size()
    added = [
        bpe.added_token(first + offset, name, special=special)
        for offset, (name, special) in enumerate(ADDED_TOKENS)
    ]
    post_processor = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    bpe.write_json(folder / "tokenizer.json", bpe.with_added_tokens(backend, added, post_processor))
    decoder = {
        str(token["id"]): {
            key: token[key] for key in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
        }
        for token in added
    }
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": list(EXTRA_SPECIAL_TOKENS),
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": EOS_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": TOKENIZER_CLASS,
        "unk_token": None,
    }
    bpe.write_json(folder / "tokenizer_config.json", config)
    return folder


def toy_tokenizer(texts: Iterable[str], ranks: int, folder: str | Path) -> PreTrainedTokenizerBase:
    """Qwen3's kind of tokenizer with ``ranks`` BPE tokens learned from ``texts``, in ``folder``."""
    return load_tokenizer(write_tokenizer(folder, texts, ranks))


def model_vocab_size(tokenizer: PreTrainedTokenizerBase) -> int:
    """The toy model's ``vocab_size``: more rows than tokens, as Qwen3's 151,936 for 151,669."""
    return bpe.model_rows(len(tokenizer))
