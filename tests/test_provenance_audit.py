"""The audit's parts on small hand-made chains (the toy pipeline test audits a real one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workflow_scripts.provenance.audit import (
    MANIFEST,
    Current,
    audit,
    config_differences,
    report,
    summary,
)
from workflow_scripts.records import build_record, path_digest


def test_config_differences_name_every_changed_key_path():
    recorded = {"training": {"schedule": {"lr_max": 1e-3, "lr_min": 1e-4}}, "scale": "toy", "gone": 1}
    current = {"training": {"schedule": {"lr_max": 2e-3, "lr_min": 1e-4}}, "scale": "toy", "new": [1]}
    assert config_differences(recorded, current) == [
        "gone: 1 -> (removed)",
        "new: (absent) -> [1]",
        "training.schedule.lr_max: 0.001 -> 0.002",
    ]
    assert config_differences(recorded, json.loads(json.dumps(recorded))) == []


RECORDS = (
    "results/raw/provenance.json",
    "results/data/provenance.json",
    "results/data/table-provenance.json",
)
ARGUMENTS = {"config": {"schedule": {"lr_max": 1e-3}}}


def current(config=None, settings=None) -> Current:
    """Today's config and settings as the hand-made chain's jobs ran them, unless given."""
    return Current(Path("results"), config or {"k": 1}, settings or dict.fromkeys(RECORDS, ARGUMENTS))


@pytest.fixture()
def chain_dir(tmp_path, monkeypatch):
    """(job r) -> raw -> (job a) -> split -> (job b) -> table input, records written by the real builder."""
    monkeypatch.chdir(tmp_path)
    Path("results/raw").mkdir(parents=True)
    Path("results/data").mkdir(parents=True)
    Path("results/raw/rows.parquet").write_bytes(b"raw rows")
    Path("results/data/split.parquet").write_bytes(b"split rows")
    Path("results/data/table.csv").write_bytes(b"a,b\n")
    Path("reference.csv").write_bytes(b"paper numbers")  # a shipped source: outside the results root
    for name, sources, target in (
        (RECORDS[0], {}, "results/raw/rows.parquet"),
        (RECORDS[1], {"source": "results/raw/rows.parquet"}, "results/data/split.parquet"),
        (
            RECORDS[2],
            {"source": "results/data/split.parquet", "paper": "reference.csv"},
            "results/data/table.csv",
        ),
    ):
        digests = {key: path_digest(path) for key, path in sources.items()}
        record = build_record("x y", ARGUMENTS, digests, {"out": target}, "2026-01-01T00:00:00", 1.0)
        Path(name).write_text(json.dumps(record))
    manifest = {
        "inputs": {"results/data/table.csv": path_digest("results/data/table.csv")},
        "config": {"k": 1},
    }
    return tmp_path, manifest


def test_a_changed_raw_file_invalidates_every_job_after_it(chain_dir):
    root, manifest = chain_dir
    chain, findings, _ = audit(manifest, root, current())
    assert findings == [] and len(chain.records) == 3
    Path("results/raw/rows.parquet").write_bytes(b"other rows")
    chain, findings, _ = audit(manifest, root, current())
    assert [(f.kind, f.subject) for f in findings] == [("file", "results/raw/rows.parquet")] * 2
    writer, reader = sorted(findings, key=lambda f: f.detail)
    assert "recorded by results/data/provenance.json" in writer.detail + reader.detail
    assert set(writer.jobs) == {RECORDS[1], RECORDS[2], MANIFEST}
    text = report("t", chain, findings, [])
    assert "MISMATCH file results/raw/rows.parquet" in text and text.endswith("t: 2 mismatch(es)\n")
    assert "audit of t: 3 records and 4 files verified" in text


def test_a_missing_file_and_a_changed_config_are_findings(chain_dir):
    root, manifest = chain_dir
    Path("results/data/split.parquet").unlink()
    _, findings, _ = audit(manifest, root, current(config={"k": 2}))
    kinds = sorted((f.kind, f.subject) for f in findings)
    assert ("config", "k") in kinds
    assert [f.detail.startswith("missing") for f in findings if f.kind == "file"] == [True, True]


def test_a_hand_edited_output_differs_from_its_producers_record_whatever_the_manifest_says(chain_dir):
    root, manifest = chain_dir
    Path("results/data/table.csv").write_bytes(b"a,b\n1,2\n")  # edited, and the manifest rebuilt over it
    manifest["inputs"] = {"results/data/table.csv": path_digest("results/data/table.csv")}
    _, findings, _ = audit(manifest, root, current())
    (finding,) = findings
    assert finding.subject == "results/data/table.csv" and f"recorded by {RECORDS[2]}" in finding.detail
    assert finding.jobs == (MANIFEST,)


def test_a_deleted_record_leaves_its_outputs_unvouched(chain_dir):
    root, manifest = chain_dir
    Path(RECORDS[1]).unlink()
    _, findings, _ = audit(manifest, root, current())
    assert [(f.kind, f.subject) for f in findings] == [("record", "results/data/split.parquet")]
    assert "no readable record of the job that wrote it" in findings[0].detail
    assert set(findings[0].jobs) == {RECORDS[2], MANIFEST}


def test_an_unreadable_record_is_a_mismatch(chain_dir):
    root, manifest = chain_dir
    Path(RECORDS[1]).write_text('{"outputs": ')
    _, findings, _ = audit(manifest, root, current())
    subjects = {(f.kind, f.subject) for f in findings}
    assert subjects == {("record", RECORDS[1]), ("record", "results/data/split.parquet")}
    assert any("unreadable provenance record" in f.detail for f in findings)


def test_a_job_run_with_other_settings_is_named_with_the_keys_that_differ(chain_dir):
    root, manifest = chain_dir
    today = dict.fromkeys(RECORDS, ARGUMENTS) | {RECORDS[1]: {"config": {"schedule": {"lr_max": 2e-3}}}}
    _, findings, _ = audit(manifest, root, current(settings=today))
    (finding,) = findings
    assert (finding.kind, finding.subject) == ("settings", RECORDS[1])
    assert "config.schedule.lr_max: 0.001 -> 0.002" in finding.detail
    assert set(finding.jobs) == {RECORDS[1], RECORDS[2], MANIFEST}


def test_a_record_no_current_job_writes_is_foreign(chain_dir):
    root, manifest = chain_dir
    today = {record: ARGUMENTS for record in RECORDS if record != RECORDS[0]}
    _, findings, _ = audit(manifest, root, current(settings=today))
    assert [(f.kind, f.subject) for f in findings] == [("settings", RECORDS[0])]
    assert "no job of the current configuration writes this record" in findings[0].detail


def test_the_summary_counts_what_was_verified(chain_dir):
    root, manifest = chain_dir
    Path(RECORDS[1]).unlink()
    chain, findings, absent = audit(manifest, root, current())
    entry = summary("t", chain, findings, absent)
    assert (entry["records"], entry["files"], entry["holds"]) == (1, 3, False)  # the chain breaks there
    assert entry["findings"][0]["kind"] == "record" and MANIFEST in entry["findings"][0]["invalidates"]
    json.dumps(entry)
