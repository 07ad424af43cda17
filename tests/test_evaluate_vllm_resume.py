"""``evaluate generate --backend vllm`` resumes: its engines killed mid-run, the rerun writes the same bytes.

Runs in the evaluation environment (``bash tests/run_vllm_cpu.sh``) on vllm-cpu. The command's
process group is killed (SIGKILL) after the first shard, as SLURM ends a preempted or timed-out
job, and the rerun takes another number of engines: vLLM seeds every request, so which engine
sampled a shard does not matter. vllm-cpu cannot rewind a request's generator when a step splits
a prompt's prefill ("CPU Generator does not use offset"), so each shard's prompts fit in one step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the evaluation environment: bash tests/run_vllm_cpu.sh")

from tests.conftest import load_config  # noqa: E402
from tests.dag import TINY_SPEC  # noqa: E402
from workflow_scripts.cli import main  # noqa: E402
from workflow_scripts.evaluate.shards import parts_folder  # noqa: E402

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]
WRITER = os.environ.get("RPB_WRITER_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
# Head size 32, as vllm-cpu's attention needs (tests/test_evaluate_vllm.py).
SPEC = {**TINY_SPEC, "hidden_size": 64, "num_heads": 2, "max_position_embeddings": 1024}
ENGINE = {"dtype": "float32", "max_model_len": 1024, "enforce_eager": True, "kv_cache_memory_bytes": 1 << 28}
SAMPLING = {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 16, "repeats": 2, "base_seed": 42}
BENCHMARKS = ("gsm8k", "mmlu_pro", "humaneval")
SHARDS = 6  # 6 prompts in blocks of 2 x 2 repeats
WROTE = "generate: wrote shard "
WRITE_BASE = """
import sys
from tests.dag import TINY_SPEC
from workflow_scripts.modeling.tokenizer import train_tokenizer
from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, save_toy_base
tokenizer = train_tokenizer(["What is 2 + 3? The answer is \\\\boxed{5}.", "def f(x): return x"] * 8, 300)
spec = ToyModelSpec(**{**TINY_SPEC, **%s})
save_toy_base(build_toy_model("qwen3_moe", spec, tokenizer, seed=0), tokenizer, sys.argv[1])
"""


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    """A toy base written by the training environment, six items, and an uninterrupted two-engine run."""
    root = tmp_path_factory.mktemp("vllm_resume")
    script = WRITE_BASE % json.dumps(SPEC)  # a JSON object of numbers is a Python dict literal
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([WRITER, "-c", script, str(root / "base")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    config = load_config(toy=False)
    for name in BENCHMARKS:
        raw, items = root / f"{name}.raw.parquet", root / f"{name}.items.parquet"
        assert main(["evaluate", "fixture", "--benchmark", name, "--out", str(raw)]) == 0
        assert main([
            "evaluate", "items", "--benchmark", name, "--raw", str(raw),
            "--spec", json.dumps(config["benchmarks"][name]), "--shuffle-seed", "42", "--limit", "2",
            "--out", str(items),
        ]) == 0  # fmt: skip
    items = [str(root / f"{name}.items.parquet") for name in BENCHMARKS]
    assert main(["evaluate", "suite", "--items", *items, "--out", str(root / "suite.parquet")]) == 0
    assert main(_argv(root, root / "uninterrupted.parquet", engines=2)) == 0
    return root


def _argv(root: Path, out: Path, engines: int) -> list[str]:
    return [
        "evaluate", "generate", "--checkpoint", str(root / "base"), "--items", str(root / "suite.parquet"),
        "--sampling", json.dumps(SAMPLING), "--backend", "vllm", "--data-parallel", str(engines),
        "--engine", json.dumps(ENGINE), "--shard-prompts", "2", "--out", str(out),
    ]  # fmt: skip


def test_killed_engines_resume_to_the_uninterrupted_bytes(toy, tmp_path, capfd):
    out = tmp_path / "generations.parquet"
    command = [sys.executable, "-m", "workflow_scripts", *_argv(toy, out, engines=2)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for line in process.stderr:
        if line.startswith(WROTE):
            os.killpg(process.pid, signal.SIGKILL)  # the command and its engines, as SLURM ends a job
            break
    process.stderr.close()
    assert process.wait(timeout=60) == -signal.SIGKILL
    (work,) = parts_folder(out).iterdir()
    kept = {path.name for path in work.glob("r*-b*.json")}
    assert 1 <= len(kept) < SHARDS and not out.exists()
    capfd.readouterr()
    assert main(_argv(toy, out, engines=1)) == 0
    err = capfd.readouterr().err
    assert out.read_bytes() == (toy / "uninterrupted.parquet").read_bytes()
    generated = [line.removeprefix(WROTE).split()[0] for line in err.splitlines() if line.startswith(WROTE)]
    assert len(generated) == SHARDS - len(kept) and not kept & set(generated)
    assert not parts_folder(out).exists()
