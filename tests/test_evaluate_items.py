"""Benchmark items: every source schema normalised, gold answers, the seeded option shuffle, bad input."""

from __future__ import annotations

import base64
import json
import os
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workflow_scripts.errors import UserInputError
from workflow_scripts.evaluate.fixtures import available_fixtures, read_fixture
from workflow_scripts.evaluate.items import (
    ITEM_COLUMNS,
    MMLU_STEM_SUBJECTS,
    OPTION_LETTERS,
    SCHEMAS,
    gsm8k_gold,
    normalise,
)

ROOT = Path(__file__).resolve().parents[1]
SEED = 42
OWN_FIXTURES = (
    "gsm8k",
    "math500",
    "humaneval",
    "mbpp",
    "mmlu",
    "mmlu_stem",
    "mmlu_pro",
    "gpqa",
    "gpqa_diamond",
)
MULTIPLE_CHOICE = ("mmlu", "mmlu_stem", "mmlu_pro", "gpqa", "gpqa_diamond")
LIVEBENCH = ("livebench_math", "livebench_reasoning", "livebench_coding")

# Gold answers worked out by hand from each fixture row (MC: the text of the correct option).
EXPECTED_GOLD = {
    "gsm8k": ["15", "17000", "11", "-5", "1234567"],
    "math500": ["14", "\\frac{11}{12}", "6", "9", "15", "(2,3)"],
    "mmlu": ["4", "Nile", "19.6 m/s", "Immanuel Kant", "3", "Vitamin D"],
    "mmlu_stem": ["12", "Mitochondrion", "shrink the weights toward zero", "AES", "O(log n)"],
    "mmlu_pro": ["8", "6 N", "a 5% fall in quantity demanded", "2", "45"],
    "gpqa": ["It is divided by 4", "3", "DnaG primase", "About 0.98c"],
    "gpqa_diamond": ["sp3d2", "2.5 eV", "1/2", "4"],
}


@pytest.fixture(scope="module")
def specs() -> dict:
    from tests.conftest import load_config

    return load_config(toy=False)["benchmarks"]


def items_of(benchmark: str, specs: dict, raw: pd.DataFrame | None = None, seed: int = SEED) -> pd.DataFrame:
    return normalise(benchmark, read_fixture(benchmark) if raw is None else raw, specs[benchmark], seed)


def source_options(benchmark: str, row: pd.Series) -> list[str]:
    """The options of a raw row in source order, read independently of the normaliser."""
    if benchmark in ("mmlu", "mmlu_stem"):
        return list(row["choices"])
    if benchmark == "mmlu_pro":
        return list(row["options"])
    columns = ["Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"]
    return [row[column].strip() for column in columns]


def source_correct(benchmark: str, row: pd.Series) -> int:
    if benchmark in ("mmlu", "mmlu_stem"):
        return row["answer"]
    return row["answer_index"] if benchmark == "mmlu_pro" else 0  # GPQA lists the correct answer first


