"""A figure's rule declares every file its data job reads, so a changed input reruns exactly that figure.

In a copy of the checkout the toy DAG of figure 1 is stood up from empty files (``--summary`` lists
every output, ``--touch`` records them as up to date); changing one of its inputs then shows in a
dry run which jobs Snakemake would rerun (Snakemake 9 reruns on changed content, not on a bare touch).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dag import TOY, copy_checkout, dry_run, snakemake_ok

pytestmark = pytest.mark.slow  # Snakemake stands a toy DAG up and dry-runs it

TARGET = "results/figures/figure1.png"
RPB = "moonlight/math20k/rpb/s42"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkout copy whose results tree holds every output of figure 1's DAG, up to date."""
    root = copy_checkout(tmp_path_factory.mktemp("checkout"))
    for line in snakemake_ok(root, "--summary", TARGET, *TOY, timeout=300).stdout.splitlines():
        name = line.split("\t")[0]
        if not name.startswith("results/"):
            continue
        path = root / name
        if path.suffix:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:  # a directory() output: a checkpoint or a model
            path.mkdir(parents=True, exist_ok=True)
    snakemake_ok(root, "--touch", TARGET, *TOY, timeout=300)
    assert dry_run(TOY, TARGET, cwd=root) == []
    return root


def _rerun_after_changing(checkout: Path, name: str) -> set[str]:
    """The rules a dry run of figure 1 lists once the content of ``name`` changed (then restored)."""
    path = checkout / name
    original = path.read_bytes()
    path.write_bytes(original + b"changed")
    try:
        return {rule for rule, _ in dry_run(TOY, TARGET, cwd=checkout)}
    finally:
        path.write_bytes(original)
        snakemake_ok(checkout, "--touch", TARGET, *TOY, timeout=300)


def test_a_changed_routes_file_reruns_the_figure(checkout: Path) -> None:
    rules = _rerun_after_changing(checkout, f"results/probes/{RPB}/routes.npz")
    assert {"figure_data", "figure"} <= rules


def test_a_changed_retention_layers_file_reruns_the_figure_not_retention(checkout: Path) -> None:
    rules = _rerun_after_changing(checkout, f"results/graphs/{RPB}/layers.parquet")
    assert rules == {"figure_data", "figure"}


def test_restyling_redraws_from_the_data_without_recomputing(checkout: Path) -> None:
    assert _rerun_after_changing(checkout, "results/figures/figure1.csv") == {"figure"}
