"""`models toy-base`: a real (tiny) toy base built, pretrained and reported through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.dag import ROOT, router_terms
from workflow_scripts.modeling.toy import load_local
from workflow_scripts.routing.hf import find_gates

SPEC = {
    "hidden_size": 32,
    "num_layers": 3,
    "first_dense_layers": 1,
    "intermediate_size": 64,
    "moe_intermediate_size": 16,
    "num_heads": 2,
    "num_experts": 8,
    "top_k": 2,
    "shared_experts": 1,
}
PRETRAIN = {
    "vocab_size": 400,
    "corpus_rows": {"main": 60, "Math": 30},
    "corpus_seed": 3,
    "steps": 4,
    "batch_size": 4,
    "sequence_length": 96,
    "lr": 3e-3,
    "warmup_steps": 1,
    "lbl_coefficient": 1e-3,
    "lbl_term": router_terms()["load_balancing"].declaration(),
    "seed": 0,
    "report_rows": 4,
}


def toy_base(tmp_path, architecture="qwen3_moe", spec=SPEC) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "workflow_scripts", "models", "toy-base", "--architecture", architecture,
        "--spec", json.dumps(spec), "--pretrain", json.dumps(PRETRAIN),
        "--out", str(tmp_path / "base"), "--report", str(tmp_path / "report.json"),
    ]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_toy_base_is_built_pretrained_and_reported(tmp_path):
    done = toy_base(tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["pretraining"]["steps"] == PRETRAIN["steps"]
    for state in ("random_init", "pretrained"):
        assert set(report[state]["domains"]) == {"math", "code", "general"}
        assert set(report[state]["divergence_l1"]) == {"code-general", "code-math", "general-math"}
        for domain in report[state]["domains"].values():
            assert 0 <= domain["sharpness_l1"] <= 2 and 0 < domain["effective_expert_fraction"] <= 1
    model, tokenizer = load_local(tmp_path / "base")
    assert len(find_gates(model)) == SPEC["num_layers"] - SPEC["first_dense_layers"]
    assert tokenizer.chat_template


@pytest.mark.slow
def test_the_toy_moonlight_ships_the_kind_of_tokenizer_moonlights_hub_does(tmp_path):
    """Remote code with a Python backend, two ids longer than the model's ``vocab_size``, as Moonlight."""
    from workflow_scripts.modeling.moonlight import CHAT_TEMPLATE, RANK_FILE

    done = toy_base(tmp_path, architecture="deepseek_v3")
    assert done.returncode == 0, done.stderr
    base = tmp_path / "base"
    assert (base / "tokenization_moonshot.py").is_file() and (base / RANK_FILE).is_file()
    assert not (base / "tokenizer.json").exists()
    model, tokenizer = load_local(base)
    assert type(tokenizer).__name__ == "TikTokenTokenizer" and not tokenizer.is_fast
    assert (
        len(tokenizer)
        == model.config.vocab_size + 2
        == json.loads((base / "config.json").read_text())["vocab_size"] + 2
    )
    assert model.config.eos_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("[EOS]")
    assert tokenizer.chat_template == CHAT_TEMPLATE


@pytest.mark.slow
def test_unknown_spec_key_is_a_clear_error(tmp_path):
    done = toy_base(tmp_path, spec={**SPEC, "hiden_size": 8})
    assert done.returncode == 2
    assert "--spec" in done.stderr and "hiden_size" in done.stderr


def _fake_hub(calls: dict, fail: bool = False, auto_map: dict | None = None) -> types.SimpleNamespace:
    """A stand-in for huggingface_hub's snapshot download: writes a snapshot with remote code."""
    sha = "0123abcd" * 5

    def snapshot_download(repo, revision, local_dir):
        calls["snapshot"] = (repo, revision)
        config = {"model_type": "deepseek_v3", "auto_map": auto_map or {"AutoModel": "modeling_x.XModel"}}
        (Path(local_dir) / "config.json").write_text(json.dumps(config))
        (Path(local_dir) / "modeling_x.py").write_text("class XModel: ...\n")
        (Path(local_dir) / ".cache").mkdir()
        if fail:
            raise OSError("connection reset")
        (Path(local_dir) / "model.safetensors").write_bytes(b"weights")

    class FakeApi:
        def model_info(self, repo, revision):
            calls["info"] = (repo, revision)
            return types.SimpleNamespace(sha=revision)

    return types.SimpleNamespace(HfApi=FakeApi, snapshot_download=snapshot_download, sha=sha)


def test_model_download_fetches_the_commit_and_records_its_remote_code(tmp_path, monkeypatch):
    """The commit from hub.lock.yaml is checked, not resolved; the code trust_remote_code runs is recorded."""
    from workflow_scripts.models.cli import run_download
    from workflow_scripts.records import file_sha256

    calls: dict = {}
    hub = _fake_hub(calls)
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    out, manifest = (
        tmp_path / "models" / "moonlight" / "base",
        tmp_path / "models" / "moonlight" / "base.json",
    )
    run_download(
        types.SimpleNamespace(
            repo="org/model", revision=hub.sha, out=str(out), manifest=str(manifest), moe_layers=None
        )
    )
    assert calls == {"info": ("org/model", hub.sha), "snapshot": ("org/model", hub.sha)}
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "modeling_x.py"]
    record = json.loads(manifest.read_text())
    assert (record["repo"], record["revision_resolved"]) == ("org/model", hub.sha)
    assert record["remote_code"] == {"modeling_x.py": file_sha256(out / "modeling_x.py")}
    assert record["checkpoint"]


def test_a_model_whose_auto_map_imports_another_repository_is_refused(tmp_path, monkeypatch):
    """``owner/repo--module.Class`` code comes from that repository at no pinned commit."""
    from workflow_scripts.errors import UserInputError
    from workflow_scripts.models.cli import run_download

    foreign = {"AutoConfig": "configuration_x.XConfig", "AutoModel": "other/code--modeling_x.XModel"}
    hub = _fake_hub({}, auto_map=foreign)
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    out = tmp_path / "models" / "moonlight" / "base"
    args = types.SimpleNamespace(
        repo="org/model", revision=hub.sha, out=str(out), manifest=str(tmp_path / "m"), moe_layers=None
    )
    with pytest.raises(UserInputError, match=r"config.json: AutoModel -> other/code--modeling_x.XModel"):
        run_download(args)
    assert list(out.parent.iterdir()) == [] and not (tmp_path / "m").exists()


def test_a_failed_model_download_leaves_no_checkpoint(tmp_path, monkeypatch):
    from workflow_scripts.models.cli import run_download

    hub = _fake_hub({}, fail=True)
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    out = tmp_path / "models" / "moonlight" / "base"
    with pytest.raises(OSError, match="connection reset"):
        run_download(
            types.SimpleNamespace(
                repo="org/model", revision=hub.sha, out=str(out), manifest="m.json", moe_layers=None
            )
        )
    assert list(out.parent.iterdir()) == []