def livebench_raw(benchmark: str) -> pd.DataFrame:
    """Two rows in the LiveBench hub schema of ``benchmark`` (question text, dates, coding tests)."""
    common = {"livebench_release_date": "2024-06-24", "livebench_removal_date": ""}
    if benchmark == "livebench_math":
        rows = [
            {
                "question_id": "a1b2c3",
                "category": "math",
                "ground_truth": "12",
                "turns": ["What is $3 \\cdot 4$? Put your final answer in $\\boxed{}$."],
                "task": "AMPS_Hard",
                "subtask": "product",
                **common,
            },
            {
                "question_id": "d4e5f6",
                "category": "math",
                "ground_truth": "B",
                "turns": ["Which is larger, (A) 2 or (B) 3? Write the letter five times: BBBBB."],
                "task": "math_comp",
                "subtask": "amc12",
                **common,
            },
        ]
    elif benchmark == "livebench_reasoning":
        rows = [
            {
                "question_id": "r1",
                "category": "reasoning",
                "ground_truth": "yes, no, yes",
                "turns": ["Alice tells the truth. Bob says Alice lies. ... Answer in **bold**."],
                "task": "web_of_lies_v2",
                "level": 3,
                **common,
            },
            {
                "question_id": "r2",
                "category": "reasoning",
                "ground_truth": "2",
                "turns": ["How many pieces after one straight cut of a square? Answer in **bold**."],
                "task": "spatial",
                "level": 1,
                **common,
            },
        ]
    else:
        private = base64.b64encode(
            zlib.compress(pickle.dumps(json.dumps([{"input": "3\n", "output": "9\n"}])))
        )
        rows = [
            {
                "question_id": f"c{index}",
                "category": "coding",
                "turns": [f"Write a program printing the square of its input ({index})."],
                "question_title": f"square {index}",
                "public_test_cases": json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}]),
                "private_test_cases": private.decode(),
                "original_json": {
                    "question_title": f"square {index}",
                    "metadata": json.dumps({"func_name": None}),
                },
                "release_date": "2024-06-01",
                "task": "LCB_generation" if index == 0 else "coding_completion",
                "partial_solution": "" if index == 0 else "n = int(input())",
                **common,
            }
            for index in range(2)
        ]
    return pd.DataFrame.from_records(rows)


def parquet_roundtrip(frame: pd.DataFrame, tmp_path) -> pd.DataFrame:
    """The frame as a hub parquet reads back: lists become numpy arrays, structs dicts."""
    path = tmp_path / "raw.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    return pq.read_table(path).to_pandas()


def test_every_registry_benchmark_has_a_schema_and_template(specs: dict) -> None:
    assert set(specs) == set(SCHEMAS)
    for benchmark, spec in specs.items():
        assert SCHEMAS[benchmark].template == spec["template"], benchmark


def test_own_fixtures_are_bundled() -> None:
    assert set(OWN_FIXTURES) <= set(available_fixtures())


@pytest.mark.parametrize("benchmark", OWN_FIXTURES)
def test_fixture_normalises_to_the_item_schema(benchmark: str, specs: dict) -> None:
    items = items_of(benchmark, specs)
    assert tuple(items.columns) == ITEM_COLUMNS
    assert len(items) >= 4 and items["item_id"].is_unique
    for column in ("item_id", "benchmark", "template", "grader", "prompt", "answer", "metadata"):
        assert all(isinstance(value, str) for value in items[column]), column
    assert (items["benchmark"] == benchmark).all()
    assert (items["template"] == specs[benchmark]["template"]).all()
    assert all(isinstance(json.loads(value), dict) for value in items["metadata"])
    is_mc = benchmark in MULTIPLE_CHOICE
    for choices, answer in zip(items["choices"], items["answer"], strict=True):
        assert isinstance(choices, list) and all(isinstance(choice, str) for choice in choices)
        assert bool(choices) == is_mc
        assert (answer in OPTION_LETTERS[: len(choices)]) if is_mc else not choices


@pytest.mark.parametrize("benchmark", ["gsm8k", "math500"])
def test_math_gold_answers(benchmark: str, specs: dict) -> None:
    items = items_of(benchmark, specs)
    assert items["answer"].tolist() == EXPECTED_GOLD[benchmark]
    assert (items["grader"] == "math").all()
    assert items["item_id"].tolist() == [f"{benchmark}/{row}" for row in range(len(items))]


@pytest.mark.parametrize("benchmark", MULTIPLE_CHOICE)
def test_multiple_choice_letter_names_the_correct_option(benchmark: str, specs: dict) -> None:
    items = items_of(benchmark, specs)
    picked = [
        choices[OPTION_LETTERS.index(answer)]
        for choices, answer in zip(items["choices"], items["answer"], strict=True)
    ]
    assert picked == EXPECTED_GOLD[benchmark]


