"""The checklist: one line per check, its status (ok, FAIL, skipped) and what it found or what to fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

OK = "ok"
FAIL = "FAIL"
SKIPPED = "skipped"


@dataclass(frozen=True)
class Check:
    """One check: ``name`` says what was checked, ``detail`` what was found or, for a FAIL, what to fix."""

    name: str
    status: str
    detail: str


def render(checks: Sequence[Check]) -> str:
    """``<status> <name>: <detail>``, one line per check, statuses aligned."""
    return "\n".join(f"{check.status:<8} {check.name}: {check.detail}" for check in checks)


def failure(checks: Sequence[Check]) -> str | None:
    """The one-line summary of the failed checks, or None when none failed."""
    failed = [check.name for check in checks if check.status == FAIL]
    if not failed:
        return None
    return (
        f"preflight: {len(failed)} check{'s' * (len(failed) > 1)} failed: {', '.join(failed)}; "
        "fix what their FAIL lines say and run preflight again"
    )


def named_list(items: Sequence[str], limit: int = 3) -> str:
    """``a, b, c and 2 more``: a list that stays one readable line."""
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")
