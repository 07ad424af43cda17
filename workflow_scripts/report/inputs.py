"""The exact result files each table and figure reads: one list for its rule's inputs and its readers.

The rule declares these files (``rules/common.smk`` ``report_inputs``) and passes them as
``--inputs``; :class:`ResultFiles` then refuses any other path, so a reader cannot open a file
Snakemake would not rerun it for. Light imports only: Snakemake calls this while building the DAG.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts import layout, registry

# Files beyond the closure's result files that a figure's data function (or a diagnostic table) opens.
FIGURE_READS: dict[str, tuple[str, ...]] = {
    "diagnostic_prior_topk": ("routes",),
    "figure1": ("routes", "layers"),
    "figure2": ("prior_arrays",),
    "coactivation_heatmaps": ("routes",),
}
#: The tables that read the sanity gates (results/tables/gates.csv) where a run builds them by
#: default (layout.GATES_SCALES): the claims table withholds the verdicts whose premise failed.
GATE_READERS = ("claims",)


class UndeclaredInputError(ValueError):
    """A reader asked for a result file its rule does not declare."""


@dataclass(frozen=True)
class ResultFiles:
    """The results root (the fixed layout resolves paths below it) and the only files a job may open."""

    root: Path
    declared: frozenset[Path]

    def path(self, locate: Callable[..., Path], *args: Any) -> Path:
        """``locate(root, *args)`` (a ``workflow_scripts.layout`` function), if it is a declared input."""
        path = Path(locate(self.root, *args))
        if path not in self.declared:
            raise UndeclaredInputError(f"{path}: not a declared input of this job (--inputs)")
        return path


def _probe_result(results: Path, probe: registry.Probe) -> Path:
    """The graph file a probe ends in: the base partition, or a trained run's retention metrics."""
    if probe.condition == registry.BASE:
        return layout.partition_path(results, probe.model, probe.corpus)
    return layout.metrics_path(results, probe)


def _closure_files(results: Path, closure: registry.Closure) -> list[Path]:
    """The result files every reader of a closure may open: summaries, retention and prior records."""
    files = [layout.summary_path(results, e) for e in closure.evaluations]
    files += [_probe_result(results, p) for p in closure.probes]
    pairs = {(p.model, p.corpus) for p in closure.priors}
    files += [layout.prior_file(results, m, c, layout.PRIOR_STATS) for m, c in pairs]
    files += [layout.prior_file(results, m, c, layout.PRIOR_VALIDATION) for m, c in closure.prior_validations]
    return files


def _figure_files(results: Path, closure: registry.Closure, reads: Iterable[str]) -> list[Path]:
    """The extra files of ``FIGURE_READS``: probe routes, retention layers, base priors with their meta."""
    files: list[Path] = []
    if "routes" in reads:
        files += [layout.routes_path(results, p) for p in closure.probes]
    if "layers" in reads:
        files += [layout.layers_path(results, p) for p in closure.probes if p.condition != registry.BASE]
    if "prior_arrays" in reads:
        for prior in (p for p in closure.priors if p.kind == registry.BASE):
            files += [
                layout.prior_file(results, prior.model, prior.corpus, name)
                for name in (layout.PRIOR_FILES[registry.BASE], layout.PRIOR_META)
            ]
    return files


def declared_files(config: Mapping[str, Any], output_id: str, results: str | Path) -> list[Path]:
    """Every result file table/figure ``output_id`` reads, sorted and without repeats."""
    closure = registry.closure(config, output_id)
    files = _closure_files(Path(results), closure)
    files += _figure_files(Path(results), closure, FIGURE_READS.get(output_id, ()))
    if output_id in GATE_READERS and config["scale"] in layout.GATES_SCALES:
        files.append(layout.gates_path(results))
    return sorted(set(files))
