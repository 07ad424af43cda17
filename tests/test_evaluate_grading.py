"""Grading dispatch and avg@k summaries on the bundled fixtures: known-correct and known-wrong answers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import load_config
from workflow_scripts.evaluate import grading, math_equivalence
from workflow_scripts.evaluate.fixtures import read_fixture
from workflow_scripts.evaluate.grading import (
    check_coverage,
    check_generations,
    grade,
    humaneval_program,
    mbpp_program,
    summarize,
)
from workflow_scripts.evaluate.items import normalise
from workflow_scripts.evaluate.sandbox import Limits

LIMITS = Limits(timeout_s=5.0, memory_mb=1024)
BENCHMARKS = ("gsm8k", "math500", "mmlu_pro", "gpqa_diamond", "humaneval", "mbpp")


@pytest.fixture(scope="module")
def items() -> pd.DataFrame:
    specs = load_config(toy=True)["benchmarks"]
    frames = [normalise(name, read_fixture(name), specs[name], 42) for name in BENCHMARKS]
    return pd.concat(frames, ignore_index=True)


def _fence(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n"


def _correct(item: pd.Series) -> str:
    """A response that answers the item right, in the format its template asks for."""
    if item["grader"] == "math":
        return f"Step by step... so the answer is \\boxed{{{item['answer']}}}."
    if item["grader"] == "multiple_choice":
        return f"Brief reasoning.\nAnswer: {item['answer']}"
    meta = json.loads(item["metadata"])
    if item["grader"] == "humaneval":
        return _fence(meta["prompt"] + meta["canonical_solution"])
    return _fence(meta["code"])


def _wrong(item: pd.Series) -> str:
    if item["grader"] == "math":
        return "I think it is \\boxed{-987654}."
    if item["grader"] == "multiple_choice":
        wrong = next(letter for letter in "ABCD" if letter != item["answer"])
        return f"Answer: {wrong}"
    if item["grader"] == "humaneval":
        meta = json.loads(item["metadata"])
        return _fence(f"def {meta['entry_point']}(*args, **kwargs):\n    return None")
    return _fence("def unrelated():\n    raise SystemExit(3)")


def _generations(items: pd.DataFrame, respond) -> pd.DataFrame:
    rows = [
        {"benchmark": item["benchmark"], "item_id": item["item_id"], "repeat": r, "seed": 42 + r,
         "response": respond(item, r), "completion_tokens": 1, "finish_reason": "stop"}
        for _, item in items.iterrows()
        for r in range(2)
    ]  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_known_correct_answers_score_one_and_wrong_ones_zero(items):
    generations = _generations(items, lambda item, r: _correct(item) if r == 0 else _wrong(item))
    scores = grade(items, generations, LIMITS, workers=2, math_timeout_s=10.0)
    assert len(scores) == len(generations)
    by_repeat = scores.groupby("repeat")["score"]
    failures = scores[(scores["repeat"] == 0) & (scores["score"] != 1.0)]
    assert failures.empty, failures[["benchmark", "item_id", "extracted"]].to_string()
    assert by_repeat.mean().tolist() == [1.0, 0.0]


def test_a_response_without_an_answer_scores_zero(items):
    scores = grade(items, _generations(items, lambda item, r: "I do not know."), LIMITS, 2, 10.0)
    assert scores["score"].eq(0.0).all()
    code = scores[scores["benchmark"].isin(["humaneval", "mbpp"])]
    assert code["extracted"].isna().all()


@pytest.mark.slow
def test_summary_is_avg_at_k_of_repeat_percentages(items):
    # Repeat 0 right everywhere, repeat 1 right on the first item of each benchmark only.
    firsts = set(items.groupby("benchmark")["item_id"].first())
    generations = _generations(
        items, lambda item, r: _correct(item) if r == 0 or item["item_id"] in firsts else _wrong(item)
    )
    scores = grade(items, generations, LIMITS, workers=2, math_timeout_s=10.0)
    summary = summarize(scores, repeats=2)
    assert sorted(summary) == sorted(BENCHMARKS)
    for name, entry in summary.items():
        count = int((items["benchmark"] == name).sum())
        repeats = [100.0, 100.0 / count]
        assert entry["items"] == count
        assert entry["repeat_scores"] == pytest.approx(repeats)
        assert entry["score"] == pytest.approx(np.mean(repeats))
        assert entry["repeat_sd"] == pytest.approx(np.std(repeats, ddof=1))


@pytest.mark.slow
def test_a_missing_repeat_is_an_error(items):
    scores = grade(items, _generations(items, lambda item, r: _correct(item)), LIMITS, 2, 10.0)
    with pytest.raises(ValueError, match="no scores for repeats \\[2\\]"):
        summarize(scores, repeats=3)


def test_a_generation_without_an_item_is_named(items):
    generations = _generations(items.head(1), lambda item, r: "x")
    generations.loc[0, "item_id"] = "gsm8k/999"
    with pytest.raises(ValueError, match="item 'gsm8k/999'"):
        grade(items, generations, LIMITS, 2, 10.0)


def test_code_programs_run_the_benchmarks_own_tests(items):
    humaneval = items[items["benchmark"] == "humaneval"].iloc[0]
    meta = json.loads(humaneval["metadata"])
    body_only = humaneval_program(humaneval, meta["canonical_solution"])
    assert body_only.startswith(meta["prompt"]) and f"check({meta['entry_point']})" in body_only
    mbpp = items[items["benchmark"] == "mbpp"].iloc[0]
    program = mbpp_program(mbpp, "def f(): pass")
    assert all(test in program for test in json.loads(mbpp["metadata"])["test_list"])


def _livebench_scores(tasks: list[str], scores: list[float], repeat: int = 0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "benchmark": "livebench_math",
            "item_id": [f"q{i}" for i in range(len(tasks))],
            "task": tasks,
            "repeat": repeat,
            "seed": 42 + repeat,
            "score": scores,
            "extracted": None,
        }
    )


def test_livebench_repeats_are_task_means_of_item_means():
    """LiveBench's category score: three AMPS items right, one olympiad item wrong -> 50, not 75."""
    frame = pd.concat(
        [
            _livebench_scores(["AMPS_Hard"] * 3 + ["olympiad"], [1.0, 1.0, 1.0, 0.0], repeat=0),
            _livebench_scores(["AMPS_Hard"] * 3 + ["olympiad"], [0.0, 1.0, 1.0, 1.0], repeat=1),
        ]
    )
    entry = summarize(frame, repeats=2)["livebench_math"]
    tasks = frame.groupby(["repeat", "task"])["score"].mean().groupby("repeat").mean()
    assert entry["repeat_scores"] == pytest.approx(100.0 * tasks.to_numpy())
    assert entry["repeat_scores"] == pytest.approx([50.0, 100.0 * (2 / 3 + 1) / 2])


