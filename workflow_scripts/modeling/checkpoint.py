"""Resume checkpoints: everything a killed run needs to continue bit-identically.

A checkpoint holds the model and optimizer state dicts, the number of completed optimizer
steps (the learning-rate schedule is a pure function of it, so it is the scheduler's whole
state), the torch / numpy / python RNG states, the log records so far and a key naming the
run's settings and the checksums of its inputs (``run_key``), so that a rerun on changed
inputs starts fresh instead of continuing from weights trained on the old ones. It lives
in ``<out>.resume/``, beside the run's declared output, because Snakemake deletes the
declared outputs of a failed job; it is removed after success. Each file is written to a
temporary sibling and moved into place, so a kill never leaves a truncated checkpoint, and its
sha256 is then written beside it (``step_NNNNNNNN.pt.sha256``, ``records.sha256sums``). A
resume reads only a checkpoint whose bytes match that digest: one without it (killed between
the two writes) or with other bytes (damaged on disk) is set aside, saying why, and the run
resumes from the checkpoint before it, or starts fresh; it loses steps, never the result. The
newest two are kept, so that there is one to fall back to.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from workflow_scripts.atomic import atomic_path
from workflow_scripts.modeling.run_key import differing_fields
from workflow_scripts.records import file_sha256
from workflow_scripts.records.sha256sums import DigestListError, mismatch, read_list, write_list

_PATTERN = "step_*.pt"
#: Checkpoints kept while a run trains: the newest, and the one a damaged newest falls back to.
KEEP_CHECKPOINTS = 2
DAMAGED_SUFFIX = ".damaged"


def resume_dir_for(out: str | os.PathLike[str]) -> Path:
    """The resume directory of a run whose output is ``out``: ``<out>.resume``."""
    return Path(f"{os.fspath(out).rstrip('/')}.resume")


def checkpoint_files(resume_dir: Path) -> list[Path]:
    """Checkpoint files in ``resume_dir``, oldest step first."""
    return sorted(resume_dir.glob(_PATTERN))


def digest_file(checkpoint: Path) -> Path:
    """The digest list of a checkpoint file: ``<checkpoint>.sha256``."""
    return checkpoint.with_name(checkpoint.name + ".sha256")


def damage(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` must not be resumed from (no digest, a cut or other one); ``None``: intact."""
    try:
        listed = read_list(digest_file(checkpoint))
    except DigestListError as error:
        return str(error)
    return mismatch(checkpoint.parent, listed, [checkpoint.name])


def save(
    resume_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    records: list[dict[str, Any]],
    run_key: str,
) -> Path:
    """Write the state after ``step`` completed optimizer steps and drop older checkpoints."""
    resume_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "step": step,
        "run_key": run_key,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "records": records,
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
    }
    target = resume_dir / f"step_{step:08d}.pt"
    with atomic_path(target) as tmp:
        with tmp.open("wb") as handle:  # a file object keeps ENOSPC's errno
            torch.save(state, handle)
        digest = file_sha256(tmp)
    write_list(digest_file(target), {target.name: digest})
    for old in checkpoint_files(resume_dir)[:-KEEP_CHECKPOINTS]:
        old.unlink(missing_ok=True)
        digest_file(old).unlink(missing_ok=True)
    return target


def restore(
    resume_dir: Path, run_key: str, model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[int, list[dict[str, Any]]]:
    """Load the newest intact checkpoint into ``model``/``optimizer``/RNGs; ``(0, [])`` when there is none.

    A checkpoint whose bytes do not match its digest (``damage``) is set aside as
    ``<file>.damaged``, saying why, and the one before it is tried. A checkpoint of other
    settings or inputs (``run_key`` differs) is discarded, saying which fields differ, and the
    run starts fresh.
    """
    files = checkpoint_files(resume_dir)
    intact = None
    for path in reversed(files):
        reason = damage(path)
        if reason is None:
            intact = path
            break
        aside = path.with_name(path.name + DAMAGED_SUFFIX)
        path.replace(aside)
        digest_file(path).unlink(missing_ok=True)
        print(f"not resuming from {path}: {reason}; set aside as {aside.name}", file=sys.stderr)
    if intact is None:
        if files:
            print(f"starting fresh: no intact resume checkpoint is left in {resume_dir}", file=sys.stderr)
        return 0, []
    state = torch.load(intact, map_location="cpu", weights_only=False)  # our own file, with RNG tuples
    if state["run_key"] != run_key:
        differing = ", ".join(differing_fields(state["run_key"], run_key))
        print(
            f"starting fresh: the resume checkpoint {intact} was written for a different {differing}; "
            f"discarding {resume_dir}",
            file=sys.stderr,
        )
        remove(resume_dir)
        return 0, []
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    print(f"resuming after step {state['step']} from {intact} (its sha256 checked)", file=sys.stderr)
    return int(state["step"]), list(state["records"])


def remove(resume_dir: Path) -> None:
    """Delete the resume directory (after a successful run)."""
    shutil.rmtree(resume_dir, ignore_errors=True)
