"""Digest lists that let a resume tell an intact checkpoint from a damaged one.

A list holds one ``<sha256>  <relative path>`` line per file, the format ``sha256sum -c``
reads, and is written atomically after the files it lists are complete: a checkpoint without
one was cut short, and one whose files differ from it (flipped bytes, a truncated or an extra
file) is never resumed from (``modeling.checkpoint``, ``train.megatron.resume``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from workflow_scripts.atomic import write_text
from workflow_scripts.records import file_sha256

_LINE = re.compile(r"^([0-9a-f]{64})  (\S(?:.*\S)?)$")
# hashlib releases the GIL on large buffers, so threads read and hash files in parallel.
_THREADS = 8


class DigestListError(ValueError):
    """A digest list that is missing, unreadable or malformed (cut short, edited)."""


def digests_of(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """The sha256 of each file ``folder / name``, by name, hashed on a few threads."""
    names = list(names)
    with ThreadPoolExecutor(max_workers=min(_THREADS, max(1, len(names)))) as pool:
        hashes = pool.map(lambda name: file_sha256(Path(folder) / name), names)
        return dict(zip(names, hashes, strict=True))


def write_list(path: str | os.PathLike[str], digests: Mapping[str, str]) -> None:
    """Write ``digests`` (relative path -> sha256) as a sorted digest list, atomically."""
    write_text(path, "".join(f"{digests[name]}  {name}\n" for name in sorted(digests)))


def read_list(path: str | os.PathLike[str]) -> dict[str, str]:
    """The digests a list holds, by relative path; ``DigestListError`` saying why it cannot be used."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError as error:
        raise DigestListError(f"it has no digest list ({path.name}): the save was cut short") from error
    except (OSError, UnicodeDecodeError) as error:
        raise DigestListError(f"its digest list {path.name} is unreadable ({error})") from error
    if not text.endswith("\n"):
        raise DigestListError(f"its digest list {path.name} is cut short (no final newline)")
    digests = {}
    for number, line in enumerate(text.splitlines(), 1):
        match = _LINE.match(line)
        if match is None:
            raise DigestListError(f"its digest list {path.name} is malformed at line {number}: {line[:80]!r}")
        digests[match.group(2)] = match.group(1)
    if not digests:
        raise DigestListError(f"its digest list {path.name} is empty")
    return digests


def mismatch(folder: Path, listed: Mapping[str, str], present: Iterable[str]) -> str | None:
    """Why the files ``present`` in ``folder`` are not the ones ``listed``; ``None`` when they are."""
    present = set(present)
    missing, extra = sorted(set(listed) - present), sorted(present - set(listed))
    if missing:
        return f"{len(missing)} listed file(s) are missing ({', '.join(missing[:3])})"
    if extra:
        return f"{len(extra)} file(s) are not in its digest list ({', '.join(extra[:3])})"
    found = digests_of(folder, sorted(listed))
    changed = [name for name in sorted(listed) if found[name] != listed[name]]
    if changed:
        first = changed[0]
        return (
            f"{len(changed)} file(s) differ from their recorded sha256 ({first}: "
            f"{found[first][:12]}... where {listed[first][:12]}... was saved)"
        )
    return None
