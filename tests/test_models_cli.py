"""`models toy-base`: a real (tiny) toy base built, pretrained and reported through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.dag import ROOT
from workflow_scripts.models.toy import load_local
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


def test_unknown_spec_key_is_a_clear_error(tmp_path):
    done = toy_base(tmp_path, spec={**SPEC, "hiden_size": 8})
    assert done.returncode == 2
    assert "--spec" in done.stderr and "hiden_size" in done.stderr
