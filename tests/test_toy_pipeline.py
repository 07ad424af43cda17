"""The toy default, run for real: `snakemake --profile profiles/local` in a scratch copy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import load_config
from tests.dag import ROOT
from workflow_scripts import registry

IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "results", "logs", ".snakemake", "__pycache__", "*.egg-info"
)


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", *args, "--profile", "profiles/local"]
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("toy") / "rpb-repro"
    shutil.copytree(ROOT, workdir, ignore=IGNORED)
    snakemake(workdir)
    return workdir


@pytest.mark.slow
def test_toy_default_builds_every_corpus(toy_run):
    config = load_config(toy=True)
    for name, corpus in config["corpora"].items():
        train = pd.read_parquet(toy_run / f"results/data/{name}/train.parquet")
        probe = pd.read_parquet(toy_run / f"results/data/{name}/probe.parquet")
        report = json.loads((toy_run / f"results/data/{name}/report.json").read_text())
        assert not probe.empty, name
        assert set(train["row_id"]).isdisjoint(probe["row_id"]), name
        assert train["row_id"].is_monotonic_increasing and probe["row_id"].is_monotonic_increasing
        if corpus["train_rows"] is not None:
            assert len(train) == corpus["train_rows"], name
        assert not train["answer"].str.contains("</think>", regex=False).any()
        if corpus["filter"] == "fenced_code":
            assert train["answer"].str.contains("```", regex=False).all()
        assert json.dumps(report)  # a readable report exists beside the splits
        record = json.loads((toy_run / f"results/data/{name}/provenance.json").read_text())
        assert record["command"] == "data build"
        assert set(record["outputs"]) == {"train", "probe", "report"}


@pytest.mark.slow
def test_toy_default_writes_every_manifest_and_is_cached(toy_run):
    config = load_config(toy=True)
    for output_id in registry.outputs(config):
        manifest = json.loads((toy_run / f"results/provenance/{output_id}.json").read_text())
        expected = registry.closure(config, output_id).corpora
        assert {Path(p).parent.name for p in manifest["inputs"]} == set(expected)
    again = snakemake(toy_run)
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_single_table_target_builds_only_its_closure(tmp_path):
    workdir = tmp_path / "rpb-repro"
    shutil.copytree(ROOT, workdir, ignore=IGNORED)
    snakemake(workdir, "results/provenance/table5.json")
    assert sorted(p.name for p in (workdir / "results/data").iterdir()) == ["coding20k", "math20k"]
    assert sorted(p.name for p in (workdir / "results/raw/glm51").glob("*.parquet")) == [
        "Math.parquet",
        "main.parquet",
    ]
    assert not (workdir / "results/raw/openr1").exists()
