"""Router math of the paper (prior bias, RPB-hard override, router-side losses) in one place.

The functions live in ``workflow_scripts.routing.core`` and are re-exported here lazily:
importing this package does not import torch, so torch-free code (graphs, tables,
figures) can import sibling modules of ``workflow_scripts.routing`` without paying for
it; the first access to one of the names below loads ``core``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflow_scripts.routing.core import (
        DEFAULT_CLIP_C,
        DEFAULT_CLIP_EPS,
        centered_logit_l2,
        clipped_log_prior,
        hard_topk_from_prior,
        kl_to_base,
        load_balancing_loss,
        prior_to_bias,
        router_l2,
        soft_bias_logits,
        span_bias_per_token,
        z_loss,
    )

__all__ = [
    "DEFAULT_CLIP_C",
    "DEFAULT_CLIP_EPS",
    "centered_logit_l2",
    "clipped_log_prior",
    "hard_topk_from_prior",
    "kl_to_base",
    "load_balancing_loss",
    "prior_to_bias",
    "router_l2",
    "soft_bias_logits",
    "span_bias_per_token",
    "z_loss",
]


def __getattr__(name: str) -> Any:
    """Load ``core`` on first access to one of its public names."""
    if name in __all__:
        return getattr(importlib.import_module("workflow_scripts.routing.core"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
