"""Where each stage writes in the results tree: one definition for the rules' inputs and the report's readers.

Every function takes the results root (``results`` under Snakemake, a temporary
folder in tests) and returns a path below it.
"""

from __future__ import annotations

from pathlib import Path

from workflow_scripts.registry import BASE, Evaluation, Probe, Training

# File of each prior kind in ``priors/{model}/{corpus}/``.
PRIOR_FILES = {
    "base": "prior.npy",
    "shuffled_within": "shuffled-within.npy",
    "shuffled_global": "shuffled-global.npy",
}


def run_name(condition: str, seed: int | None) -> str:
    """``base``, or ``{condition}/s{seed}`` for a trained checkpoint."""
    return BASE if condition == BASE else f"{condition}/s{seed}"


def prior_file(results: str | Path, model: str, corpus: str, name: str) -> Path:
    """A file of the prior stage, e.g. ``prior.npy``, ``stats.json`` or ``prior_validation.json``."""
    return Path(results) / "priors" / model / corpus / name


def _run_dir(
    results: str | Path, stage: str, model: str, corpus: str, condition: str, seed: int | None
) -> Path:
    """``<results>/<stage>/<model>/<corpus>/<base | condition/s<seed>>``."""
    return Path(results) / stage / model / corpus / run_name(condition, seed)


def checkpoint_dir(results: str | Path, training: Training) -> Path:
    return _run_dir(
        results, "checkpoints", training.model, training.corpus, training.condition, training.seed
    )


def routes_path(results: str | Path, probe: Probe) -> Path:
    """The bias-free routes of a probed checkpoint (or base) on a corpus' probe pool."""
    return _run_dir(results, "probes", probe.model, probe.corpus, probe.condition, probe.seed) / "routes.npz"


def partition_path(results: str | Path, model: str, corpus: str) -> Path:
    """The base partition (with span profile) of a model on a corpus' probe pool."""
    return Path(results) / "graphs" / model / corpus / BASE / "partition.json"


def metrics_path(results: str | Path, probe: Probe) -> Path:
    """The retention metrics of a probed trained checkpoint."""
    return (
        _run_dir(results, "graphs", probe.model, probe.corpus, probe.condition, probe.seed) / "metrics.json"
    )


def summary_path(results: str | Path, evaluation: Evaluation) -> Path:
    """One checkpoint's evaluation summary (a base model is evaluated once, not per corpus)."""
    root = Path(results) / "evals" / evaluation.model
    if evaluation.condition == BASE:
        return root / BASE / "summary.json"
    return root / str(evaluation.corpus) / run_name(evaluation.condition, evaluation.seed) / "summary.json"
