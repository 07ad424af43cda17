"""Results that travel: the suite's toy run exported as a bundle, imported into a fresh clone and rebuilt.

The round trip covers the closure the toy run builds (Tables 1, 6 and 13 and Figure 2): the clone
runs only report jobs, rebuilds each file byte-identical and its audit says which files came from
the bundle; an edited, a removed or a foreign member is refused on import or named by the audit.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from tests.dag import TOY, TOY_RUN_OUTPUTS, planned_jobs, project_cli, snakemake_ok
from workflow_scripts import layout
from workflow_scripts.bundle.archive import CHECKSUMS, META
from workflow_scripts.errors import UserInputError
from workflow_scripts.provenance.audit import Chain, file_findings
from workflow_scripts.records import file_sha256
from workflow_scripts.records.imported import Ledger
from workflow_scripts.records.sha256sums import read_list, write_list
from workflow_scripts.records.verify import verify_inputs

# The only jobs an importing clone runs: no download, training, generation, probe or scoring.
DOWNSTREAM_RULES = {"table", "figure_data", "figure", "provenance_manifest"}
REBUILT = [f"results/tables/{t}{s}" for t in ("table1", "table6", "table13") for s in layout.TABLE_SUFFIXES]
REBUILT += [f"results/figures/figure2{suffix}" for suffix in layout.FIGURE_SUFFIXES]
MANIFESTS = [str(layout.manifest_path(layout.RESULTS, output)) for output in TOY_RUN_OUTPUTS]
GENERATIONS = "results/evals/moonlight/math20k/rpb/s42/generations.parquet"
RECORD = "results/priors/moonlight/math20k/provenance.json"
CHECKPOINT = "results/checkpoints/moonlight/math20k/rpb/s42"


def fresh_clone(toy_run: Path, destination: Path) -> Path:
    """A git clone of the toy run's checkout: its commit, no results, no ``.snakemake``."""
    subprocess.run(["git", "clone", "-q", str(toy_run), str(destination)], check=True, capture_output=True)
    return destination


