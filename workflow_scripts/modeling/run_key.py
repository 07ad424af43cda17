"""The key a resumable run is bound to: its settings and the contents of its inputs.

Both backends resume only a run of the same key (``modeling.checkpoint`` for the local one,
``train.megatron.resume.claim`` for Megatron's work folder); a kill followed by a change of
``train_rows``, the base or the prior then starts fresh instead of continuing old weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from workflow_scripts.records import path_digest


def run_key(settings: Mapping[str, Any], inputs: Mapping[str, str | os.PathLike[str] | None]) -> str:
    """The key a checkpoint must carry to be resumed: ``settings`` plus each input's content checksum.

    Inputs are keyed by content, not path: a split rewritten in place with other rows (a changed
    ``train_rows``), a replaced base or prior changes the key; a moved but identical file does not.
    """
    return key_of(settings, {name: path and path_digest(path) for name, path in inputs.items()})


def key_of(settings: Mapping[str, Any], digests: Mapping[str, Mapping[str, Any] | None]) -> str:
    """``run_key`` from ``path_digest`` records already taken (``None``: no such input)."""
    sha256 = {name: digest and digest.get("sha256") for name, digest in digests.items()}
    return json.dumps({**settings, **sha256}, sort_keys=True)


def differing_fields(old: str, new: str) -> list[str]:
    """Top-level fields in which two run keys differ (``["settings"]`` when a key is not a JSON object)."""
    try:
        before, after = json.loads(old), json.loads(new)
    except json.JSONDecodeError:
        return ["settings"]
    if not isinstance(before, dict) or not isinstance(after, dict):
        return ["settings"]
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
