"""The hub lock (issue 31, item 4): every ref of the registry resolved to a commit once, before any download.

``python -m workflow_scripts lock`` asks the hub (faked here with ``huggingface_hub``'s own
``DatasetInfo``/``ModelInfo`` answers) for the commit of each distinct ref and writes
``hub.lock.yaml``; the download rules read it, and every download refuses a ref. Whether a pinned
config.yaml then reruns anything is a real Snakemake run: tests/test_hub_lock_rerun.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import huggingface_hub
import pytest
import yaml

from tests.fake_hub import FakeHub, commit_of, install
from workflow_scripts import dag_inputs, hub
from workflow_scripts.cli import main
from workflow_scripts.errors import UserInputError

ROOT = Path(__file__).resolve().parents[1]
PINNED = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture()
def fake_hub(monkeypatch) -> type[FakeHub]:
    return install(monkeypatch)


def lock(tmp_path: Path, *extra: str) -> int:
    return main(
        ["lock", "--config", str(ROOT / "config.yaml"), "--lock", str(tmp_path / "hub.lock.yaml"), *extra]
    )


def test_every_hub_revision_of_the_registry_is_a_source(paper_config):
    sources = hub.hub_sources(paper_config)
    assert len(sources) == 17  # 2 training datasets, 3 models, 12 benchmarks
    assert {s.repo_type for s in sources if s.key.startswith("models.")} == {"model"}
    assert {s.repo_type for s in sources if not s.key.startswith("models.")} == {"dataset"}
    assert hub.hub_sources(paper_config, ["datasets"])[0].key == "datasets.glm51.hub.revision"


def test_lock_resolves_each_ref_once_and_looks_up_no_commit(tmp_path, fake_hub, paper_config):
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump({"models": {"moonlight": {"hub": {"revision": PINNED}}}}))
    assert lock(tmp_path, "--overlay", str(pinned)) == 0
    # cais/mmlu (MMLU and MMLU-STEM) and Idavidrein/gpqa (two configs) are one ref each.
    refs = {(s.repo_type, s.repo, s.revision) for s in hub.hub_sources(paper_config)}
    refs.discard(("model", "moonshotai/Moonlight-16B-A3B", "main"))
    assert sorted(fake_hub.calls) == sorted(refs) and len(fake_hub.calls) == 14
    written = hub.read_lock(tmp_path / "hub.lock.yaml")
    assert written == {ref: commit_of(ref[1], ref[2]) for ref in refs}
    text = (tmp_path / "hub.lock.yaml").read_text()
    assert text.startswith("# Hub commits") and "python -m workflow_scripts lock" in text
    document = yaml.safe_load(text)
    assert set(document) == {"dataset_repos", "model_repos"}
    assert document["dataset_repos"]["cais/mmlu"] == {"main": commit_of("cais/mmlu", "main")}


def test_locking_again_keeps_every_commit_and_update_moves_them(tmp_path, fake_hub):
    assert lock(tmp_path) == 0
    first = (tmp_path / "hub.lock.yaml").read_text()
    fake_hub.calls.clear()
    fake_hub.salt = "-moved"  # the hub's main has moved on since
    assert lock(tmp_path) == 0
    assert fake_hub.calls == [] and (tmp_path / "hub.lock.yaml").read_text() == first
    assert lock(tmp_path, "--update") == 0
    moved = hub.read_lock(tmp_path / "hub.lock.yaml")
    assert moved[("dataset", "openai/gsm8k", "main")] == commit_of("openai/gsm8k", "main", "-moved")


def test_an_entry_no_source_names_is_dropped():
    sources = [hub.HubSource("models.m.hub.revision", "model", "org/m", "v2")]
    old = {("model", "org/m", "v1"): "1" * 40, ("model", "org/m", "v2"): "2" * 40}
    new, done = hub.resolve_lock(sources, old, resolve=lambda *ref: pytest.fail(f"looked up {ref}"))
    assert new == {("model", "org/m", "v2"): "2" * 40} and [d.status for d in done] == ["kept"]


def test_download_rules_take_the_locked_commit_and_a_pinned_config_gives_the_same(paper_config):
    gsm8k = ("dataset", "openai/gsm8k", "main")
    lock_ = {gsm8k: commit_of("openai/gsm8k", "main")}
    assert dag_inputs.hub_revision(paper_config, {}, "benchmarks", "gsm8k") == "main"  # a dry run plans
    assert dag_inputs.hub_revision(paper_config, lock_, "benchmarks", "gsm8k") == lock_[gsm8k]
    paper_config["benchmarks"]["gsm8k"]["hub"]["revision"] = lock_[gsm8k]
    assert dag_inputs.hub_revision(paper_config, {}, "benchmarks", "gsm8k") == lock_[gsm8k]
    assert dag_inputs.hub_revision(paper_config, lock_, "benchmarks", "gsm8k") == lock_[gsm8k]


def test_cache_is_refused_for_refs_the_lock_does_not_resolve(paper_config):
    assert "datasets.glm51.hub.revision" in dag_inputs.cache_refusal(paper_config, ["prior"], {})
    assert "python -m workflow_scripts lock" in dag_inputs.cache_refusal(paper_config, ["prior"], {})
    every_ref = {(s.repo_type, s.repo, s.revision): PINNED for s in hub.hub_sources(paper_config)}
    assert dag_inputs.cache_refusal(paper_config, [], every_ref) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("dataset_repos: [", "not valid YAML"),
        ("datasets: {}", "expected the keys"),
        ("dataset_repos: {org/d: {main: abc}}", "org/d"),
        ("model_repos: {org/m: 0123}", "org/m"),
    ],
)
def test_a_malformed_lock_is_refused_naming_the_file(tmp_path, text, says):
    (tmp_path / "hub.lock.yaml").write_text(text)
    with pytest.raises(UserInputError, match=says) as refused:
        hub.read_lock(tmp_path / "hub.lock.yaml")
    assert "hub.lock.yaml" in str(refused.value)


def test_no_lock_file_is_an_empty_lock(tmp_path):
    assert hub.read_lock(tmp_path / "hub.lock.yaml") == {}


DOWNLOADS = {
    "data": ["data", "download", "--format", "glm_sharegpt", "--subset", "Math", "--split", "train"],
    "evaluate": [
        "evaluate",
        "download",
        "--benchmark",
        "gsm8k",
        "--rows",
        "1319",
        "--subset",
        "main",
        "--split",
        "test",
    ],
    "models": ["models", "download"],
}


@pytest.mark.parametrize("stage", DOWNLOADS)
def test_every_download_refuses_a_ref_before_any_hub_call(stage, tmp_path, monkeypatch, capsys):
    def no_hub(*args, **kwargs):
        pytest.fail("the hub was called")

    monkeypatch.setattr(huggingface_hub, "HfApi", no_hub)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_hub)
    out = ["--out", str(tmp_path / "out"), "--manifest", str(tmp_path / "manifest.json")]
    assert main([*DOWNLOADS[stage], "--repo", "org/x", "--revision", "main", *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'main' is a ref, not a commit" in err[0]
    assert "python -m workflow_scripts lock" in err[0] and "hub.lock.yaml" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_hub_out_of_reach_is_one_line(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
    }
    argv = [sys.executable, "-m", "workflow_scripts", "lock", "--config", str(ROOT / "config.yaml")]
    done = subprocess.run([*argv, "--lock", "hub.lock.yaml"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1, done.stderr
    assert err[0].startswith("error: the Hugging Face hub could not serve the request")
    assert not (tmp_path / "hub.lock.yaml").exists()
