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

from workflow_scripts.modeling.toy import load_local  # noqa: E402
from workflow_scripts.routing.hf import find_gates  # noqa: E402

pytestmark = pytest.mark.slow  # trainings in their own interpreters, killed and resumed

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
    "expert_bias_update_rate": 1.0e-3,
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


def finish(inputs: dict[str, Path], out: Path, arguments: list[str] | None = None) -> str:
    done = subprocess.run(arguments or command(inputs, out), cwd=ROOT, env=environment(), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def kill_after_checkpoint(inputs: dict[str, Path], out: Path, arguments: list[str] | None = None) -> None:
    """Start a run (``arguments``, default ``command``); SIGKILL it once a checkpoint of step >= 4 exists."""
    resume = Path(f"{out}.resume")
    arguments = arguments or command(inputs, out)
    process = subprocess.Popen(arguments, cwd=ROOT, env=environment(), stderr=subprocess.DEVNULL)
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


def test_a_resume_checkpoint_with_flipped_bytes_is_not_resumed_from(training_inputs, tmp_path):
    """64 bytes flipped in the newest checkpoint once resumed to other weights, exit 0; now the run
    names the file, resumes from the intact one before it and ends identical to an uninterrupted run."""
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    kill_after_checkpoint(training_inputs, resumed)
    resume = Path(f"{resumed}.resume")
    listed = sorted(p.with_suffix("") for p in resume.glob("step_*.pt.sha256"))  # checkpoints with a digest
    assert len(listed) >= 2, listed  # the newest two are kept (a third until the newest's digest is written)
    damaged, previous = listed[-1], listed[-2]
    data = bytearray(damaged.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    damaged.write_bytes(bytes(data))
    stderr = finish(training_inputs, resumed)
    assert f"not resuming from {damaged}: 1 file(s) differ from their recorded sha256" in stderr
    assert f"resuming after step {int(previous.stem.split('_')[1])} from {previous}" in stderr
    finish(training_inputs, straight)
    a, b = load_local(resumed)[0].state_dict(), load_local(straight)[0].state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    assert log_without_times(resumed) == log_without_times(straight)
    assert not resume.exists()


def sft_command(inputs: dict[str, Path], split: Path, out: Path) -> list[str]:
    """``command`` for the prior-free condition 'none' on ``split``, so the split may change alone."""
    arguments = command({**inputs, "split": split}, out)
    arguments[arguments.index("--condition") + 1] = json.dumps({"intervention": "none"})
    for flag in ("--prior", "--prior-meta"):
        del arguments[arguments.index(flag) : arguments.index(flag) + 2]
    return arguments


def test_changed_split_starts_fresh_instead_of_resuming(training_inputs, tmp_path):
    """Rows rewritten in place after a kill (a changed train_rows) must not resume the old weights."""
    split, out = tmp_path / "train.parquet", tmp_path / "out"
    rows = pd.read_parquet(training_inputs["split"])
    rows.to_parquet(split)
    kill_after_checkpoint(training_inputs, out, sft_command(training_inputs, split, out))
    rows.iloc[::-1].reset_index(drop=True).to_parquet(split)  # same path, same count, other order
    stderr = finish(training_inputs, out, sft_command(training_inputs, split, out))
    assert "resuming after step" not in stderr
    assert "starting fresh" in stderr and "different split" in stderr
    assert not Path(f"{out}.resume").exists()
    assert [r["step"] for r in log_without_times(out)] == list(range(1, STEPS + 1))


def test_run_key_follows_contents_not_paths(tmp_path):
    from workflow_scripts.modeling.run_key import run_key

    first, moved = tmp_path / "a.bin", tmp_path / "b.bin"
    first.write_bytes(b"rows")
    moved.write_bytes(b"rows")
    key = run_key({"seed": 1}, {"split": first, "prior": None})
    assert key == run_key({"seed": 1}, {"split": moved, "prior": None})
    first.write_bytes(b"other rows")
    assert key != run_key({"seed": 1}, {"split": first, "prior": None})


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


def short_run(inputs: dict[str, Path], out: Path, prior: Path, meta: Path, kind: str, *extra: str):
    """``train run`` for 3 steps (one epoch) with ``prior``/``meta`` and a condition of prior ``kind``."""
    arguments = command(inputs, out)
    condition = {"intervention": "rpb", "params": {"beta": 1.0}, "prior": kind}
    training = {**TRAINING, "epochs": 1, "checkpoint_every_steps": 100}
    for flag, value in (("--condition", condition), ("--training", training)):
        arguments[arguments.index(flag) + 1] = json.dumps(value)
    for flag, value in (("--prior", prior), ("--prior-meta", meta)):
        arguments[arguments.index(flag) + 1] = str(value)
    arguments += list(extra)
    return subprocess.run(arguments, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=120)


def test_prior_modified_after_its_meta_is_refused(training_inputs, tmp_path):
    import numpy as np

    prior = tmp_path / "prior.npy"
    values = np.load(training_inputs["prior"])
    values[0, 1, 0] = values[0, 1, 0, ::-1].copy()
    np.save(prior, values)  # the same shape and row sums; only the bytes differ from the meta's record
    done = short_run(training_inputs, tmp_path / "out", prior, training_inputs["meta"], "base")
    assert done.returncode == 2
    assert f"prior file {prior} has sha256" in done.stderr and "modified or replaced" in done.stderr
    assert not (tmp_path / "out").exists()


def test_shuffled_prior_is_checked_against_its_shuffle_record(training_inputs, tmp_path):
    from workflow_scripts.cli import main

    labels = [[0, 0, 0, 0, 1, 1, 1, 1]] * 2  # (L, E) of the training inputs' base
    (tmp_path / "partition.json").write_text(json.dumps({"labels": labels}))
    within, record = tmp_path / "shuffled-within.npy", tmp_path / "prior_validation.json"
    shuffle = ["priors", "shuffle", "--prior", str(training_inputs["prior"]), "--partition"]
    shuffle += [str(tmp_path / "partition.json"), "--top-k", "2", "--seed", "0", "--validation-seeds", "0"]
    shuffle += ["--rhos", "0.2", "--within", str(within), "--global", str(tmp_path / "shuffled-global.npy")]
    assert main([*shuffle, "--validation", str(tmp_path / "elsewhere.json")]) == 0
    meta = training_inputs["meta"]

    done = short_run(training_inputs, tmp_path / "a", within, meta, "shuffled_within")  # no record beside it
    assert done.returncode == 2 and "no shuffle record" in done.stderr
    done = short_run(training_inputs, tmp_path / "b", within, meta, "shuffled_global",
                     "--shuffle-record", str(tmp_path / "elsewhere.json"))  # fmt: skip
    assert done.returncode == 2 and "the shuffle record names" in done.stderr
    (tmp_path / "elsewhere.json").rename(record)  # where the shuffle rule writes it: found by default
    done = short_run(training_inputs, tmp_path / "c", within, meta, "shuffled_within")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c").is_dir()


def test_a_sequence_length_that_keeps_no_answer_is_refused_naming_the_key(training_inputs, tmp_path):
    """Four tokens hold no answer of any row: training would run every step on zero answer tokens."""
    out = tmp_path / "out"
    arguments = sft_command(training_inputs, training_inputs["split"], out)
    arguments[arguments.index("--training") + 1] = json.dumps({**TRAINING, "sequence_length": 4})
    done = subprocess.run(arguments, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    refusal = "config key training.sequence_length: 4 tokens keep no answer token of any of the 24 rows"
    assert refusal in done.stderr
    assert not out.exists() and not Path(f"{out}.log.jsonl").exists()