@pytest.mark.parametrize("benchmark", MULTIPLE_CHOICE)
def test_stored_permutation_maps_back_to_the_source(benchmark: str, specs: dict) -> None:
    raw = read_fixture(benchmark)
    items = items_of(benchmark, specs)
    for item in items.itertuples():
        row = raw.iloc[int(item.item_id.rsplit("/", 1)[1])]
        options, correct = source_options(benchmark, row), source_correct(benchmark, row)
        metadata = json.loads(item.metadata)
        permutation = metadata["permutation"]
        assert sorted(permutation) == list(range(len(options)))
        assert item.choices == [options[index] for index in permutation]
        assert metadata["source_answer"] == correct
        assert permutation[OPTION_LETTERS.index(item.answer)] == correct


@pytest.mark.parametrize("benchmark", MULTIPLE_CHOICE)
def test_shuffle_is_deterministic_and_varies_across_items(benchmark: str, specs: dict) -> None:
    first, second = items_of(benchmark, specs), items_of(benchmark, specs)
    pd.testing.assert_frame_equal(first, second)
    permutations = [tuple(json.loads(value)["permutation"]) for value in first["metadata"]]
    assert len(set(permutations)) > 1


def test_shuffle_depends_on_seed_and_benchmark_id(specs: dict) -> None:
    def permutations(benchmark: str, seed: int) -> list:
        items = normalise(benchmark, read_fixture("mmlu_pro"), specs["mmlu_pro"], seed)
        return [json.loads(value)["permutation"] for value in items["metadata"]]

    reference = permutations("mmlu_pro", SEED)
    assert permutations("mmlu_pro", SEED + 1) != reference
    gpqa = read_fixture("gpqa")
    main = normalise("gpqa", gpqa, specs["gpqa"], SEED)["metadata"].tolist()
    diamond = normalise("gpqa_diamond", gpqa, specs["gpqa_diamond"], SEED)["metadata"].tolist()
    assert [json.loads(m)["permutation"] for m in main] != [json.loads(m)["permutation"] for m in diamond]


