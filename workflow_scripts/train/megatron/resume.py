"""Resuming a Megatron run after a kill, preemption or requeue: only from a complete checkpoint.

Megatron-Bridge saves ``<save>/iter_NNNNNNN/`` (distributed-checkpoint shards with their
``.metadata``; then, by rank 0 after a barrier that follows the shard write, ``train_state.pt``,
``<save>/latest_checkpointed_iteration.txt`` and last ``run_config.yaml``, which export reads
to rebuild the model). A job killed mid-save leaves a folder without one of the three, or with
a ``run_config.yaml`` that rank 0 was still writing in place (empty or cut): it is never
resumed from. ``latest_complete`` picks the newest complete iteration, which the entry
point passes to Bridge as ``checkpoint.ckpt_step``, so the choice does not rest on the tracker
file alone.
Every start appends the iteration it resumed from to ``resume_log.json`` in the run's work
folder; the finished run's record carries that list. The work folder is bound to its run's
key (``claim``): checkpoints written for other inputs or settings are never resumed. The
claim hashes the inputs once per job, before any rank starts, and leaves the digests for the
ranks' provenance record (``claimed_digests``).

A checkpoint is complete only with its digest list (``sha256sums.txt``), which the ranks write
after the save's last barrier (``entry``); before any rank starts, the launch checks the newest
one's files against it and moves a damaged one aside (``set_aside_damaged``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import write_json, write_text
from workflow_scripts.errors import UserInputError
from workflow_scripts.modeling.run_key import differing_fields
from workflow_scripts.records.sha256sums import DigestListError, mismatch, read_list
from workflow_scripts.train.megatron.ownership import check_free

TRACKER = "latest_checkpointed_iteration.txt"
KEY_FILE = "run_key.json"
DIGESTS_FILE = "input_digests.json"
#: Bridge's save folder and the folder damaged checkpoints are moved to, both in the work folder.
CHECKPOINTS, DAMAGED = "checkpoints", "damaged"
COMPLETE_MARKERS = (".metadata", "train_state.pt", "run_config.yaml")
#: A checkpoint's digest list, written after everything Bridge writes into it.
DIGEST_LIST = "sha256sums.txt"
#: The section Bridge's ``ConfigContainer.to_yaml`` writes last (its sections sorted by name).
LAST_CONFIG_SECTION = "validation"
_ITERATION = re.compile(r"^iter_(\d{7})$")


def iteration_dir(save: Path, iteration: int) -> Path:
    return Path(save) / f"iter_{iteration:07d}"


def is_complete(folder: Path) -> bool:
    """Whether an ``iter_*`` folder holds a whole checkpoint: every marker, a whole run config, and
    its digest list (``damage`` checks the files against it; that reads them all)."""
    markers = (*COMPLETE_MARKERS, DIGEST_LIST)
    return all((folder / marker).is_file() for marker in markers) and run_config_complete(
        folder / "run_config.yaml"
    )


def run_config_complete(path: Path) -> bool:
    """Whether Bridge finished writing ``run_config.yaml``, which it writes in place, not atomically.

    A resume reads the model's config from it: an empty file (a kill right after it was
    opened) stops every restart of the job with ``'NoneType' object has no attribute 'get'``.
    Complete: newline-terminated YAML whose mapping holds ``model`` and the last section.
    """
    import yaml

    text = Path(path).read_text(errors="replace")
    if not text.endswith("\n"):
        return False
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    return (
        isinstance(config, dict) and isinstance(config.get("model"), dict) and LAST_CONFIG_SECTION in config
    )


def complete_iterations(save: Path) -> list[int]:
    """The iterations with a complete checkpoint in ``save``, oldest first."""
    iterations = sorted(
        int(match.group(1))
        for entry in Path(save).glob("iter_*")
        if (match := _ITERATION.match(entry.name)) and entry.is_dir()
    )
    return [i for i in iterations if is_complete(iteration_dir(save, i))]


def latest_complete(save: Path) -> int | None:
    """The newest iteration with a complete checkpoint in ``save`` (``None``: start from the base)."""
    complete = complete_iterations(save)
    return complete[-1] if complete else None


def checkpoint_files(folder: Path) -> list[str]:
    """Every file below a checkpoint folder but its digest list, as sorted relative POSIX paths."""
    folder = Path(folder)
    return sorted(
        path.relative_to(folder).as_posix()
        for path in folder.rglob("*")
        if path.is_file() and path != folder / DIGEST_LIST
    )


def shares(folder: Path, names: list[str], world: int) -> list[list[str]]:
    """``names`` split into ``world`` lists of about equal bytes: the files each rank hashes.

    Largest file first, each to the list with the fewest bytes so far, so that a save's hashing
    takes about one rank's ``1/world`` of it.
    """
    sizes = {name: (Path(folder) / name).stat().st_size for name in names}
    loads, parts = [0] * world, [[] for _ in range(world)]
    for name in sorted(names, key=lambda n: (-sizes[n], n)):
        least = loads.index(min(loads))
        loads[least] += sizes[name]
        parts[least].append(name)
    return parts


def damage(folder: Path) -> str | None:
    """Why a checkpoint folder's files are not the ones its digest list names; ``None``: intact."""
    try:
        listed = read_list(Path(folder) / DIGEST_LIST)
    except DigestListError as error:
        return str(error)
    return mismatch(Path(folder), listed, checkpoint_files(folder))


