"""Where each stage writes in the results tree: one definition for the rules' inputs and the report's readers.

Every function takes the results root (``results`` under Snakemake, a temporary
folder in tests) and returns a path below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow_scripts.registry import BASE, Evaluation, Probe, Training

# File of each prior kind in ``priors/{model}/{corpus}/``.
PRIOR_FILES = {
    "base": "prior.npy",
    "shuffled_within": "shuffled-within.npy",
    "shuffled_global": "shuffled-global.npy",
}


#: Every result path below the results root, with the rules' wildcard names. ``{run}`` is
#: ``base`` or ``{condition}/s{seed}``; ``{name}`` is the file of a stage's folder. The rules
#: take their patterns from here (``rule_path``), the CLIs and the report their paths.
PATHS = {
    "raw": "raw/{dataset}/{subset}",  # + .parquet, .manifest.json
    "corpus": "data/{corpus}/{name}",
    "model": "models/{model}/{name}",
    "prior": "priors/{model}/{corpus}/{name}",
    "probe": "probes/{model}/{corpus}/{run}/{name}",
    "graph": "graphs/{model}/{corpus}/{run}/{name}",
    "checkpoint": "checkpoints/{model}/{corpus}/{condition}/s{seed}",
    "benchmark": "benchmarks/{benchmark}/{name}",
    "eval": "evals/{model}/{run}/{name}",
    "megatron_base": "megatron/{model}/base",
    "megatron_dataset": "megatron/datasets/{corpus}",
    "megatron_trained": "megatron/trained/{model}/{corpus}/{condition}/s{seed}",
    "megatron_work": "megatron/work/{model}/{corpus}/{condition}/s{seed}",
    "megatron_check": "megatron/launch_check.txt",
    "provenance": "provenance/{output}",  # + .json (manifest), .audit.txt
    "table": "tables/{table}",  # + .csv, .md, .tex
    "figure": "figures/{figure}",  # + .csv (its data), .png, .pdf
}
RESULTS = "results"  # the results root under Snakemake


class _Wildcards(dict):
    """Format fields not given stay wildcards: ``{model}`` remains ``{model}``."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def rule_path(kind: str, suffix: str = "", **fields: str) -> str:
    """A rule's file pattern: ``results/`` + the template of ``kind`` with ``fields`` filled, + ``suffix``."""
    return f"{RESULTS}/{PATHS[kind].format_map(_Wildcards(fields))}{suffix}"


def result_path(results: str | Path, kind: str, **fields: Any) -> Path:
    """One concrete result path below ``results``: every field of the template given."""
    return Path(results) / PATHS[kind].format(**fields)


def run_name(condition: str, seed: int | None) -> str:
    """``base``, or ``{condition}/s{seed}`` for a trained checkpoint."""
    return BASE if condition == BASE else f"{condition}/s{seed}"


def prior_file(results: str | Path, model: str, corpus: str, name: str) -> Path:
    """A file of the prior stage, e.g. ``prior.npy``, ``stats.json`` or ``prior_validation.json``."""
    return result_path(results, "prior", model=model, corpus=corpus, name=name)


def _run_dir(
    results: str | Path, stage: str, model: str, corpus: str, condition: str, seed: int | None
) -> Path:
    """``<results>/<stage>/<model>/<corpus>/<base | condition/s<seed>>``."""
    return result_path(results, stage, model=model, corpus=corpus, run=run_name(condition, seed), name="")


def checkpoint_dir(results: str | Path, training: Training) -> Path:
    fields = {"model": training.model, "corpus": training.corpus, "condition": training.condition}
    return result_path(results, "checkpoint", **fields, seed=training.seed)


def routes_path(results: str | Path, probe: Probe) -> Path:
    """The bias-free routes of a probed checkpoint (or base) on a corpus' probe pool."""
    return _run_dir(results, "probe", probe.model, probe.corpus, probe.condition, probe.seed) / "routes.npz"


def partition_path(results: str | Path, model: str, corpus: str) -> Path:
    """The base partition (with span profile) of a model on a corpus' probe pool."""
    return result_path(results, "graph", model=model, corpus=corpus, run=BASE, name="partition.json")


def metrics_path(results: str | Path, probe: Probe) -> Path:
    """The retention metrics of a probed trained checkpoint."""
    return _run_dir(results, "graph", probe.model, probe.corpus, probe.condition, probe.seed) / "metrics.json"


def layers_path(results: str | Path, probe: Probe) -> Path:
    """The per-layer retention metrics (and the run's communities) of a probed trained checkpoint."""
    return metrics_path(results, probe).with_name("layers.parquet")


def summary_path(results: str | Path, evaluation: Evaluation) -> Path:
    """One checkpoint's evaluation summary (a base model is evaluated once, not per corpus)."""
    run = (
        BASE
        if evaluation.condition == BASE
        else f"{evaluation.corpus}/{run_name(evaluation.condition, evaluation.seed)}"
    )
    return result_path(results, "eval", model=evaluation.model, run=run, name="summary.json")


def manifest_path(results: str | Path, output_id: str) -> Path:
    """The provenance manifest of one table or figure."""
    return Path(f"{result_path(results, 'provenance', output=output_id)}.json")


def audit_path(results: str | Path, output_id: str) -> Path:
    """The audit report of one table or figure, written only when everything recorded holds."""
    return Path(f"{result_path(results, 'provenance', output=output_id)}.audit.txt")
