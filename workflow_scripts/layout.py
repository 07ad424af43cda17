"""Where each stage writes in the results tree: one definition for the rules' inputs and the report's readers.

Every function takes the results root (``results`` under Snakemake, a temporary
folder in tests) and returns a path below it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workflow_scripts.registry import BASE, Evaluation, Probe, Training

# File of each prior kind in ``priors/{model}/{corpus}/``, and the records beside them.
PRIOR_FILES = {
    "base": "prior.npy",
    "shuffled_within": "shuffled-within.npy",
    "shuffled_global": "shuffled-global.npy",
}
PRIOR_META = "meta.json"
PRIOR_STATS = "stats.json"
PRIOR_VALIDATION = "prior_validation.json"  # the shuffles' record (their checksums and seeds)
# Files several stages name: a corpus' splits, a base model's folder, a probe's routes, a graph's
# partition and metrics, an evaluation's summary, a benchmark's items.
SPLIT_FILE = "train.parquet"
POOL_FILE = "probe.parquet"
BASE_MODEL = "base"
ROUTES_FILE = "routes.npz"
ROUTES_META = "meta.json"  # the probe pool tokens behind the routes
PARTITION_FILE = "partition.json"
METRICS_FILE = "metrics.json"
LAYERS_FILE = "layers.parquet"
SUMMARY_FILE = "summary.json"
ITEMS_FILE = "items.parquet"
# Every benchmark's items in one file, the evaluations' single items input: one DAG edge per
# evaluation instead of one per benchmark (about half of a paper-scale DAG's edges otherwise).
SUITE_FILE = "suite.parquet"
SUITE_PROVENANCE = "suite.provenance.json"
CORPUS_REPORT = "report.json"  # a corpus build's row counts and score distribution
RAW_FILE = "raw.parquet"  # a benchmark's downloaded or generated rows
MANIFEST_FILE = "manifest.json"  # a download's hub record (revision resolved)
PROVENANCE_FILE = "provenance.json"  # the provenance record of a stage folder's job
RAW_PROVENANCE = "raw.provenance.json"
ROUTING_REPORT = "routing_report.json"  # a toy base's routing structure before and after pretraining
GENERATIONS_FILE = "generations.parquet"
GENERATIONS_PROVENANCE = "generations.provenance.json"
SCORES_FILE = "scores.parquet"
LIKELIHOOD_FILE = "likelihood.parquet"  # teacher-forced gold-answer log-likelihood per item and routing
LIKELIHOOD_SUMMARY = "likelihood.json"
LIKELIHOOD_PROVENANCE = "likelihood.provenance.json"
GATES_TABLE = "gates"  # tables/gates.{csv,md}: the sanity gates (report/gates.py), not a paper table
#: The scales whose default run builds the gates, and whose claims table reads them (at paper scale the
#: gates' likelihood jobs cost GPU time: a named target there, which the claims never wait for).
GATES_SCALES = ("toy",)
SHUFFLE_PROVENANCE = "shuffle-provenance.json"
BUNDLE_LEDGER = "imported.json"  # what an imported results bundle placed (records/imported.py)
TABLE_SUFFIXES = (".csv", ".md", ".tex")
FIGURE_SUFFIXES = (".csv", ".png", ".pdf")  # the csv holds the figure's data
NEVER = "(?!x)x"  # a wildcard pattern nothing matches: a rule that does not apply at this scale


#: Every result path below the results root, with the rules' wildcard names. ``{run}`` (a probed
#: run) is ``base``, ``{condition}/s{seed}`` or an own checkpoint's ``own/{name}`` on ``{corpus}``;
#: ``{evaluated}`` (an evaluated checkpoint, the base and an own one once for all corpora) is
#: ``base``, ``own/{name}`` or ``{corpus}/{condition}/s{seed}``;
#: ``{name}`` is the file of a stage's folder. The rules
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
    "suite": "benchmarks/{name}",
    "eval": "evals/{model}/{evaluated}/{name}",
    "megatron_base": "megatron/{model}/base",
    "megatron_dataset": "megatron/datasets/{corpus}",
    "megatron_trained": "megatron/trained/{model}/{corpus}/{condition}/s{seed}",
    "megatron_work": "megatron/work/{model}/{corpus}/{condition}/s{seed}",
    "megatron_check": "megatron/launch_check.txt",
    "provenance": "provenance/{output}",  # + .json (manifest), .audit.txt
    "table": "tables/{table}",  # + .csv, .md, .tex
    "figure": "figures/{figure}",  # + .csv (its data), .png, .pdf
    "bundle": "bundle/{name}",  # an imported results bundle's ledger and its original manifests
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


def gates_path(results: str | Path) -> Path:
    """The sanity gates' CSV (report/gates.py) below ``results``."""
    return Path(f"{result_path(results, 'table', table=GATES_TABLE)}.csv")


def reference_files(output_id: str) -> dict[str, str]:
    """The paper's published values of a table, and notes on them, relative to the checkout (not results)."""
    return {"reference": f"reference/{output_id}.csv", "reference_notes": f"reference/{output_id}.notes.md"}


def run_name(condition: str, seed: int | None) -> str:
    """``{condition}/s{seed}`` for a trained checkpoint; an unseeded run (``base``, ``own/{name}``) is
    its condition."""
    return condition if seed is None else f"{condition}/s{seed}"


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
    return _run_dir(results, "probe", probe.model, probe.corpus, probe.condition, probe.seed) / ROUTES_FILE


def partition_path(results: str | Path, model: str, corpus: str) -> Path:
    """The base partition (with span profile) of a model on a corpus' probe pool."""
    return result_path(results, "graph", model=model, corpus=corpus, run=BASE, name=PARTITION_FILE)


def metrics_path(results: str | Path, probe: Probe) -> Path:
    """The retention metrics of a probed trained checkpoint."""
    return _run_dir(results, "graph", probe.model, probe.corpus, probe.condition, probe.seed) / METRICS_FILE


def layers_path(results: str | Path, probe: Probe) -> Path:
    """The per-layer retention metrics (and the run's communities) of a probed trained checkpoint."""
    return metrics_path(results, probe).with_name(LAYERS_FILE)


def summary_path(results: str | Path, evaluation: Evaluation) -> Path:
    """One checkpoint's evaluation summary (a base model or an own checkpoint is evaluated once, not
    per corpus)."""
    run = run_name(evaluation.condition, evaluation.seed)
    if evaluation.seed is not None:
        run = f"{evaluation.corpus}/{run}"
    return result_path(results, "eval", model=evaluation.model, evaluated=run, name=SUMMARY_FILE)


def manifest_path(results: str | Path, output_id: str) -> Path:
    """The provenance manifest of one table or figure."""
    return Path(f"{result_path(results, 'provenance', output=output_id)}.json")


def audit_path(results: str | Path, output_id: str) -> Path:
    """The audit report of one table or figure, written only when everything recorded holds."""
    return Path(f"{result_path(results, 'provenance', output=output_id)}.audit.txt")


def bundle_manifest_path(results: str | Path, output_id: str) -> Path:
    """The manifest an imported results bundle carried for one table or figure (its original run's)."""
    return result_path(results, "bundle", name=f"manifests/{output_id}.json")


def ledger_path(results: str | Path) -> Path:
    """The ledger of the results bundle imported into ``results`` (records/imported.py)."""
    return result_path(results, "bundle", name=BUNDLE_LEDGER)
