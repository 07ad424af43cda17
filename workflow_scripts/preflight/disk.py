"""Free disk where a run writes (``results/``, the Hugging Face cache) against the plan's estimate.

The estimate is the compute plan's (``compute_plan.plan(...).disk``): everything the target
keeps, plus the peak of one running training's work folder. It is a total, outputs already
written included, so it decides only for a fresh run: where ``results/`` already holds files,
a shortfall is reported, not failed (what is left to write is less than the total).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workflow_scripts.errors import UserInputError
from workflow_scripts.preflight.checklist import FAIL, OK, SKIPPED, Check

GB = 1e9


def hf_home(environ: Mapping[str, str]) -> Path:
    """Where ``huggingface_hub`` and ``datasets`` cache: ``HF_HOME``, else ``~/.cache/huggingface``."""
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"])
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "huggingface"


def _existing(path: Path) -> Path:
    """``path``, or the nearest folder above it that exists (a first run has no ``results/`` yet)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def estimate_gb(config: Mapping[str, Any], ids: Sequence[str]) -> tuple[float, str]:
    """Gigabytes the targets ``ids`` write at their peak, and how the plan counts them.

    A sum over ``ids``: outputs two targets share count twice (an upper bound). Corpora whose
    split keeps every eligible row are priced at the paper's row count, as ``plan`` does.
    """
    from workflow_scripts import compute_plan

    rows = {
        corpus: count
        for corpus, count in compute_plan.PAPER_ROWS.items()
        if corpus in config["corpora"] and config["corpora"][corpus]["train_rows"] is None
    }
    kept = work = 0.0
    for target in ids:
        disk = compute_plan.plan(config, target, rows).disk
        kept, work = kept + disk.kept, max(work, disk.training_work)
    return kept + work, f"{kept:.0f} GB kept and {work:.0f} GB of a running training's work folder"


def check(config: Mapping[str, Any], ids: Sequence[str], results: Path, cache: Path) -> Check:
    """Free space under ``results`` and the HF ``cache`` against the plan's estimate for ``ids``."""
    place, cache_place = _existing(results), _existing(cache)
    free = shutil.disk_usage(place).free / GB
    where = f"{results}/: {free:.1f} GB free"
    if os.stat(place).st_dev == os.stat(cache_place).st_dev:
        where += f"; the HF cache ({cache}) is on the same filesystem"
    else:
        where += f"; HF cache {cache}: {shutil.disk_usage(cache_place).free / GB:.1f} GB free"
    if config["scale"] != "paper":
        return Check(
            "disk", SKIPPED, f"no disk estimate at toy scale (the plan sizes the paper's models): {where}"
        )
    if not ids:
        return Check("disk", SKIPPED, f"the run's targets are no tables or figures, so no estimate: {where}")
    try:
        needed, basis = estimate_gb(config, ids)
    except UserInputError as error:
        return Check("disk", SKIPPED, f"no disk estimate ({error}): {where}")
    detail = f"{', '.join(ids)} write about {needed:.0f} GB ({basis}): {where}"
    if needed <= free:
        return Check("disk", OK, detail)
    if results.is_dir() and any(results.iterdir()):
        return Check("disk", SKIPPED, f"{detail}; {results}/ already holds outputs, so less is left to write")
    return Check("disk", FAIL, f"{detail}: free space, or put {results}/ on a larger filesystem")
