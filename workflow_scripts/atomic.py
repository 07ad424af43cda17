"""Atomic output writing: a file appears complete or not at all.

Every output is written to a temporary sibling and moved into place with
``os.replace``, so a job killed mid-write never leaves a truncated file that
Snakemake (or a later stage) could mistake for a finished one. A full disk is reported as
such, naming the destination (``NoSpaceError``), not as the writer's own symptom.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# torch.save to a path reports a short write (ENOSPC) only as these C++ enforce messages.
_TORCH_SHORT_WRITE = ("unexpected pos", "file write failed")
_NEARLY_FULL = 16 << 20  # bytes free below which a short write is taken for a full disk


class NoSpaceError(OSError):
    """The filesystem of an output ran full while it was written."""

    def __init__(self, target: Path) -> None:
        super().__init__(errno.ENOSPC, f"no space left on device while writing {target}", str(target))


def _free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def _is_disk_full(error: BaseException, folder: Path) -> bool:
    """Whether ``error`` is ENOSPC, or torch's short-write error on a (nearly) full filesystem."""
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    short_write = isinstance(error, RuntimeError) and any(s in str(error) for s in _TORCH_SHORT_WRITE)
    return short_write and _free_bytes(folder) < _NEARLY_FULL


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success move it onto ``path``.

    The temporary file is removed whatever happens; a full disk raises ``NoSpaceError``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.is_file():  # mkstemp creates 0600; give the output the usual umask-based mode
            os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
    except (OSError, RuntimeError) as error:
        if _is_disk_full(error, target.parent):
            raise NoSpaceError(target) from error
        raise
    finally:
        tmp_path.unlink(missing_ok=True)


def write_json(path: str | os.PathLike[str], payload: Any) -> None:
    """Write ``payload`` as indented, key-sorted JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_parquet(table: Any, path: str | os.PathLike[str]) -> None:
    """Write a ``pyarrow.Table`` atomically with fixed settings and no schema metadata.

    Fixed compression, dictionary and row-group settings and stripped metadata
    make reruns byte-identical, so checksums in provenance records are stable.
    """
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        pq.write_table(
            table.replace_schema_metadata(None),
            tmp,
            compression="zstd",
            compression_level=3,
            use_dictionary=False,
            write_statistics=True,
            row_group_size=64 * 1024,
        )