def set_aside_damaged(work: Path) -> int | None:
    """Check the newest complete checkpoint of ``work`` against its digests, before any rank starts.

    A damaged one is moved to ``<work>/damaged/`` (outside Bridge's save folder, whose
    ``iter_*`` it globs), saying why, and the one before it is checked. Returns the iteration
    the run will resume from (``None``: the base). Reads one checkpoint's bytes (hundreds of GB
    at paper scale) once per start, in the launch's one process.
    """
    save = Path(work) / CHECKPOINTS
    candidates = complete_iterations(save)
    for iteration in reversed(candidates):
        folder = iteration_dir(save, iteration)
        reason = damage(folder)
        if reason is None:
            print(f"resuming from {folder}: its files match their digests", file=sys.stderr)
            return iteration
        aside = Path(work) / DAMAGED / folder.name
        shutil.rmtree(aside, ignore_errors=True)
        aside.parent.mkdir(parents=True, exist_ok=True)
        folder.rename(aside)
        print(f"not resuming from {folder}: {reason}; moved to {aside}", file=sys.stderr)
    if candidates:
        print(f"no intact checkpoint is left in {save}: the run starts from the base", file=sys.stderr)
    return None


def claim(work: Path, key: str) -> bool:
    """Bind ``work`` to the run ``key`` (``run_key.py``); a folder of another run's key is discarded first.

    Run once per job before the ranks start (``train megatron-claim``), so that no rank
    resumes weights trained on other inputs or settings. Returns whether it started fresh.
    A non-empty folder without a run key was not made by a claim: it is refused, never
    deleted (a mistyped ``--work`` must not cost another folder's files).
    """
    work, path = Path(work), Path(work) / KEY_FILE
    check_free(work)  # an orphaned training may still write there: never discard it under it
    if work.is_dir() and not path.is_file() and any(work.iterdir()):
        raise UserInputError(
            f"{work} is not empty and holds no {KEY_FILE}: it is not a Megatron run's work folder; "
            "name an empty or new folder with --work"
        )
    stale = path.is_file() and path.read_text() != key
    if stale:
        differing = ", ".join(differing_fields(path.read_text(), key))
        print(
            f"starting fresh: {work} was written for a different {differing}; discarding it", file=sys.stderr
        )
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    write_text(path, key)
    return stale


def record_digests(work: Path, digests: Mapping[str, Any]) -> None:
    """Keep the claim's input digests (``path_digest`` by input name) in the work folder."""
    write_json(Path(work) / DIGESTS_FILE, dict(digests))


def claimed_digests(work: Path, inputs: Mapping[str, str]) -> dict[str, Any]:
    """The digests this job's claim took of ``inputs``, so that rank 0 hashes nothing before init.

    Refuses a launch that no claim preceded, or whose inputs are not the ones claimed.
    """
    path = Path(work) / DIGESTS_FILE
    if not path.is_file():
        raise UserInputError(f"{path} is missing: run 'train megatron-claim' with the same arguments first")
    digests = json.loads(path.read_text())
    claimed = {name: digest.get("path") for name, digest in digests.items()}
    if claimed != {name: str(Path(value)) for name, value in inputs.items()}:
        raise UserInputError(f"{path} was claimed for the inputs {claimed}, not {dict(inputs)}")
    return digests


def record_start(work: Path, iteration: int | None) -> list[int]:
    """Append this start's resume point (0 = from the base) to ``resume_log.json``; return the log."""
    path = Path(work) / "resume_log.json"
    log = json.loads(path.read_text()) if path.is_file() else []
    log.append(0 if iteration is None else int(iteration))
    write_json(path, log)
    return log


def finish(save: Path, out: Path, iteration: int) -> Path:
    """Put the final complete iteration into ``out`` as a self-contained Megatron checkpoint.

    ``out`` gets ``iter_NNNNNNN/`` and its own tracker file, assembled in a temporary sibling
    from hard links to the checkpoint's files and renamed into place: the checkpoint stays in
    ``save`` until the run's work folder is removed, so a kill at any point leaves a complete
    copy that the rerun finishes from (``train megatron`` skips the training when the newest
    complete checkpoint is the last step's), and a half-assembled ``out`` is replaced.
    """
    final = iteration_dir(save, iteration)
    if not is_complete(final):
        raise RuntimeError(
            f"the final checkpoint {final} is incomplete (missing one of {(*COMPLETE_MARKERS, DIGEST_LIST)})"
        )
    out = Path(out)
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(final, staging / final.name, copy_function=os.link)
    (staging / TRACKER).write_text(f"{iteration}\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out / final.name
