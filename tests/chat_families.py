"""The chat templates of the paper's three model families, on toy byte-level BPE tokenizers.

The templates are the families' own ``tokenizer_config.json`` ``chat_template`` texts, which the
toy pipeline's tokenizers ship (``workflow_scripts.modeling``: ``moonlight``, ``deepseek_v2``,
``qwen3``): Moonlight-16B-A3B (Kimi markers ``<|im_user|>``, ``<|im_assistant|>``,
``<|im_middle|>``; eos ``[EOS]``, so an assistant turn ends in ``<|im_end|>``, not eos),
DeepSeek-V2-Lite ("User: ... Assistant: ..." plain text, the turn ends in eos; no marker Bridge
knows) and Qwen3-30B-A3B (ChatML with its ``<think>`` handling; eos ``<|endoftext|>``, a turn ends
in ``<|im_end|>\\n``). ``family_tokenizer`` puts each on a generic fast tokenizer with the
family's special tokens under the family's names, so a template renders and tokenises as it does
for the real model; the hubs' own kinds of tokenizer, as the toy pipeline builds them, are
``moonlight_remote_tokenizer``, ``deepseek_v2_hub_tokenizer`` and ``qwen3_hub_tokenizer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from workflow_scripts.modeling.deepseek_v2 import CHAT_TEMPLATE as DEEPSEEK_V2_TEMPLATE
from workflow_scripts.modeling.moonlight import CHAT_TEMPLATE as MOONLIGHT_TEMPLATE
from workflow_scripts.modeling.qwen3 import CHAT_TEMPLATE as QWEN3_TEMPLATE


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
    from workflow_scripts.modeling.moonlight import toy_tokenizer

    return toy_tokenizer(texts * 3, ranks, folder)


def deepseek_v2_hub_tokenizer(texts: list[str], folder: Path, ranks: int = 400) -> PreTrainedTokenizerBase:
    """DeepSeek-V2-Lite's tokenizer files (``LlamaTokenizerFast``, byte-level BPE), learned from ``texts``.

    As ``models toy-base`` builds it; the texts count three times, as ``moonlight_remote_tokenizer``'s.
    """
    from workflow_scripts.modeling.deepseek_v2 import toy_tokenizer

    return toy_tokenizer(texts * 3, ranks, folder)


def qwen3_hub_tokenizer(texts: list[str], folder: Path, ranks: int = 400) -> PreTrainedTokenizerBase:
    """Qwen3's tokenizer files (``Qwen2Tokenizer``: vocab, merges, 26 added tokens) learned from ``texts``."""
    from workflow_scripts.modeling.qwen3 import toy_tokenizer

    return toy_tokenizer(texts * 3, ranks, folder)