@pytest.mark.slow
def test_shuffle_is_the_same_in_a_fresh_process_with_another_hash_seed(specs: dict) -> None:
    code = (
        "import json, yaml; from workflow_scripts.evaluate.fixtures import read_fixture; "
        "from workflow_scripts.evaluate.items import normalise; "
        "spec = yaml.safe_load(open('config.yaml'))['benchmarks']['mmlu_pro']; "
        "print(json.dumps(normalise('mmlu_pro', read_fixture('mmlu_pro'), spec, 42)['metadata'].tolist()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == items_of("mmlu_pro", specs)["metadata"].tolist()


def test_pinned_permutation_does_not_drift(specs: dict) -> None:
    """Every condition must see this permutation; a change here silently changes the benchmark."""
    metadata = json.loads(items_of("gpqa", specs)["metadata"].iloc[0])
    assert metadata["permutation"] == [2, 0, 1, 3]


def test_mmlu_stem_keeps_only_the_19_stem_subjects(specs: dict) -> None:
    assert len(MMLU_STEM_SUBJECTS) == 19
    raw = read_fixture("mmlu_stem")
    stem = items_of("mmlu_stem", specs)
    assert stem["item_id"].tolist() == [
        "mmlu_stem/0",
        "mmlu_stem/2",
        "mmlu_stem/3",
        "mmlu_stem/5",
        "mmlu_stem/6",
    ]
    assert {json.loads(value)["subject"] for value in stem["metadata"]} <= MMLU_STEM_SUBJECTS
    assert not set(raw["subject"]) <= MMLU_STEM_SUBJECTS  # the fixture has non-STEM rows to drop
    assert len(normalise("mmlu", raw, specs["mmlu"], SEED)) == len(raw)


def test_code_items_carry_what_grading_needs(specs: dict) -> None:
    humaneval = items_of("humaneval", specs)
    assert humaneval["item_id"].tolist() == [f"HumanEval/{index}" for index in range(4)]
    raw = read_fixture("humaneval")
    for item, row in zip(humaneval.itertuples(), raw.itertuples(), strict=True):
        metadata = json.loads(item.metadata)
        assert item.answer == "" and item.grader == "humaneval" and item.prompt == row.prompt
        assert (metadata["test"], metadata["entry_point"], metadata["prompt"]) == (
            row.test,
            row.entry_point,
            row.prompt,
        )
    mbpp = items_of("mbpp", specs)
    raw = read_fixture("mbpp")
    for item, row in zip(mbpp.itertuples(), raw.itertuples(), strict=True):
        metadata = json.loads(item.metadata)
        assert item.grader == "mbpp" and item.prompt == row.text
        assert metadata["test_list"] == row.test_list and metadata["test_setup_code"] == row.test_setup_code
        assert metadata["challenge_test_list"] == row.challenge_test_list


@pytest.mark.parametrize("benchmark", LIVEBENCH)
def test_livebench_rows_from_parquet(benchmark: str, specs: dict, tmp_path) -> None:
    frame = livebench_raw(benchmark)
    frame["livebench_release_date"] = pd.to_datetime(frame["livebench_release_date"])
    raw = parquet_roundtrip(frame, tmp_path)
    assert isinstance(raw["turns"].iloc[0], np.ndarray)
    items = items_of(benchmark, specs, raw)
    assert items["item_id"].tolist() == frame["question_id"].tolist()
    assert items["prompt"].tolist() == [turns[0] for turns in frame["turns"]]
    assert (items["grader"] == "livebench").all() and all(len(c) == 0 for c in items["choices"])
    expected_answers = frame["ground_truth"].tolist() if "ground_truth" in frame else ["", ""]
    assert items["answer"].tolist() == expected_answers
    metadata = json.loads(items["metadata"].iloc[-1])
    assert not {"question_id", "turns", "ground_truth"} & set(metadata)
    assert metadata["task"] == frame["task"].iloc[-1] and metadata["category"] == frame["category"].iloc[-1]
    assert metadata["livebench_release_date"].startswith("2024-06-24")
    if benchmark == "livebench_coding":
        assert metadata["private_test_cases"] == frame["private_test_cases"].iloc[-1]
        assert metadata["public_test_cases"] == frame["public_test_cases"].iloc[-1]
        assert json.loads(metadata["original_json"]["metadata"]) == {"func_name": None}
        assert metadata["partial_solution"] == "n = int(input())"


@pytest.mark.parametrize("benchmark", LIVEBENCH)
def test_bundled_livebench_fixture_normalises(benchmark: str, specs: dict) -> None:
    if benchmark not in available_fixtures():
        pytest.skip(f"{benchmark}.jsonl is not bundled")
    raw = read_fixture(benchmark)
    items = items_of(benchmark, specs, raw)
    assert items["item_id"].tolist() == raw["question_id"].tolist()
    assert items["prompt"].tolist() == [list(turns)[0] for turns in raw["turns"]]


@pytest.mark.parametrize("benchmark", ["mmlu_pro", "mbpp", "gpqa", "math500"])
def test_parquet_read_rows_give_the_same_items(benchmark: str, specs: dict, tmp_path) -> None:
    raw = read_fixture(benchmark)
    pd.testing.assert_frame_equal(
        items_of(benchmark, specs, parquet_roundtrip(raw, tmp_path)), items_of(benchmark, specs, raw)
    )


def test_gsm8k_gold_parsing() -> None:
    assert gsm8k_gold("3 + 4 = <<3+4=7>>7\n#### 7") == "7"
    assert gsm8k_gold("big\n#### 1,234,567") == "1234567"
    assert gsm8k_gold("#### 2 ####  -3,000 ") == "-3000"
    with pytest.raises(ValueError, match="####"):
        gsm8k_gold("The answer is 7.")


def test_gsm8k_row_without_final_line_names_the_row(specs: dict) -> None:
    raw = read_fixture("gsm8k")
    raw.loc[2, "answer"] = "no final line here"
    with pytest.raises(UserInputError, match=r"gsm8k: row 2: .*####"):
        items_of("gsm8k", specs, raw)


@pytest.mark.parametrize(
    ("benchmark", "column"),
    [
        ("gsm8k", "answer"),
        ("humaneval", "entry_point"),
        ("mmlu_pro", "answer_index"),
        ("gpqa", "Incorrect Answer 3"),
    ],
)
def test_missing_column_is_named(benchmark: str, column: str, specs: dict) -> None:
    raw = read_fixture(benchmark).drop(columns=[column])
    with pytest.raises(UserInputError, match=rf"{benchmark}: .*'{column}'"):
        items_of(benchmark, specs, raw)


def test_missing_livebench_coding_tests_are_named(specs: dict) -> None:
    raw = livebench_raw("livebench_coding").drop(columns=["private_test_cases"])
    with pytest.raises(UserInputError, match="livebench_coding: .*'private_test_cases'"):
        items_of("livebench_coding", specs, raw)


@pytest.mark.parametrize(
    ("benchmark", "column", "value"),
    [
        ("mmlu", "answer", "1"),
        ("mbpp", "test_list", "assert f(1) == 1"),
        ("math500", "answer", 14),
        ("mmlu_pro", "options", ["A", 3]),
        ("humaneval", "test", None),
    ],
)
def test_mistyped_column_is_named(benchmark: str, column: str, value, specs: dict) -> None:
    raw = read_fixture(benchmark)
    raw[column] = raw[column].astype(object)
    raw.at[1, column] = value
    with pytest.raises(UserInputError, match=rf"{benchmark}: column '{column}' row 1 must be"):
        items_of(benchmark, specs, raw)


def test_inconsistent_mmlu_pro_answer_is_rejected(specs: dict) -> None:
    raw = read_fixture("mmlu_pro")
    raw.loc[0, "answer"] = "C"
    with pytest.raises(UserInputError, match="mmlu_pro: row 0: answer 'C' disagrees with answer_index 1"):
        items_of("mmlu_pro", specs, raw)


def test_out_of_range_answer_is_rejected(specs: dict) -> None:
    raw = read_fixture("mmlu")
    raw.loc[3, "answer"] = 4
    with pytest.raises(UserInputError, match="mmlu: row 3: answer index 4 is outside the 4 options"):
        items_of("mmlu", specs, raw)


def test_duplicate_source_ids_are_rejected(specs: dict) -> None:
    raw = read_fixture("humaneval")
    raw.loc[1, "task_id"] = raw.loc[0, "task_id"]
    with pytest.raises(UserInputError, match="duplicate item ids"):
        items_of("humaneval", specs, raw)


def test_registry_template_must_match_the_source_schema(specs: dict) -> None:
    with pytest.raises(UserInputError, match="gsm8k: registry template 'code'"):
        normalise("gsm8k", read_fixture("gsm8k"), {**specs["gsm8k"], "template": "code"}, SEED)


def test_unknown_benchmark_and_bad_seed_are_rejected(specs: dict) -> None:
    with pytest.raises(UserInputError, match="unknown benchmark 'arc'"):
        normalise("arc", read_fixture("mmlu"), specs["mmlu"], SEED)
    with pytest.raises(UserInputError, match="shuffle seed"):
        normalise("mmlu", read_fixture("mmlu"), specs["mmlu"], -1)


def test_unknown_fixture_is_a_user_error() -> None:
    with pytest.raises(UserInputError, match="no bundled fixture for benchmark 'arc'"):
        read_fixture("arc")


def test_fixture_command_writes_the_bundled_rows(tmp_path) -> None:
    from workflow_scripts.cli import main

    out = tmp_path / "raw.parquet"
    assert main(["evaluate", "fixture", "--benchmark", "humaneval", "--out", str(out)]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), read_fixture("humaneval"))
