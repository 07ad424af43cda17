"""The evaluate commands chained as the toy rules chain them: toy-benchmark, items, suite, generate, score."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import load_config
from tests.dag import TINY_SPEC
from workflow_scripts.cli import main
from workflow_scripts.modeling.tokenizer import train_tokenizer
from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, save_toy_base

BENCHMARKS = ("gsm8k", "mmlu_pro", "humaneval")
SAMPLING = {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 8, "repeats": 2, "base_seed": 42}
LIMITS = {"timeout_s": 5, "memory_mb": 1024, "file_size_mb": 16, "open_files": 64, "processes": 16,
          "output_bytes": 65536, "allow_unisolated": False}  # fmt: skip
IDENTITY = {"model": "moonlight", "corpus": "math20k", "condition": "rpb", "seed": 42}


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("eval")
    tokenizer = train_tokenizer(["What is 2 + 3? The answer is \\boxed{5}.", "def f(x): return x"] * 8, 300)
    spec = ToyModelSpec(**{**TINY_SPEC, "max_position_embeddings": 1024})
    checkpoint = save_toy_base(
        build_toy_model("qwen3_moe", spec, tokenizer, seed=0), tokenizer, root / "base"
    )
    specs = load_config(toy=True)["benchmarks"]
    for name in BENCHMARKS:
        raw, items = root / f"{name}.raw.parquet", root / f"{name}.items.parquet"
        assert main([
            "evaluate", "toy-benchmark", "--benchmark", name, "--rows", "3", "--seed", "1234",
            "--out", str(raw),
        ]) == 0  # fmt: skip
        assert main([
            "evaluate", "items", "--benchmark", name, "--raw", str(raw), "--spec", json.dumps(specs[name]),
            "--shuffle-seed", "42", "--limit", "2", "--out", str(items),
            "--provenance", str(root / f"{name}.record.json"),
        ]) == 0  # fmt: skip
    items = [str(root / f"{name}.items.parquet") for name in BENCHMARKS]
    suite = str(root / "suite.parquet")
    assert main([
        "evaluate", "suite", "--items", *items, "--out", suite,
        "--provenance", str(root / "suite.record.json"),
    ]) == 0  # fmt: skip
    assert _generate(checkpoint, [suite], root / "generations.parquet", root / "generate.record.json") == 0
    assert main([
        "evaluate", "score", "--items", suite, "--generations", str(root / "generations.parquet"),
        "--repeats", "2", "--limits", json.dumps(LIMITS), "--workers", "2", "--math-timeout", "10",
        "--identity", json.dumps(IDENTITY), "--scores", str(root / "scores.parquet"),
        "--summary", str(root / "summary.json"), "--provenance", str(root / "score.record.json"),
    ]) == 0  # fmt: skip
    return root


def _generate(checkpoint: Path, items: list[str], out: Path, record: Path) -> int:
    return main([
        "evaluate", "generate", "--checkpoint", str(checkpoint), "--items", *items,
        "--sampling", json.dumps(SAMPLING), "--backend", "hf", "--batch-size", "4",
        "--out", str(out), "--provenance", str(record),
    ])  # fmt: skip


@pytest.mark.slow
def test_the_suite_is_every_items_file_in_order(evaluated):
    suite = pd.read_parquet(evaluated / "suite.parquet")
    items = pd.concat([pd.read_parquet(evaluated / f"{name}.items.parquet") for name in BENCHMARKS])
    pd.testing.assert_frame_equal(suite, items.reset_index(drop=True))
    assert list(dict.fromkeys(suite["benchmark"])) == list(BENCHMARKS)


def test_generations_from_the_suite_equal_those_from_the_items_files(evaluated, tmp_path):
    """The rules hand generate one suite; the per-benchmark files it joins give the same bytes."""
    items = [str(evaluated / f"{name}.items.parquet") for name in BENCHMARKS]
    out = tmp_path / "generations.parquet"
    assert _generate(evaluated / "base", items, out, tmp_path / "record.json") == 0
    assert out.read_bytes() == (evaluated / "generations.parquet").read_bytes()


def test_a_suite_of_items_files_sharing_an_item_is_refused(evaluated, tmp_path, capsys):
    gsm8k = str(evaluated / "gsm8k.items.parquet")
    out = tmp_path / "suite.parquet"
    assert main(["evaluate", "suite", "--items", gsm8k, gsm8k, "--out", str(out)]) == 2
    first = pd.read_parquet(gsm8k).iloc[0]
    assert f"--items: item {first['item_id']!r} of 'gsm8k' appears twice" in capsys.readouterr().err
    assert not out.exists()


def test_every_item_is_generated_once_per_repeat_seed(evaluated):
    generations = pd.read_parquet(evaluated / "generations.parquet")
    items = pd.concat([pd.read_parquet(evaluated / f"{name}.items.parquet") for name in BENCHMARKS])
    assert items.groupby("benchmark").size().eq(2).all(), "--limit keeps the first two items"
    assert len(generations) == 2 * len(items)
    assert sorted(set(zip(generations["repeat"], generations["seed"], strict=True))) == [(0, 42), (1, 43)]
    assert not generations.duplicated(["benchmark", "item_id", "repeat"]).any()


def test_summary_follows_the_result_contract(evaluated):
    summary = json.loads((evaluated / "summary.json").read_text())
    assert {key: summary[key] for key in IDENTITY} == IDENTITY and summary["repeats"] == 2
    scores = pd.read_parquet(evaluated / "scores.parquet")
    assert sorted(summary["benchmarks"]) == sorted(BENCHMARKS)
    for name, entry in summary["benchmarks"].items():
        rows = scores[scores["benchmark"] == name]
        per_repeat = [100 * rows[rows["repeat"] == r]["score"].mean() for r in range(2)]
        assert entry["repeat_scores"] == pytest.approx(per_repeat)
        assert entry["score"] == pytest.approx(sum(per_repeat) / 2)
        assert not math.isnan(entry["repeat_sd"])


def test_records_checksum_every_items_file(evaluated):
    suite = json.loads((evaluated / "suite.record.json").read_text())
    assert {f"items[{i}]" for i in range(len(BENCHMARKS))} == set(suite["inputs"])
    record = json.loads((evaluated / "score.record.json").read_text())
    assert {"items[0]", "generations"} == set(record["inputs"])
    assert record["inputs"]["items[0]"] == suite["outputs"]["out"]
    assert record["arguments"]["identity"] == IDENTITY


def test_items_without_a_column_are_named(evaluated, tmp_path, capsys):
    broken = tmp_path / "broken.parquet"
    pd.read_parquet(evaluated / "gsm8k.items.parquet").drop(columns="answer").to_parquet(broken)
    code = main([
        "evaluate", "score", "--items", str(broken), "--generations", str(evaluated / "generations.parquet"),
        "--repeats", "2", "--limits", json.dumps(LIMITS), "--identity", json.dumps(IDENTITY),
        "--scores", str(tmp_path / "s.parquet"), "--summary", str(tmp_path / "s.json"),
    ])  # fmt: skip
    assert code == 2
    assert f"--items {broken}: missing columns ['answer']" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def _score(evaluated: Path, generations: Path, out: Path, *extra: str) -> int:
    items = [str(evaluated / f"{name}.items.parquet") for name in BENCHMARKS]
    return main([
        "evaluate", "score", "--items", *items, "--generations", str(generations), "--repeats", "2",
        "--limits", json.dumps(LIMITS), "--workers", "1", "--identity", json.dumps(IDENTITY),
        "--scores", str(out / "s.parquet"), "--summary", str(out / "s.json"), *extra,
    ])  # fmt: skip


def test_generations_without_a_response_column_are_named(evaluated, tmp_path, capsys):
    broken = tmp_path / "broken.parquet"
    pd.read_parquet(evaluated / "generations.parquet").drop(columns="response").to_parquet(broken)
    assert _score(evaluated, broken, tmp_path) == 2
    err = capsys.readouterr().err
    assert f"error: --generations {broken}: missing columns ['response']" in err
    assert "Traceback" not in err and not (tmp_path / "s.json").exists()


def test_null_responses_are_counted_and_the_first_named(evaluated, tmp_path, capsys):
    generations = pd.read_parquet(evaluated / "generations.parquet")
    generations.loc[[3, 5], "response"] = None
    broken = tmp_path / "nulls.parquet"
    generations.to_parquet(broken)
    assert _score(evaluated, broken, tmp_path) == 2
    first = generations.iloc[3]
    err = capsys.readouterr().err
    assert (
        f"error: --generations {broken}: column 'response' has 2 null values, first benchmark "
        f"{first['benchmark']!r} item {first['item_id']!r} repeat {first['repeat']}"
    ) in err
    assert "Traceback" not in err and not (tmp_path / "s.json").exists()


def test_max_response_chars_reaches_grading(evaluated, tmp_path, caplog):
    assert _score(evaluated, evaluated / "generations.parquet", tmp_path, "--max-response-chars", "1") == 0
    assert pd.read_parquet(tmp_path / "s.parquet")["score"].eq(0.0).all()
    assert "responses longer than 1 characters scored 0" in caplog.text
