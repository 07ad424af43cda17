"""Toy benchmarks: the toy task families in each benchmark's raw schema, normalised and graded for real.

A response a model trained on the toy corpus would give (the family object's ``.response``; for
multiple choice with the letter the option lands on after the pipeline's shuffle) must score 1
through ``grading.grade``, and a wrong one 0; code runs in the real sandbox.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import load_config
from workflow_scripts.cli import main
from workflow_scripts.errors import UserInputError
from workflow_scripts.evaluate.fixtures import read_fixture
from workflow_scripts.evaluate.grading import grade
from workflow_scripts.evaluate.items import OPTION_LETTERS, normalise
from workflow_scripts.evaluate.livebench.testcases import decode_private, load_tests
from workflow_scripts.evaluate.sandbox import IsolationUnavailable, Limits, require_isolation
from workflow_scripts.evaluate.templates import render
from workflow_scripts.evaluate.toy_benchmarks import (
    COPIED,
    DRAWS,
    LCB_PRIVATE_TESTS,
    LCB_PUBLIC_TESTS,
    WRITERS,
    ToyQuestion,
    draw_questions,
    encode_private_cases,
    template_row,
    toy_benchmark_rows,
)
from workflow_scripts.task_formats import AMPS_INSTRUCTION, LCB_GENERATION_TURN, WEB_OF_LIES_V2_INSTRUCTION
from workflow_scripts.toy_tasks import FUNCTIONS, STDIN_PROGRAMS, Choice, Function, StdinProgram, Sum

CODE = ("humaneval", "mbpp", "livebench_coding")
# Sixteen rows at seed 2 draw every function and every standard-input program of the code families.
ROWS = 16
SEED = 2
LIMITS = Limits(timeout_s=5.0, memory_mb=1024)
CONFIG = load_config(toy=True)
SPECS = CONFIG["benchmarks"]
BENCHMARKS = tuple(SPECS)  # the registry's twelve
SHUFFLE_SEED = CONFIG["evaluation"]["choice_shuffle_seed"]


def items_of(benchmark: str, raw: pd.DataFrame) -> pd.DataFrame:
    """The items ``evaluate items`` makes of ``raw`` (the registry's spec and shuffle seed)."""
    return normalise(benchmark, raw, SPECS[benchmark], SHUFFLE_SEED)


def through_parquet(frame: pd.DataFrame, path: Path) -> pd.DataFrame:
    """``frame`` written as the CLI writes it and read back as ``evaluate items`` reads it."""
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    return pd.read_parquet(path)


def test_every_registry_benchmark_has_toy_rows():
    assert sorted(DRAWS) == sorted(SPECS) == sorted(WRITERS)


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_rows_normalise_with_distinct_ids(benchmark, tmp_path):
    raw = toy_benchmark_rows(benchmark, ROWS, SEED)
    assert list(raw.columns) == list(read_fixture(benchmark).columns)
    items = items_of(benchmark, through_parquet(raw, tmp_path / "raw.parquet"))
    assert len(items) == ROWS and items["item_id"].is_unique
    assert (items["template"] == SPECS[benchmark]["template"]).all()


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_rows_are_deterministic_in_the_seed(benchmark):
    rows = toy_benchmark_rows(benchmark, ROWS, SEED)
    pd.testing.assert_frame_equal(rows, toy_benchmark_rows(benchmark, ROWS, SEED))
    pd.testing.assert_frame_equal(rows.head(3), toy_benchmark_rows(benchmark, 3, SEED))
    asked = items_of(benchmark, rows)[["prompt", "answer"]]
    other = items_of(benchmark, toy_benchmark_rows(benchmark, ROWS, SEED + 1))[["prompt", "answer"]]
    assert not asked.equals(other)


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_task_free_fields_are_the_fixtures(benchmark):
    template = template_row(benchmark, read_fixture(benchmark))
    rows = toy_benchmark_rows(benchmark, 3, SEED)
    for column in COPIED[benchmark]:
        expected = template[column]
        same = [value == expected or (pd.isna(value) and pd.isna(expected)) for value in rows[column]]
        assert all(same), column


def corpus_prompt(benchmark: str, question: ToyQuestion, item: pd.Series) -> str:
    """The user turn a toy corpus row asks ``question`` with, in the form ``benchmark`` asks it."""
    task = question.task
    if isinstance(task, Sum):
        return task.prompt({"gsm8k": "word", "math500": "expression", "livebench_math": "amps"}[benchmark])
    if isinstance(task, Choice):  # the options in the order the pipeline's shuffle shows them
        options = tuple(item["choices"])
        return dataclasses.replace(
            task, options=options, answer=options.index(task.options[task.answer])
        ).prompt
    if isinstance(task, Function):
        return task.prompt(benchmark, question.inputs)
    if isinstance(task, StdinProgram):
        return task.prompt(question.inputs[:LCB_PUBLIC_TESTS])
    return task.prompt


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_the_corpora_ask_as_the_benchmarks_do(benchmark):
    """A toy corpus row's question is, word for word, the user turn evaluation renders (F.3)."""
    questions = draw_questions(benchmark, ROWS, SEED)
    items = items_of(benchmark, toy_benchmark_rows(benchmark, ROWS, SEED))
    for question, (_, item) in zip(questions, items.iterrows(), strict=True):
        assert render(item)[-1]["content"] == corpus_prompt(benchmark, question, item)


def test_benchmarks_of_one_family_ask_different_questions():
    first, second = (toy_benchmark_rows(name, ROWS, SEED)["question"] for name in ("mmlu", "mmlu_stem"))
    assert not first.equals(second)


def test_livebench_instructions_are_livebench_own():
    """The fixture rows (LiveBench's text) end with, or are built by, the instructions the toy rows use."""
    math = read_fixture("livebench_math")
    assert all(turns[0].endswith(AMPS_INSTRUCTION) for turns in math[math["task"] == "AMPS_Hard"]["turns"])
    reasoning = template_row("livebench_reasoning", read_fixture("livebench_reasoning"))
    assert reasoning["turns"][0].endswith(f"? {WEB_OF_LIES_V2_INSTRUCTION}")
    coding = template_row("livebench_coding", read_fixture("livebench_coding"))
    content = coding["original_json"]["question_content"]
    assert LCB_GENERATION_TURN.format(question_content=content) == coding["turns"][0]


def test_private_cases_round_trip_through_livecodebench_encoding():
    cases = [{"input": "2\n1 2\n", "output": "3\n", "testtype": "stdin"}]
    assert [dataclasses.asdict(case) for case in decode_private(encode_private_cases(cases), "q")] == cases
    row = toy_benchmark_rows("livebench_coding", 1, SEED).iloc[0].to_dict()
    program = draw_questions("livebench_coding", 1, SEED)[0]
    tests = load_tests(row)
    assert len(tests) == LCB_PUBLIC_TESTS + LCB_PRIVATE_TESTS
    assert [(t.input, t.output) for t in tests] == [program.task.case(xs) for xs in program.inputs]


@pytest.mark.parametrize("benchmark", [name for name in BENCHMARKS if name not in CODE])
def test_gold_answers_are_the_families(benchmark):
    """The item's gold (for multiple choice: the option its letter names) is what the family computed."""
    items = items_of(benchmark, toy_benchmark_rows(benchmark, ROWS, SEED))
    for (_, item), question in zip(items.iterrows(), draw_questions(benchmark, ROWS, SEED), strict=True):
        task = question.task
        if isinstance(task, Choice):
            assert item["choices"][OPTION_LETTERS.index(item["answer"])] == task.options[task.answer]
        else:
            assert item["answer"] == (str(task.value) if isinstance(task, Sum) else task.answer)


def test_code_rows_draw_every_function_and_program():
    for benchmark in ("humaneval", "mbpp"):
        assert {q.task.name for q in draw_questions(benchmark, ROWS, SEED)} == {f.name for f in FUNCTIONS}
    titles = {q.task.title for q in draw_questions("livebench_coding", ROWS, SEED)}
    assert titles == {p.title for p in STDIN_PROGRAMS}


def correct_response(question: ToyQuestion, item: pd.Series) -> str:
    """The trained model's answer: the family's response, for multiple choice with the shuffled letter."""
    task = question.task
    if isinstance(task, Choice):
        assert task.response.endswith(f"Answer: {task.letter}")
        letter = OPTION_LETTERS[list(item["choices"]).index(task.options[task.answer])]
        return task.response.removesuffix(task.letter) + letter
    return task.response


def wrong_response(question: ToyQuestion, item: pd.Series) -> str:
    """The same kind of response with a wrong answer."""
    task = question.task
    if isinstance(task, Sum):
        return dataclasses.replace(task, b=task.b + 1).response
    if isinstance(task, Choice):
        wrong = next(letter for letter in OPTION_LETTERS if letter != item["answer"])
        return task.response.removesuffix(task.letter) + wrong
    if isinstance(task, Function):
        return dataclasses.replace(task, body="return None").response
    if isinstance(task, StdinProgram):
        return dataclasses.replace(task, body='print("wrong")').response
    return dataclasses.replace(task, first_truthful=not task.first_truthful).response


@pytest.fixture(scope="module")
def sandbox_isolates() -> None:
    try:
        require_isolation(allow_unisolated=False)
    except IsolationUnavailable as error:
        pytest.skip(f"code answers run only in an isolating sandbox: {error}")


@pytest.mark.slow
@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_the_trained_answer_scores_one_and_a_wrong_one_zero(benchmark, request):
    if benchmark in CODE:
        request.getfixturevalue("sandbox_isolates")
    items = items_of(benchmark, toy_benchmark_rows(benchmark, ROWS, SEED))
    questions = draw_questions(benchmark, ROWS, SEED)
    generations = pd.DataFrame(
        [
            {"benchmark": benchmark, "item_id": item["item_id"], "repeat": repeat, "seed": 42 + repeat,
             "response": respond(question, item)}
            for (_, item), question in zip(items.iterrows(), questions, strict=True)
            for repeat, respond in enumerate((correct_response, wrong_response))
        ]
    )  # fmt: skip
    scores = grade(items, generations, LIMITS, workers=2, math_timeout_s=10.0)
    by_repeat = scores.groupby("repeat")["score"]
    assert by_repeat.min().tolist() == [1.0, 0.0], scores.to_string()
    assert by_repeat.max().tolist() == [1.0, 0.0], scores.to_string()


@pytest.mark.slow
def test_reference_solutions_pass_their_own_tests(request):
    """HumanEval's prompt + canonical_solution and MBPP's code, as the benchmarks' own harnesses run them."""
    request.getfixturevalue("sandbox_isolates")
    for benchmark in ("humaneval", "mbpp"):
        items = items_of(benchmark, toy_benchmark_rows(benchmark, ROWS, SEED))
        metadata = [json.loads(meta) for meta in items["metadata"]]
        solutions = [m["prompt"] + m["canonical_solution"] if "prompt" in m else m["code"] for m in metadata]
        generations = pd.DataFrame(
            {"benchmark": benchmark, "item_id": items["item_id"], "repeat": 0, "seed": 42,
             "response": [f"```python\n{code}\n```" for code in solutions]}
        )  # fmt: skip
        scores = grade(items, generations, LIMITS, workers=2, math_timeout_s=10.0)
        assert scores["score"].eq(1.0).all(), scores.to_string()


def test_the_command_writes_rows_that_evaluate_items_reads(tmp_path):
    raw, items = tmp_path / "raw.parquet", tmp_path / "items.parquet"
    for benchmark in ("mbpp", "livebench_coding"):
        assert main(["evaluate", "toy-benchmark", "--benchmark", benchmark, "--rows", "3",
                     "--seed", str(SEED), "--out", str(raw)]) == 0  # fmt: skip
        assert main(["evaluate", "items", "--benchmark", benchmark, "--raw", str(raw),
                     "--spec", json.dumps(SPECS[benchmark]), "--shuffle-seed", str(SHUFFLE_SEED),
                     "--out", str(items)]) == 0  # fmt: skip
        assert len(pd.read_parquet(items)) == 3


def test_an_unknown_benchmark_or_bad_count_is_named(tmp_path, capsys):
    out = str(tmp_path / "raw.parquet")
    assert main(["evaluate", "toy-benchmark", "--benchmark", "arc", "--rows", "2", "--seed", "1",
                 "--out", out]) == 2  # fmt: skip
    assert "no toy benchmark 'arc'" in capsys.readouterr().err
    with pytest.raises(UserInputError, match="gsm8k: toy benchmark rows"):
        toy_benchmark_rows("gsm8k", 0, SEED)
    with pytest.raises(UserInputError, match="gsm8k: toy benchmark seed"):
        toy_benchmark_rows("gsm8k", 2, -1)
