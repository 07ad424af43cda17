"""Local model backend: byte-level BPE tokenizer and tiny MoE checkpoints of the three router families.

* ``workflow_scripts.models.tokenizer``: ``train_tokenizer`` (byte-level BPE with special
  tokens and a chat template) and ``answer_span_mask`` (Q/A span label per token).
* ``workflow_scripts.models.toy``: ``ToyModelSpec``, ``toy_config``, ``build_toy_model``,
  ``moe_layer_indices``, ``router_modules``, ``save_toy_base``, ``load_local``.

The names are re-exported here lazily: importing this package (or ``ToyModelSpec``) does
not import torch or transformers; the functions import them when called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflow_scripts.models.tokenizer import (
        CHAT_TEMPLATE,
        SPECIAL_TOKENS,
        answer_span_mask,
        train_tokenizer,
    )
    from workflow_scripts.models.toy import (
        ARCHITECTURES,
        ROUTER_CLASS_NAMES,
        ToyModelSpec,
        build_toy_model,
        legacy_vllm_keys,
        load_local,
        moe_layer_indices,
        router_modules,
        save_toy_base,
        toy_config,
    )

_HOMES = {
    "CHAT_TEMPLATE": "tokenizer",
    "SPECIAL_TOKENS": "tokenizer",
    "answer_span_mask": "tokenizer",
    "train_tokenizer": "tokenizer",
    "ARCHITECTURES": "toy",
    "ROUTER_CLASS_NAMES": "toy",
    "ToyModelSpec": "toy",
    "build_toy_model": "toy",
    "legacy_vllm_keys": "toy",
    "load_local": "toy",
    "moe_layer_indices": "toy",
    "router_modules": "toy",
    "save_toy_base": "toy",
    "toy_config": "toy",
}

__all__ = [
    "ARCHITECTURES",
    "CHAT_TEMPLATE",
    "ROUTER_CLASS_NAMES",
    "SPECIAL_TOKENS",
    "ToyModelSpec",
    "answer_span_mask",
    "build_toy_model",
    "legacy_vllm_keys",
    "load_local",
    "moe_layer_indices",
    "router_modules",
    "save_toy_base",
    "toy_config",
    "train_tokenizer",
]


def __getattr__(name: str) -> Any:
    """Load the defining submodule on first access to one of its public names."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"workflow_scripts.models.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
