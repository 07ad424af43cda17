"""Prompt templates of Appendix F.3: each task type's messages, from items normalised off the fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import load_config
from workflow_scripts.errors import UserInputError
from workflow_scripts.evaluate.fixtures import read_fixture
from workflow_scripts.evaluate.items import OPTION_LETTERS, SCHEMAS, normalise
from workflow_scripts.evaluate.templates import TEMPLATES, render
from workflow_scripts.task_formats import TEMPLATE_VERSION

ROOT = Path(__file__).resolve().parents[1]
SPECS = load_config(toy=False)["benchmarks"]


def items(benchmark: str) -> pd.DataFrame:
    return normalise(benchmark, read_fixture(benchmark), SPECS[benchmark], 42)


def first(benchmark: str) -> dict:
    return items(benchmark).iloc[0].to_dict()


def test_templates_cover_every_task_type() -> None:
    assert TEMPLATE_VERSION and isinstance(TEMPLATE_VERSION, str)
    assert set(TEMPLATES) == {"math", "multiple_choice", "code", "livebench"}
    assert {schema.template for schema in SCHEMAS.values()} == set(TEMPLATES)


@pytest.mark.parametrize("benchmark", ["gsm8k", "math500"])
def test_math_template_has_step_by_step_system_turn_and_boxed_answer(benchmark: str) -> None:
    for item in items(benchmark).to_dict("records"):
        system, user = render(item)
        assert system["role"] == "system" and "step by step" in system["content"]
        assert user["role"] == "user"
        assert item["prompt"] in user["content"] and "\\boxed{}" in user["content"]


def test_braces_in_the_problem_survive_formatting() -> None:
    item = {**first("math500"), "prompt": "Let $f(x) = {x}^2$ and {y}. Find $f(3)$."}
    assert "Let $f(x) = {x}^2$ and {y}. Find $f(3)$." in render(item)[1]["content"]


@pytest.mark.parametrize("benchmark", ["mmlu", "mmlu_pro", "gpqa_diamond"])
def test_multiple_choice_lists_shuffled_options_and_asks_for_answer_line(benchmark: str) -> None:
    for item in items(benchmark).to_dict("records"):
        (user,) = render(item)
        content = user["content"]
        assert user["role"] == "user" and item["prompt"] in content
        letters = OPTION_LETTERS[: len(item["choices"])]
        lines = [f"{letter}. {choice}" for letter, choice in zip(letters, item["choices"], strict=True)]
        assert "\n".join(lines) in content  # in the stored (shuffled) order
        assert "Answer: X" in content
        assert f"({', '.join(letters)})" in content


def test_humaneval_supplies_the_signature_but_not_the_tests() -> None:
    for item in items("humaneval").to_dict("records"):
        (user,) = render(item)
        metadata = json.loads(item["metadata"])
        content = user["content"]
        assert f"```python\n{item['prompt'].strip(chr(10))}\n```" in content
        assert "def check(candidate)" not in content and metadata["canonical_solution"] not in content
        assert "single fenced ```python code block" in content


def test_mbpp_supplies_the_description_and_its_tests() -> None:
    for item in items("mbpp").to_dict("records"):
        (user,) = render(item)
        metadata = json.loads(item["metadata"])
        content = user["content"]
        assert item["prompt"] in content
        assert all(test in content for test in metadata["test_list"])
        assert metadata["code"] not in content
        assert "single fenced ```python code block" in content


def test_livebench_is_a_bare_user_turn() -> None:
    raw = pd.DataFrame.from_records(
        [
            {
                "question_id": "q1",
                "category": "reasoning",
                "ground_truth": "no",
                "turns": ["Is 7 even? Think step by step, then answer in **bold**: **yes** or **no**.\n"],
                "task": "web_of_lies_v2",
                "livebench_release_date": "2024-06-24",
            }
        ]
    )
    item = normalise("livebench_reasoning", raw, SPECS["livebench_reasoning"], 42).iloc[0].to_dict()
    assert render(item) == [{"role": "user", "content": raw["turns"].iloc[0][0]}]


def test_renders_rows_read_back_from_parquet(tmp_path: Path) -> None:
    frame = pd.concat([items("mmlu_pro"), items("mbpp")], ignore_index=True)
    path = tmp_path / "items.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    back = pq.read_table(path).to_pandas()
    assert [render(row) for row in back.to_dict("records")] == [
        render(row) for row in frame.to_dict("records")
    ]


def test_bad_items_are_rejected() -> None:
    with pytest.raises(UserInputError, match="unknown template 'essay'"):
        render({**first("gsm8k"), "template": "essay"})
    with pytest.raises(UserInputError, match="no task block for grader 'math'"):
        render({**first("gsm8k"), "template": "code"})
    with pytest.raises(UserInputError, match="11 options"):
        render({**first("mmlu_pro"), "choices": [str(i) for i in range(11)]})
