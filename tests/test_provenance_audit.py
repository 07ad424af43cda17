"""The audit's parts on small hand-made chains (the toy pipeline test audits a real one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workflow_scripts.provenance import build_record, path_digest
from workflow_scripts.provenance.audit import (
    MANIFEST,
    audit,
    config_differences,
    merged_config,
    report,
)


def test_config_differences_name_every_changed_key_path():
    recorded = {"training": {"schedule": {"lr_max": 1e-3, "lr_min": 1e-4}}, "scale": "toy", "gone": 1}
    current = {"training": {"schedule": {"lr_max": 2e-3, "lr_min": 1e-4}}, "scale": "toy", "new": [1]}
    assert config_differences(recorded, current) == [
        "gone: 1 -> (removed)",
        "new: (absent) -> [1]",
        "training.schedule.lr_max: 0.001 -> 0.002",
    ]
    assert config_differences(recorded, json.loads(json.dumps(recorded))) == []


def test_merged_config_lets_later_files_win_key_by_key(tmp_path):
    base, overlay = tmp_path / "config.yaml", tmp_path / "toy.yaml"
    base.write_text("training: {epochs: 5, schedule: {lr_max: 1.0e-5, lr_min: 1.0e-6}}\nscale: paper\n")
    overlay.write_text("training: {schedule: {lr_max: 1.0e-3}}\nscale: toy\n")
    assert merged_config([base, overlay]) == {
        "training": {"epochs": 5, "schedule": {"lr_max": 1e-3, "lr_min": 1e-6}},
        "scale": "toy",
    }


@pytest.fixture()
def chain_dir(tmp_path, monkeypatch):
    """raw -> (job a) -> split -> (job b) -> table input, with records written by the real builder."""
    monkeypatch.chdir(tmp_path)
    Path("results/raw").mkdir(parents=True)
    Path("results/data").mkdir(parents=True)
    Path("results/raw/rows.parquet").write_bytes(b"raw rows")
    Path("results/data/split.parquet").write_bytes(b"split rows")
    Path("results/data/table.csv").write_bytes(b"a,b\n")
    for name, source, target in (
        ("results/data/provenance.json", "results/raw/rows.parquet", "results/data/split.parquet"),
        ("results/data/table-provenance.json", "results/data/split.parquet", "results/data/table.csv"),
    ):
        digests = {"source": path_digest(source)}
        record = build_record("x y", {}, digests, {"out": target}, "2026-01-01T00:00:00", 1.0)
        Path(name).write_text(json.dumps(record))
    manifest = {
        "inputs": {"results/data/table.csv": path_digest("results/data/table.csv")},
        "config": {"k": 1},
    }
    return tmp_path, manifest


def test_a_changed_raw_file_invalidates_every_job_after_it(chain_dir):
    root, manifest = chain_dir
    chain, findings, _ = audit(manifest, root, {"k": 1})
    assert findings == [] and len(chain.records) == 2
    Path("results/raw/rows.parquet").write_bytes(b"other rows")
    chain, findings, _ = audit(manifest, root, {"k": 1})
    (finding,) = findings
    assert finding.kind == "file" and finding.subject == "results/raw/rows.parquet"
    assert "recorded by results/data/provenance.json" in finding.detail
    assert set(finding.jobs) == {
        "results/data/provenance.json",
        "results/data/table-provenance.json",
        MANIFEST,
    }
    text = report("t", chain, findings, [])
    assert "MISMATCH file results/raw/rows.parquet" in text and text.endswith("t: 1 mismatch(es)\n")


def test_a_missing_file_and_a_changed_config_are_findings(chain_dir):
    root, manifest = chain_dir
    Path("results/data/split.parquet").unlink()
    _, findings, _ = audit(manifest, root, {"k": 2})
    kinds = sorted((f.kind, f.subject) for f in findings)
    assert ("config", "k") in kinds
    assert [f.detail.startswith("missing") for f in findings if f.kind == "file"] == [True, True]