def test_a_benchmark_mixing_tasks_and_plain_items_is_an_error():
    frame = _livebench_scores(["AMPS_Hard", ""], [1.0, 0.0])
    with pytest.raises(ValueError, match="livebench_math.*mixes"):
        summarize(frame, repeats=1)


def test_graded_livebench_rows_carry_their_task():
    specs = load_config(toy=True)["benchmarks"]
    items = normalise("livebench_math", read_fixture("livebench_math"), specs["livebench_math"], 42)
    scores = grade(items, _generations(items, lambda item, r: "no answer"), LIMITS, 1, 10.0)
    expected = items["metadata"].map(lambda meta: json.loads(meta)["task"])
    assert sorted(scores["task"].unique()) == sorted(expected.unique())
    assert (scores["task"] != "").all()


def test_coverage_requires_each_item_and_repeat_exactly_once(items):
    generations = _generations(items, lambda item, r: "")
    check_coverage(items, generations, repeats=2)
    first = generations.iloc[0]
    with pytest.raises(
        ValueError, match=f"benchmark '{first['benchmark']}' item '{first['item_id']}' repeat 0"
    ):
        check_coverage(items, generations.iloc[1:], repeats=2)
    with pytest.raises(ValueError, match="several generations"):
        check_coverage(items, pd.concat([generations, generations.iloc[:1]]), repeats=2)
    with pytest.raises(ValueError, match="repeat 2"):
        check_coverage(items, generations, repeats=3)


@pytest.mark.slow
@pytest.mark.parametrize(
    "early_exit", ["import sys\nsys.exit(0)", "raise SystemExit(0)", "import os\nos._exit(0)",
                   "import atexit, os\natexit.register(os._exit, 0)\nraise SystemExit(0)"],
)  # fmt: skip
def test_a_program_that_exits_before_its_tests_end_fails(items, early_exit):
    """Exit status 0 alone is no pass: the tests must have run to their end."""
    code_items = items[items["benchmark"].isin(["humaneval", "mbpp"])]

    def respond(item, repeat):
        if repeat == 0:
            return _correct(item)
        wrong = _wrong(item).split("```python\n")[1].split("\n```")[0]
        return _fence(f"{wrong}\n{early_exit}")

    scores = grade(code_items, _generations(code_items, respond), LIMITS, workers=2, math_timeout_s=10.0)
    assert scores.groupby("repeat")["score"].mean().tolist() == [1.0, 0.0]


