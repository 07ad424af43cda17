"""Provenance records and table manifests: checksums an independent hashlib agrees with."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from tests.dag import ROOT
from workflow_scripts.records import code_version, path_digest


def test_file_digest_matches_hashlib(tmp_path):
    file = tmp_path / "a.bin"
    file.write_bytes(b"router prior" * 100_000)
    digest = path_digest(file)
    assert digest["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert digest["bytes"] == 1_200_000


def test_directory_digest_tracks_content_and_names(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "w.bin").write_bytes(b"1")
    before = path_digest(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "w.bin").write_bytes(b"2")
    changed = path_digest(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "w.bin").rename(tmp_path / "ckpt" / "v.bin")
    renamed = path_digest(tmp_path / "ckpt")
    assert len({before["sha256"], changed["sha256"], renamed["sha256"]}) == 3
    assert before["files"] == 1
    assert path_digest(tmp_path / "absent") == {"path": str(tmp_path / "absent"), "missing": True}


def test_directory_digest_ignores_the_snakemake_flag(tmp_path):
    """Snakemake touches ``.snakemake_timestamp`` into a directory output after the job's record."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"weights")
    recorded = path_digest(tmp_path / "ckpt")
    (tmp_path / "ckpt" / ".snakemake_timestamp").touch()
    assert path_digest(tmp_path / "ckpt") == recorded


def test_code_version_outside_git(tmp_path):
    version = code_version(tmp_path)
    assert version["git_commit"] is None and version["git_dirty"] is None
    assert version["package_version"]


def test_manifest_command_gathers_inputs_and_upstream_records(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "Math.parquet").write_bytes(b"raw rows")
    hub = {
        "repo": "org/data",
        "revision_resolved": "0" * 40,
        "parquet": str(raw / "Math.parquet"),
        "parquet_sha256": hashlib.sha256(b"raw rows").hexdigest(),
    }
    (raw / "Math.manifest.json").write_text(json.dumps(hub))
    data = tmp_path / "data"
    data.mkdir()
    train = data / "train.parquet"
    train.write_bytes(b"rows")
    build = {  # a job's record: found because it lists the manifest's input among its outputs
        "command": "data build",
        "inputs": {"raw": {"path": str(raw / "Math.parquet")}},
        "outputs": {"train": {"path": str(train), "sha256": hashlib.sha256(b"rows").hexdigest()}},
    }
    (data / "provenance.json").write_text(json.dumps(build))
    out = tmp_path / "manifest.json"
    record = tmp_path / "record.json"
    command = [
        sys.executable, "-m", "workflow_scripts", "provenance", "manifest",
        "--output-id", "table2", "--entry", json.dumps({"title": "T2", "cells": []}),
        "--closure", json.dumps({"corpora": ["math20k"]}), "--config", json.dumps({"scale": "toy"}),
        "--inputs", str(train), "--out", str(out), "--provenance", str(record),
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True)
    manifest = json.loads(out.read_text())
    assert manifest["output"] == "table2" and manifest["title"] == "T2"
    assert manifest["inputs"][str(train)]["sha256"] == hashlib.sha256(b"rows").hexdigest()
    assert manifest["upstream"] == {
        str(data / "provenance.json"): build,
        str(raw / "Math.manifest.json"): hub,
    }
    assert manifest["code"]["git_commit"]  # the tests run inside the checkout
    written = json.loads(record.read_text())
    assert written["command"] == "provenance manifest"
    assert written["outputs"]["out"]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert set(written["software"]["packages"]) >= {"pandas", "snakemake"}


def test_bad_json_argument_is_a_clear_error(tmp_path):
    command = [
        sys.executable, "-m", "workflow_scripts", "provenance", "manifest", "--output-id", "table2",
        "--entry", "{not json", "--closure", "{}", "--config", "{}", "--out", str(tmp_path / "m.json"),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2
    assert "--entry" in done.stderr and "not valid JSON" in done.stderr


def test_repeated_path_arguments_are_each_recorded():
    from argparse import Namespace

    from workflow_scripts.cli import _path_arguments

    args = Namespace(items=["a.parquet", "b.parquet"], generations="g.parquet", reference=None)
    assert _path_arguments(args, ("items", "generations", "reference")) == {
        "items[0]": "a.parquet",
        "items[1]": "b.parquet",
        "generations": "g.parquet",
    }
