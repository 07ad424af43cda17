"""The chat templates of the paper's three model families, on toy byte-level BPE tokenizers.

The templates are the families' own ``tokenizer_config.json`` ``chat_template`` texts:
Moonlight-16B-A3B (Kimi markers ``<|im_user|>``, ``<|im_assistant|>``, ``<|im_middle|>``;
eos ``[EOS]``, so an assistant turn ends in ``<|im_end|>``, not eos), DeepSeek-V2-Lite
("User: ... Assistant: ..." plain text, the turn ends in eos; no marker Bridge knows) and
Qwen3-30B-A3B (ChatML with its ``<think>`` handling; eos ``<|endoftext|>``, a turn ends in
``<|im_end|>\\n``). Each toy tokenizer carries its family's special tokens under the family's
names, so a template renders and tokenises as it does for the real model. These are fast
tokenizers; Moonlight's own kind, remote code with a Python backend, is
``moonlight_remote_tokenizer`` (the toy pipeline's, ``workflow_scripts.modeling.moonlight``).
"""

# ruff: noqa: E501  (the templates are the families' texts verbatim)
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from workflow_scripts.modeling.moonlight import CHAT_TEMPLATE as MOONLIGHT_TEMPLATE

DEEPSEEK_V2_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}"
    "{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}"
    "{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


QWEN3_TEMPLATE = r"""{%- if tools %}
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


@dataclass(frozen=True)
class ChatFamily:
    """A paper model family's chat template and the special tokens it names."""

    name: str
    template: str
    bos: str | None
    eos: str
    pad: str
    markers: tuple[str, ...]

    @property
    def special_tokens(self) -> list[str]:
        named = [token for token in (self.bos, self.eos, self.pad) if token is not None]
        return list(dict.fromkeys([*named, *self.markers]))


FAMILIES: dict[str, ChatFamily] = {
    "moonlight": ChatFamily(
        "moonlight",
        MOONLIGHT_TEMPLATE,
        "[BOS]",
        "[EOS]",
        "[PAD]",
        ("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"),
    ),
    "deepseek_v2_lite": ChatFamily(
        "deepseek_v2_lite",
        DEEPSEEK_V2_TEMPLATE,
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        (),
    ),
    "qwen3_30b_a3b": ChatFamily(
        "qwen3_30b_a3b",
        QWEN3_TEMPLATE,
        None,
        "<|endoftext|>",
        "<|endoftext|>",
        ("<|im_start|>", "<|im_end|>"),
    ),
}


def family_tokenizer(family: ChatFamily, texts: list[str], vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``texts`` with ``family``'s special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=family.special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    named = {"eos_token": family.eos, "pad_token": family.pad}
    if family.bos is not None:
        named["bos_token"] = family.bos
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        additional_special_tokens=list(family.markers),
        padding_side="right",
        clean_up_tokenization_spaces=False,
        **named,
    )
    tokenizer.chat_template = family.template
    return tokenizer


def moonlight_remote_tokenizer(texts: list[str], folder: Path, ranks: int = 344) -> PreTrainedTokenizerBase:
    """Moonlight's tokenizer as its hub ships it (remote code, Python backend), learned from ``texts``.

    Its files live in ``folder``; the model's ``vocab_size`` is ``model_vocab_size(tokenizer)``.
    The texts count three times, so that a test's few rows give pairs the trainer merges.
    """
    from workflow_scripts.modeling.moonlight import moonlight_tokenizer

    return moonlight_tokenizer(texts * 3, ranks, folder)