@pytest.mark.slow
def test_a_response_over_the_length_cap_scores_zero_unread(items, caplog):
    """Even a right answer is not read past ``max_response_chars``; the log names count and first item."""
    math = items[items["benchmark"] == "gsm8k"]
    generations = _generations(math, lambda item, r: _correct(item) if r == 0 else "x" * 64 + _correct(item))
    cap = int(generations["response"].str.len().max()) - 64
    scores = grade(math, generations, LIMITS, 1, 10.0, max_response_chars=cap)
    graded, capped = (scores[scores["repeat"] == r] for r in (0, 1))
    assert graded["score"].eq(1.0).all() and capped["score"].eq(0.0).all()
    assert capped["extracted"].isna().all()
    first = generations[generations["repeat"] == 1].iloc[0]
    assert f"gsm8k: {len(capped)} responses longer than {cap} characters" in caplog.text
    assert f"first item {first['item_id']!r} repeat 1" in caplog.text


def test_a_five_megabyte_response_is_capped_by_default(items):
    item = items[items["benchmark"] == "math500"].head(1)
    generations = _generations(item, lambda item, r: "y" * 5_000_000 + _correct(item))
    assert grade(item, generations, LIMITS, 1, 10.0)["score"].eq(0.0).all()


def _raise_on_poison(function):
    """``function``, except that it raises on any argument containing POISON."""

    def poisoned(*args, **kwargs):
        if any("POISON" in str(value) for value in [*args, *kwargs.values()]):
            raise RuntimeError("poisoned response")
        return function(*args, **kwargs)

    return poisoned


# Per benchmark, the step of its grading made to raise: extraction, math checking, choice
# extraction, program building.
POISONED = {
    "gsm8k": (grading, "extract_math_answer"),
    "math500": (math_equivalence, "decide"),
    "mmlu_pro": (grading, "extract_choice"),
    "mbpp": (grading.PROGRAMS, "mbpp"),
}


@pytest.mark.slow
@pytest.mark.parametrize("benchmark", sorted(POISONED))
def test_a_response_whose_grading_raises_costs_that_item_only(items, monkeypatch, caplog, benchmark):
    chosen = items[items["benchmark"] == benchmark]
    bad = chosen["item_id"].iloc[0]

    def respond(item, repeat):
        right = _correct(item)
        if item["item_id"] != bad or repeat != 1:
            return right
        return right.replace("\\boxed{", "\\boxed{POISON") if item["grader"] == "math" else f"POISON {right}"

    owner, name = POISONED[benchmark]
    if isinstance(owner, dict):
        monkeypatch.setitem(owner, name, _raise_on_poison(owner[name]))
    else:
        monkeypatch.setattr(owner, name, _raise_on_poison(getattr(owner, name)))
    scores = grade(chosen, _generations(chosen, respond), LIMITS, workers=2, math_timeout_s=10.0)
    hit = (scores["item_id"] == bad) & (scores["repeat"] == 1)
    assert scores.loc[hit, "score"].tolist() == [0.0] and scores.loc[hit, "extracted"].isna().all()
    assert scores.loc[~hit, "score"].eq(1.0).all()
    assert f"benchmark {benchmark!r} item {bad!r} repeat 1: RuntimeError: poisoned response" in caplog.text


def test_generations_need_the_graded_columns_and_text_responses(items):
    generations = _generations(items.head(2), lambda item, r: "x")
    check_generations(generations)
    with pytest.raises(ValueError, match=r"missing columns \['response'\]"):
        check_generations(generations.drop(columns="response"))
    generations.loc[[1, 2], "response"] = None
    first = generations.iloc[1]
    with pytest.raises(
        ValueError,
        match=f"column 'response' has 2 null values, first benchmark '{first['benchmark']}' "
        f"item '{first['item_id']}' repeat 1",
    ):
        check_generations(generations)
    generations.loc[[1, 2], "response"] = 7
    with pytest.raises(ValueError, match="column 'response' has 2 values that are not strings"):
        check_generations(generations)
