"""Resume checkpoints: everything a killed run needs to continue bit-identically.

A checkpoint holds the model and optimizer state dicts, the number of completed optimizer
steps (the learning-rate schedule is a pure function of it, so it is the scheduler's whole
state), the torch / numpy / python RNG states, the log records so far and a key naming the
run's settings and the checksums of its inputs (``run_key``), so that a rerun on changed
inputs starts fresh instead of continuing from weights trained on the old ones. It lives
in ``<out>.resume/``, beside the run's declared output, because Snakemake deletes the
declared outputs of a failed job; it is removed after success. Each file is written to a
temporary sibling and moved into place, so a kill never leaves a truncated checkpoint; only
the newest is kept.
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

_PATTERN = "step_*.pt"


def resume_dir_for(out: str | os.PathLike[str]) -> Path:
    """The resume directory of a run whose output is ``out``: ``<out>.resume``."""
    return Path(f"{os.fspath(out).rstrip('/')}.resume")


def checkpoint_files(resume_dir: Path) -> list[Path]:
    """Checkpoint files in ``resume_dir``, oldest step first."""
    return sorted(resume_dir.glob(_PATTERN))


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
    with atomic_path(target) as tmp, tmp.open("wb") as handle:  # a file object keeps ENOSPC's errno
        torch.save(state, handle)
    for old in checkpoint_files(resume_dir):
        if old != target:
            old.unlink(missing_ok=True)
    return target


def restore(
    resume_dir: Path, run_key: str, model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[int, list[dict[str, Any]]]:
    """Load the newest checkpoint into ``model``/``optimizer``/RNGs; ``(0, [])`` when there is none.

    A checkpoint of other settings or inputs (``run_key`` differs) is discarded, saying which
    fields differ, and the run starts fresh.
    """
    files = checkpoint_files(resume_dir)
    if not files:
        return 0, []
    state = torch.load(files[-1], map_location="cpu", weights_only=False)  # our own file, with RNG tuples
    if state["run_key"] != run_key:
        differing = ", ".join(differing_fields(state["run_key"], run_key))
        print(
            f"starting fresh: the resume checkpoint {files[-1]} was written for a different {differing}; "
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
    print(f"resuming after step {state['step']} from {files[-1]}", file=sys.stderr)
    return int(state["step"]), list(state["records"])


def remove(resume_dir: Path) -> None:
    """Delete the resume directory (after a successful run)."""
    shutil.rmtree(resume_dir, ignore_errors=True)
