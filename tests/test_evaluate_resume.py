"""``evaluate generate`` resumes: a run killed mid-way continues from its shards to the same bytes.

The real command on a toy checkpoint with the hf backend, killed by SIGKILL as a preemption or
a time limit ends a job, then run again as Snakemake's retry runs it. A shard is two prompts of
one repeat here (``--shard-prompts 2``), so the run has ten.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import load_config
from tests.dag import TINY_SPEC
from workflow_scripts.cli import main
from workflow_scripts.evaluate.generation import Completion, Sampling
from workflow_scripts.evaluate.shards import (
    DamagedShard,
    Shard,
    assemble,
    key_digest,
    open_work,
    parts_folder,
    plan_shards,
    read_shard,
    shard_key,
    sort_written,
    write_shard,
)
from workflow_scripts.modeling.tokenizer import train_tokenizer
from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, save_toy_base

BENCHMARKS = ("gsm8k", "mmlu_pro", "humaneval")
SAMPLING = {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 24, "repeats": 2, "base_seed": 42}
SHARDS = 10  # 9 prompts in blocks of 2 (5 blocks) x 2 repeats
WROTE = "generate: wrote shard "


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    """A toy checkpoint, a suite of nine items, and the uninterrupted run's generations."""
    root = tmp_path_factory.mktemp("resume")
    tokenizer = train_tokenizer(["What is 2 + 3? The answer is \\boxed{5}.", "def f(x): return x"] * 8, 300)
    spec = ToyModelSpec(**{**TINY_SPEC, "max_position_embeddings": 1024})
    save_toy_base(build_toy_model("qwen3_moe", spec, tokenizer, seed=0), tokenizer, root / "base")
    specs = load_config(toy=True)["benchmarks"]
    for name in BENCHMARKS:
        raw, items = root / f"{name}.raw.parquet", root / f"{name}.items.parquet"
        assert main([
            "evaluate", "toy-benchmark", "--benchmark", name, "--rows", "3", "--seed", "1234",
            "--out", str(raw),
        ]) == 0  # fmt: skip
        assert main([
            "evaluate", "items", "--benchmark", name, "--raw", str(raw), "--spec", json.dumps(specs[name]),
            "--shuffle-seed", "42", "--out", str(items),
        ]) == 0  # fmt: skip
    items = [str(root / f"{name}.items.parquet") for name in BENCHMARKS]
    assert main(["evaluate", "suite", "--items", *items, "--out", str(root / "suite.parquet")]) == 0
    assert main(_argv(root, root / "uninterrupted.parquet")) == 0
    assert not parts_folder(root / "uninterrupted.parquet").exists(), (
        "the shards go once the output is written"
    )
    return root


def _argv(root: Path, out: Path, sampling: dict | None = None) -> list[str]:
    return [
        "evaluate", "generate", "--checkpoint", str(root / "base"), "--items", str(root / "suite.parquet"),
        "--sampling", json.dumps(sampling or SAMPLING), "--backend", "hf", "--batch-size", "2",
        "--shard-prompts", "2", "--out", str(out),
    ]  # fmt: skip


