"""The ledger an imported results bundle leaves: which files it placed, which it vouches for unshipped.

``python -m workflow_scripts bundle import`` writes it under the results root. A bundle ships the
expensive outputs and the records of every job behind them, but not the trained checkpoints nor
the hub downloads: those stay absent, vouched for by the records the bundle carried. The
provenance manifest takes such a file's recorded digest, and the audit says which files came from
the bundle, which were rebuilt here and which are known only from their records.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.errors import UserInputError


@dataclass(frozen=True)
class Ledger:
    """What one import placed (path -> sha256) and the absent files its records vouch for (path -> digest)."""

    archive: str
    archive_sha256: str
    exported_commit: str | None
    placed: Mapping[str, str] = field(default_factory=dict)
    recorded_only: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def read_ledger(path: str | Path) -> Ledger | None:
    """The ledger at ``path`` (``layout.ledger_path``); None when no bundle was imported."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        return Ledger(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as error:
        raise UserInputError(
            f"{path}: unreadable bundle ledger ({error}); import the bundle again"
        ) from error


def vouched_digest(path: str, ledger: Ledger | None) -> Mapping[str, Any] | None:
    """The recorded digest of ``path`` when it is absent here and the imported bundle vouches for it."""
    if ledger is None or os.path.exists(path):
        return None
    return ledger.recorded_only.get(os.path.normpath(path))