@pytest.fixture(scope="module")
def archive(toy_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "toy-bundle.tar.gz"
    done = project_cli(toy_run, "bundle", "export", *TOY_RUN_OUTPUTS, "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"toy bundle: {out.stat().st_size / 1e6:.1f} MB")
    return out


@pytest.fixture(scope="module")
def rebuilt(toy_run, archive, tmp_path_factory) -> tuple[Path, list[str], float]:
    """A fresh clone with the bundle imported and the outputs rebuilt: (clone, rules planned, seconds)."""
    started = time.perf_counter()
    clone = fresh_clone(toy_run, tmp_path_factory.mktemp("clone") / "rpb-repro")
    done = project_cli(clone, "bundle", "import", str(archive))
    assert done.returncode == 0, done.stderr[-3000:]
    rules = [job.rule for job in planned_jobs(TOY, *MANIFESTS, cwd=clone)]
    snakemake_ok(clone, *MANIFESTS, *TOY)
    seconds = time.perf_counter() - started
    print(f"import and rebuild: {seconds:.0f} s")
    return clone, rules, seconds


@pytest.mark.slow
def test_a_clone_rebuilds_only_downstream_jobs_byte_identical(toy_run, rebuilt):
    clone, rules, _ = rebuilt
    assert rules and set(rules) <= DOWNSTREAM_RULES, rules
    assert rules.count("table") == 3 and rules.count("provenance_manifest") == len(TOY_RUN_OUTPUTS)
    assert not (clone / CHECKPOINT).exists()  # left behind
    for path in REBUILT:
        assert (clone / path).read_bytes() == (toy_run / path).read_bytes(), f"{path} differs"


@pytest.mark.slow
def test_the_clones_audit_holds_and_names_what_came_from_the_bundle(rebuilt):
    clone, _, _ = rebuilt
    done = project_cli(clone, "provenance", "audit", *TOY_RUN_OUTPUTS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"from the bundle, verified against its record: {GENERATIONS}" in done.stdout
    assert f"left behind by the bundle, vouched for by its record: {CHECKPOINT}" in done.stdout
    assert "rebuilt here: results/tables/table6.csv (identical to the bundle's original)" in done.stdout
    (entry, *_) = json.loads(project_cli(clone, "provenance", "audit", "table6", "--json").stdout)
    assert entry["holds"] and GENERATIONS in entry["origins"]["bundle"]


@pytest.mark.slow
def test_a_bundle_file_edited_after_import_is_named_by_the_audit(rebuilt):
    clone, _, _ = rebuilt
    path = clone / GENERATIONS
    original = path.read_bytes()
    path.write_bytes(original[:-1] + bytes([original[-1] ^ 0xFF]))
    try:
        done = project_cli(clone, "provenance", "audit", "table6")
    finally:
        path.write_bytes(original)
    assert done.returncode == 2
    assert (
        f"MISMATCH file {GENERATIONS}:" in done.stdout and "placed by bundle toy-bundle.tar.gz" in done.stdout
    )


def _rewritten(archive: Path, out: Path, drop: str, relist: bool) -> Path:
    """``archive`` less member ``drop``; with ``relist``, its checksum list and bundle.json forged."""
    staging = out.with_suffix(".d")
    with tarfile.open(archive) as tar:
        tar.extractall(staging, filter="data")
    (staging / drop).unlink()
    if relist:
        listed = read_list(staging / CHECKSUMS)
        meta = json.loads((staging / META).read_text())
        meta["records"].remove(drop)
        (staging / META).write_text(json.dumps(meta))
        del listed[drop]
        listed[META] = file_sha256(staging / META)
        write_list(staging / CHECKSUMS, listed)
    with tarfile.open(out, "w:gz") as tar:
        for member in sorted(staging.iterdir()):
            tar.add(member, arcname=member.name)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("relist", [False, True], ids=["checksum list kept", "checksum list forged"])
def test_a_bundle_with_a_record_removed_is_refused_naming_it(toy_run, archive, tmp_path, relist):
    tampered = _rewritten(archive, tmp_path / "tampered.tar.gz", RECORD, relist)
    clone = fresh_clone(toy_run, tmp_path / "clone")
    done = project_cli(clone, "bundle", "import", str(tampered))
    assert done.returncode == 2, done.stdout + done.stderr
    # Forged out of every list, the record is no longer known; a file it vouched for is named instead.
    vouched = [d["path"] for d in json.loads((toy_run / RECORD).read_text())["outputs"].values()]
    named = [f"{path}: no record in the bundle lists it" for path in vouched] if relist else [RECORD]
    assert any(text in done.stderr for text in named), done.stderr
    assert not (clone / "results/priors").exists()  # nothing placed


@pytest.mark.slow
def test_a_bundle_from_another_configuration_is_refused_naming_the_key(toy_run, archive, tmp_path):
    clone = fresh_clone(toy_run, tmp_path / "clone")
    (clone / "other.yaml").write_text(yaml.safe_dump({"evaluation": {"temperature": 0.7}}))
    files = ["config.yaml", "profiles/local/toy.yaml", "other.yaml"]
    done = project_cli(clone, "bundle", "import", str(archive), "--config-files", *files)
    assert done.returncode == 2
    assert "the bundle was made under another configuration" in done.stderr
    assert "evaluation.temperature:" in done.stderr
    assert not (clone / "results/evals").exists()


def _vouching(sha256: str) -> Ledger:
    digest = {"path": CHECKPOINT, "sha256": sha256, "recorded_by": f"{CHECKPOINT}.provenance.json"}
    return Ledger("b.tar.gz", "0" * 64, None, placed={}, recorded_only={CHECKPOINT: digest})


def test_a_file_left_behind_holds_only_at_the_digest_its_bundle_vouched_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chain = Chain()
    chain.expect(CHECKPOINT, f"{CHECKPOINT}.provenance.json", {"sha256": "a" * 64}, read=False)
    chain.expect(CHECKPOINT, "results/evals/x/generations.provenance.json", {"sha256": "a" * 64}, read=True)
    assert file_findings(chain, _vouching("a" * 64)) == []
    assert [f.subject for f in file_findings(chain, None)] == [CHECKPOINT] * 2  # absent, no bundle
    assert len(file_findings(chain, _vouching("b" * 64))) == 2  # vouched for other bytes


def test_only_an_absent_input_a_bundle_vouched_for_is_accepted_unread(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    vouched = _vouching("a" * 64).recorded_only
    assert verify_inputs({"inputs_list[0]": CHECKPOINT}, True, {}, {}, recorded_only=vouched) == {}
    with pytest.raises(UserInputError, match="no such file or directory"):
        verify_inputs({"inputs_list[0]": f"{CHECKPOINT}x"}, True, {}, {}, recorded_only=vouched)