def _killed(root: Path, out: Path, sampling: dict | None = None, after: int = 1) -> list[Path]:
    """Run the command in its own process and SIGKILL it as soon as it reports its ``after``-th shard."""
    command = [sys.executable, "-m", "workflow_scripts", *_argv(root, out, sampling)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, cwd=root, env=env, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in process.stderr:
        seen.append(line)
        if len(_generated("".join(seen))) == after:
            process.send_signal(signal.SIGKILL)
            break
    process.stderr.close()
    assert process.wait(timeout=120) == -signal.SIGKILL, "".join(seen)
    assert not out.exists()
    (work,) = parts_folder(out).iterdir()
    written = sorted(work.glob("r*-b*.json"))
    assert after <= len(written) < SHARDS, f"killed after shard {after}, not after {len(written)}"
    assert list(work.glob(".run-*")), "a killed run leaves its run folder (claims) behind"
    return written


def _generated(err: str) -> list[str]:
    return [line.removeprefix(WROTE).split()[0] for line in err.splitlines() if line.startswith(WROTE)]


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_uninterrupted_bytes(toy, tmp_path, capsys):
    out = tmp_path / "generations.parquet"
    written = _killed(toy, out, after=2)
    # The second shard damaged, the first kept: the rerun starts inside a repeat, where a block
    # must sample as it did after the blocks before it. One response's text changed, the JSON
    # still valid: only the shard's digest tells.
    damaged = written[1]
    content = json.loads(damaged.read_text())
    content["completions"][0]["text"] += "!"
    damaged.write_text(json.dumps(content))
    capsys.readouterr()
    assert main(_argv(toy, out)) == 0
    err = capsys.readouterr().err
    assert out.read_bytes() == (toy / "uninterrupted.parquet").read_bytes()
    kept = {path.name for path in written if path != damaged}
    assert f"{damaged} is damaged (its content differs from its own sha256)" in err
    assert f"{len(kept)} of {SHARDS} shards (up to 2 prompts each) already in" in err
    every = {shard.name for shard in plan_shards(9, 2, 2)}
    assert sorted(_generated(err)) == sorted(every - kept), "the rerun generates exactly the missing shards"
    assert f"{SHARDS - len(kept)} of {SHARDS} shards generated" in err
    assert not parts_folder(out).exists()


@pytest.mark.slow
def test_a_changed_sampling_reuses_no_shard(toy, tmp_path, capsys):
    out = tmp_path / "generations.parquet"
    _killed(toy, out)
    capsys.readouterr()
    assert main(_argv(toy, out, {**SAMPLING, "top_p": 0.9})) == 0
    err = capsys.readouterr().err
    assert f"0 of {SHARDS} shards" in err and "removed 1 work folder(s) of other inputs or settings" in err
    assert len(_generated(err)) == SHARDS
    assert out.read_bytes() != (toy / "uninterrupted.parquet").read_bytes()


# ----------------------------------------------------------------------------- the shard files

SAMPLE = Sampling(temperature=0.6, top_p=0.95, max_new_tokens=8, seeds=(42, 43))
ITEMS = [("gsm8k", "gsm8k/0"), ("gsm8k", "gsm8k/1"), ("mbpp", "mbpp/0")]
PROMPTS = ["<|user|>a", "<|user|>b", "<|user|>c"]
BACKEND = {"name": "hf", "batch_size": 2, "packages": {"torch": "2"}}


def _key(**change) -> dict:
    fields = {"checkpoint_sha256": "0" * 64, "items": ITEMS, "prompts": PROMPTS, "sampling": SAMPLE}
    fields |= {"size": 2, "backend": BACKEND, **change}
    return shard_key(**fields)


def _completions(shard: Shard) -> list[Completion]:
    return [Completion(f"r{shard.repeat}p{p}", 1, "stop") for p in range(shard.start, shard.stop)]


def test_shards_cover_every_prompt_of_every_repeat_once():
    shards = plan_shards(5, 2, 2)
    assert [(s.repeat, s.start, s.stop) for s in shards] == [
        (r, a, b) for r in (0, 1) for a, b in ((0, 2), (2, 4), (4, 5))
    ]
    assert len({s.name for s in shards}) == len(shards)
    assert plan_shards(0, 2, 2) == []
    with pytest.raises(ValueError, match="at least one prompt"):
        plan_shards(5, 2, 0)


@pytest.mark.parametrize(
    "change",
    [
        {"checkpoint_sha256": "1" * 64},
        {"prompts": [*PROMPTS[:2], "<|user|>d"]},
        {"items": [*ITEMS[:2], ("mbpp", "mbpp/9")]},
        {"sampling": replace(SAMPLE, top_p=0.9)},
        {"sampling": replace(SAMPLE, seeds=(42, 44))},
        {"size": 3},
        {"backend": {**BACKEND, "batch_size": 3}},
        {"backend": {**BACKEND, "packages": {"torch": "3"}}},
    ],
)
def test_everything_that_shapes_a_shard_changes_its_key(change):
    assert key_digest(_key(**change)) != key_digest(_key())


def test_a_shard_is_trusted_only_with_its_own_digest_key_and_slot(tmp_path):
    key = _key()
    work, _ = open_work(tmp_path / "g.parquet", key)
    digest = key_digest(key)
    shards = plan_shards(3, 2, 2)
    for shard in shards:
        write_shard(work, digest, shard, _completions(shard))
    assert assemble(work, digest, shards, 2) == [_completions(shards[0]) + _completions(shards[1])] + [
        _completions(shards[2]) + _completions(shards[3])
    ]
    assert read_shard(work, digest, shards[0]) == _completions(shards[0])
    with pytest.raises(DamagedShard, match="another key or shard"):
        read_shard(work, "f" * 64, shards[0])
    (work / shards[2].name).write_bytes((work / shards[0].name).read_bytes())  # repeat 0's in repeat 1's slot
    text = (work / shards[1].name).read_text()
    (work / shards[1].name).write_text(text[: len(text) // 2])  # cut short, as no atomic write leaves it
    (work / shards[3].name).unlink()
    missing, damaged = sort_written(work, digest, shards)
    assert missing == shards[1:]
    assert {s.name: reason.split(" (")[0] for s, reason in damaged.items()} == {
        shards[1].name: "unreadable",
        shards[2].name: "it belongs to another key or shard",
    }
    assert not (work / shards[1].name).exists(), "a damaged shard is removed, never read again"
    with pytest.raises(DamagedShard, match=shards[1].name):
        assemble(work, digest, shards, 2)


def test_opening_a_key_discards_other_keys_and_a_killed_runs_leftovers(tmp_path):
    out = tmp_path / "g.parquet"
    old, _ = open_work(out, _key(size=3))
    (old / "r0-b00000.json").write_text("{}")
    work, removed = open_work(out, _key())
    assert removed == 1 and not old.exists()
    (work / ".r0-b00000.json.abc.tmp").write_text("half")  # an atomic write cut off by a kill
    (work / ".run-xyz" / "claims").mkdir(parents=True)
    (work / "r0-b00000.json").write_text("{}")
    assert open_work(out, _key()) == (work, 0)
    assert sorted(p.name for p in work.iterdir()) == ["key.json", "r0-b00000.json"]
    (work / "key.json").write_text("{")  # a damaged key file: nothing in its folder is trusted
    open_work(out, _key())
    assert sorted(p.name for p in work.iterdir()) == ["key.json"]
