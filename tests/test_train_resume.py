"""A ``train run`` killed by SIGKILL resumes and ends bit-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pd = pytest.importorskip("pandas")

from workflow_scripts.models.toy import load_local  # noqa: E402
from workflow_scripts.routing.hf import find_gates  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAINING = {
    "backend": "hf",
    "epochs": 6,  # 6 x 24 rows / 8 = 18 steps
    "global_batch_size": 8,
    "micro_batch_size": 4,
    "sequence_length": 64,
    "packing": False,
    "loss_on": "answer",
    "precision": "fp32",
    "checkpoint_every_steps": 2,
    "optimizer": {"name": "adam", "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.1, "grad_clip": 1.0},
    "schedule": {"name": "cosine", "lr_max": 1e-3, "lr_min": 1e-4, "warmup_steps": 2},
    "parallelism": {"nodes": 1},
}
STEPS = 18


def command(inputs: dict[str, Path], out: Path) -> list[str]:
    condition = {"intervention": "rpb", "params": {"beta": 1.0}, "prior": "base"}
    return [
        sys.executable, "-m", "workflow_scripts", "train", "run", "--base", str(inputs["base"]), "--split",
        str(inputs["split"]), "--condition", json.dumps(condition), "--training", json.dumps(TRAINING),
        "--seed", "5", "--out", str(out), "--log", f"{out}.log.jsonl", "--prior", str(inputs["prior"]),
        "--prior-meta", str(inputs["meta"]), "--architecture", "deepseek_v3",
    ]  # fmt: skip


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": str(ROOT)}


def finish(inputs: dict[str, Path], out: Path) -> str:
    done = subprocess.run(command(inputs, out), cwd=ROOT, env=environment(), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def kill_after_checkpoint(inputs: dict[str, Path], out: Path) -> None:
    """Start a run and SIGKILL it as soon as a checkpoint of step >= 4 exists."""
    resume = Path(f"{out}.resume")
    process = subprocess.Popen(command(inputs, out), cwd=ROOT, env=environment(), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        steps = [int(p.stem.split("_")[1]) for p in resume.glob("step_*.pt")] if resume.exists() else []
        if steps and max(steps) >= 4:
            break
        assert process.poll() is None, "the run ended before it could be killed"
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not out.exists(), "killed before the end, the run must not have saved its output"


def test_killed_run_resumes_bit_identically(training_inputs, tmp_path):
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    kill_after_checkpoint(training_inputs, resumed)
    assert "resuming after step" in finish(training_inputs, resumed)
    finish(training_inputs, straight)
    model_a, _ = load_local(resumed)
    model_b, tokenizer = load_local(straight)
    a, b = model_a.state_dict(), model_b.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    base, _ = load_local(training_inputs["base"])
    assert not all(torch.equal(a[key], value) for key, value in base.state_dict().items())
    for _, gate in find_gates(model_a):
        assert "forward" not in vars(gate) and gate.forward.__func__ is type(gate).forward
    assert tokenizer.pad_token_id is not None
    for out in (resumed, straight):
        assert not Path(f"{out}.resume").exists()
        records = [json.loads(line) for line in Path(f"{out}.log.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert log_without_times(resumed) == log_without_times(straight)


def log_without_times(out: Path) -> list[dict]:
    lines = Path(f"{out}.log.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in lines]


def test_prior_of_another_split_is_refused(training_inputs, tmp_path):
    other = tmp_path / "other.parquet"
    pd.read_parquet(training_inputs["split"]).iloc[::-1].to_parquet(other)
    arguments = command(training_inputs, tmp_path / "out")
    arguments[arguments.index("--split") + 1] = str(other)
    done = subprocess.run(arguments, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "does not belong to this run: split" in done.stderr
    assert not (tmp_path / "out").exists()
