"""Frozen-base routing priors over Q/A spans (§3.1 eq. (2), Appendix F.7) and their statistics.

* ``workflow_scripts.priors.compute``: ``span_means`` (eq. (2) for a batch), ``compute_prior``
  (one frozen-base pass over a split into an ``N x 2 x L x E`` float32 ``.npy``),
  ``prior_meta`` / ``check_prior_matches`` (what a prior was built from, and the check that
  it belongs to a given split, model and chat template), ``load_prior``, ``gather_rows``.
* ``workflow_scripts.priors.stats``: ``prior_stats`` (per-row bias spread and clamp
  saturation of a prior file, Table 13 / Appendix F.7).
* ``workflow_scripts.priors.cli``: ``python -m workflow_scripts priors compute``.

The names are re-exported here lazily, so importing this package does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflow_scripts.priors.compute import (
        SPAN_DEFINITION,
        check_prior_matches,
        compute_prior,
        gather_rows,
        load_prior,
        prior_meta,
        span_means,
        template_sha256,
    )
    from workflow_scripts.priors.stats import prior_stats

_HOMES = {
    "SPAN_DEFINITION": "compute",
    "check_prior_matches": "compute",
    "compute_prior": "compute",
    "gather_rows": "compute",
    "load_prior": "compute",
    "prior_meta": "compute",
    "span_means": "compute",
    "template_sha256": "compute",
    "prior_stats": "stats",
}

__all__ = [
    "SPAN_DEFINITION",
    "check_prior_matches",
    "compute_prior",
    "gather_rows",
    "load_prior",
    "prior_meta",
    "prior_stats",
    "span_means",
    "template_sha256",
]


def __getattr__(name: str) -> Any:
    """Load the defining submodule on first access to one of its public names."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"workflow_scripts.priors.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
