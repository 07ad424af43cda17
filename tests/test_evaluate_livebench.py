"""LiveBench scorers against hand-checked values of LiveBench's rules; test-case decoding; fixtures.

Expected values are worked out by hand from LiveBench's ``process_results`` rules (quoted in each
test), including the places where those rules are lenient or strict in surprising ways, so that a
change of behaviour shows up here.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import pickle
import pickletools
import time
import zlib
from pathlib import Path

import pandas as pd
import pytest

from workflow_scripts.evaluate.calls import converse_all
from workflow_scripts.evaluate.fixtures import read_fixture
from workflow_scripts.evaluate.livebench import coding_tasks, lcb_harness, math_tasks, reasoning_tasks
from workflow_scripts.evaluate.livebench.math_tasks import EquivalenceQuery
from workflow_scripts.evaluate.livebench.parsing import UnparseableResponse, last_boxed_span
from workflow_scripts.evaluate.livebench.scoring import (
    UnknownTaskError,
    category_score,
    score,
    score_many,
    scorer_name,
)
from workflow_scripts.evaluate.livebench.testcases import (
    TestCaseError,
    decode_private,
    decode_public,
    function_name,
    load_tests,
)
from workflow_scripts.evaluate.sandbox import Limits

AMC_QUESTION = (
    "What is $2+3\\cdot 4$? $\\textbf{(A) }10\\qquad\\textbf{(B) }14\\qquad\\textbf{(C) }20\\qquad"
    "\\textbf{(D) }24\\qquad\\textbf{(E) }45$ Please duplicate the letter five times."
)


def records(benchmark: str) -> list[dict]:
    """The bundled fixture rows as plain dicts, without the NaN of columns a row does not have."""
    frame = read_fixture(benchmark)
    return [
        {k: v for k, v in row.items() if not (isinstance(v, float) and pd.isna(v))}
        for row in frame.to_dict("records")
    ]


def encode_private(value: object) -> str:
    """The hub's encoding of private test cases: base64 of zlib of a pickle."""
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode("ascii")


# ---------------------------------------------------------------- shared parsing


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("x \\boxed{a{b}c} y \\boxed{d}", "\\boxed{d}"),
        ("$\\boxed{\\frac{1}{2}}$", "\\boxed{\\frac{1}{2}}"),
        ("\\fbox{A}", "\\boxed{A}"),
        ("\\boxed{1} and \\boxed 7$ then", "\\boxed 7"),  # a "\boxed " token anywhere wins
        ("\\boxed{never closed", None),
        ("no box", None),
    ],
)
def test_last_boxed_span(text: str, span: str | None) -> None:
    assert last_boxed_span(text) == span


# ---------------------------------------------------------------- math


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Therefore BBBBB", 1.0),
        ("<solution>B</solution>", 1.0),
        ("I first thought BBBB, but it is CCCCC", 1.0),  # four repeats anywhere count
        ("$\\boxed{\\text{B}}$", 1.0),
        ("so the value is 14", 1.0),  # the option's value near the end
        ("The answer is\n(B)", 1.0),
        ("AAAAA", 0.0),
        ("\\boxed{C}", 0.0),
        ("14 is the value, but I will spell out a long justification afterwards.", 0.0),
    ],
)
def test_math_contest(response: str, expected: float) -> None:
    assert math_tasks.math_contest_score("B", response, AMC_QUESTION) == expected


def test_math_contest_rejects_a_non_letter_ground_truth() -> None:
    with pytest.raises(ValueError, match="one letter A-E"):
        math_tasks.math_contest_score("14", "BBBBB", AMC_QUESTION)


def test_malformed_box_scores_zero_even_if_a_later_rule_would_match() -> None:
    """LiveBench's remove_boxed asserts the \\boxed{...} shape; its dispatcher turns the error into 0."""
    with pytest.raises(UnparseableResponse):
        math_tasks.math_contest_score("A", "\\boxed\\textbf{A}\n(A)", AMC_QUESTION)
    question = {
        "question_id": "q-amc",
        "task": "math_comp",
        "subtask": "amc_12a_2023",
        "turns": [AMC_QUESTION],
        "ground_truth": "A",
    }
    assert score(question, "\\boxed\\textbf{A}\n(A)") == 0.0
    assert score(question, "\\boxed{A}\n(A)") == 1.0


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("The answer is 024", 1.0),
        ("2^10 = 1024", 1.0),  # the ground truth as a substring of the last 50 characters
        ("The answer is 025", 0.0),
        ("The answer is 024." + " And that is all there is to say about it." * 2, 0.0),
    ],
)
def test_aime(response: str, expected: float) -> None:
    assert math_tasks.aime_score("024", response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Reasoning...\nAnswer: 2, 3, 1", 1.0),
        ("**Answer:** 2, 3, 1.", 1.0),
        ("Answer:\n2, 3, 1", 1.0),  # the next line when the answer line is empty
        ("Answer: 2, 1, 3", 1 - 2 / 3),  # two substitutions
        ("Answer: 2, 3", 1 - 1 / 3),  # one deletion
        ("Answer: 2, 3, 1, 4", 1 - 1 / 4),  # one insertion, over the longer length
        ("The order is $\\boxed{2, 3, 1}$", 1.0),
        ("The order is\n<expression 2>, <expression 3>, <expression 1>", 1.0),  # last line's digit runs
        ("I do not know", 0.0),
    ],
)
def test_proof_rearrangement(response: str, expected: float) -> None:
    assert math_tasks.proof_rearrangement_score("2,3,1", response) == pytest.approx(expected)


def test_proof_rearrangement_unreadable_digit_scores_zero() -> None:
    """A superscript digit reaching LiveBench's last-resort int() raises there: a score of 0."""
    with pytest.raises(UnparseableResponse):
        math_tasks.proof_order("x²")
    question = {"question_id": "q-imo", "task": "olympiad", "subtask": "imo", "ground_truth": "1"}
    assert score(question, "x²") == 0.0


def test_edit_distance_matches_a_brute_force_count() -> None:
    assert math_tasks.edit_distance([1, 2, 3], [1, 2, 3]) == 0
    assert math_tasks.edit_distance([1, 2, 3], [3, 2, 1]) == 2
    assert math_tasks.edit_distance([], [1, 2]) == 2
    assert math_tasks.edit_distance([1, None, 3], [1, 2, 3, 4]) == 2


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("x = \\frac12", " \\frac{1}{2}"),
        ("\\sqrt3", "\\sqrt{3}"),
        ("100,000", "100000"),
        ("\\text{5}", "5"),
        ("the value $42$ here", "42"),
    ],
)
def test_normalize_final_answer(raw: str, normalized: str) -> None:
    assert math_tasks.normalize_final_answer(raw) == normalized


def test_amps_hard_reads_box_then_dollars_then_the_ending() -> None:
    gold = "2 x \\cos \\left(x^2\\right)"
    prepared = math_tasks.amps_hard_prepare(gold, "So $\\boxed{2x \\cdot \\cos(x^2) + C}$")
    assert prepared == EquivalenceQuery("2 x \\cos (x^2)", "2x * \\cos(x^2) ")
    prepared = math_tasks.amps_hard_prepare(gold, "The derivative is $y' = 2x\\cos(x^2)$")
    assert prepared == EquivalenceQuery("2 x \\cos (x^2)", "2x\\cos(x^2)")
    assert math_tasks.amps_hard_prepare("42", "so the gcd is 42.") == 1.0
    assert math_tasks.amps_hard_prepare("42", "so the gcd is 41.") == 0.0


@pytest.mark.parametrize(
    ("gold", "answer", "equal"),
    [
        ("2 x \\cos (x^2)", "2x\\cos(x^2)", True),
        ("2 x \\cos (x^2)", "x\\cos(x^2)", False),
        ("\\frac{2x}{x^2+1}", "\\frac{2x}{1+x^2}", True),
        ("2\\sqrt{3}", "\\sqrt{12}", True),
        ("\\log(x)", "\\ln(x)", True),  # \log is the natural logarithm, as in SymPy's parser
        ("\\frac{1}{3}", "0.3333", True),  # |difference| < 0.001
        ("\\frac{1}{3}", "0.33", False),
        ("x^2", "\\frac{", False),  # does not parse
    ],
)
def test_latex_equivalent(gold: str, answer: str, equal: bool) -> None:
    assert math_tasks.latex_equivalent(gold, answer) is equal


# ---------------------------------------------------------------- reasoning


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("**yes, no, yes**", 1.0),
        ("<solution>yes, no, yes</solution>", 1.0),
        ("**Yes**, then **No**, then **Yes.**", 1.0),
        ("$\\boxed{yes, no, yes}$", 1.0),
        ("So: yes, no, yes.", 1.0),
        ("<solution>answer: yes, no, yes</solution>", 1.0),  # three truth words containing the truth
        ("<solution>Yes, No, Yes</solution>", 0.0),  # tag contents are not lower-cased
        ("**yes, no, no**", 0.0),  # no partial credit in v2
        ("I cannot tell.", 0.0),
    ],
)
def test_web_of_lies_v2(response: str, expected: float) -> None:
    assert reasoning_tasks.web_of_lies_v2_score("yes, no, yes", response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<solution>no, yes, no</solution>", 1.0),
        ("<solution>no, yes, yes</solution>", (0 + 2 / 3) / 2),
        ("<solution>no,yes,no</solution>", (0 + 1 / 3) / 2),  # items compared as written
        ("\\boxed{\\text{no, yes, no}}", 1.0),
        ("I cannot tell.", 0.0),
    ],
)
def test_web_of_lies_v3_partial_credit(response: str, expected: float) -> None:
    assert reasoning_tasks.web_of_lies_v3_score("no, yes, no", response) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("truth", "response", "expected"),
    [
        ("dog", "So the answer is ***dog***", 1.0),
        ("dog", "***Dog***", 1.0),
        ("dog", "***cat***", 0.0),
        ("dog", "The pet is dog", 1.0),  # no bold: the last word
        ("three", "***3***", 1.0),
        ("comedy movies", "***comedy***", 1.0),
    ],
)
def test_zebra_puzzle_single_word_format(truth: str, response: str, expected: float) -> None:
    assert reasoning_tasks.zebra_puzzle_score(truth, response, "2024-06-24") == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<solution>3, apple, coffee</solution>", 1.0),
        ("<solution>3, apple, tea</solution>", (0 + 2 / 3) / 2),
        ("<solution>position 3, Apple, iced coffee</solution>", 1.0),  # containment counts
        ("<solution>1, x</solution> then <solution>3, apple, coffee</solution>", 1.0),
        ("Reasoning...\n3, apple, coffee", 1.0),
        ("\\boxed{3, \\text{apple}, coffee}", 1.0),
        ("<solution>3</solution>", (0 + 1 / 3) / 2),
        ("no idea", 0.0),
    ],
)
def test_zebra_puzzle_list_format_partial_credit(response: str, expected: float) -> None:
    assert reasoning_tasks.zebra_puzzle_score("3,apple,coffee", response, "2024-11-25") == pytest.approx(
        expected
    )


@pytest.mark.parametrize(
    ("truth", "response", "expected"),
    [
        ("2", "**2**", 1.0),
        ("2", "**two**", 1.0),
        ("2", "**3**", 0.0),
        ("2", "**2** pieces, both **triangles**, **done**", 1.0),  # within the last three bold
        ("2", "**2** **a** **b** **c**", 0.0),
        ("tetrahedron", "**a small tetrahedron**", 1.0),
        ("tetrahedron", "**a tetrahedron-like polyhedron with many faces**", 0.0),
        ("tetrahedron", "\\boxed{\\text{tetrahedron}}", 1.0),
        ("tetrahedron", "\\boxed{Tetrahedron}", 0.0),  # the box must match exactly
    ],
)
def test_spatial(truth: str, response: str, expected: float) -> None:
    assert reasoning_tasks.spatial_score(truth, response) == expected


# ---------------------------------------------------------------- dispatch and aggregation


@pytest.mark.parametrize(
    ("task", "subtask", "name"),
    [
        ("math_comp", "amc_12a_2023", "math_contest"),
        ("math_comp", "updated_amc_12b_2023", "math_contest"),
        ("math_comp", "smc", "math_contest"),
        ("math_comp", "aime_ii_2024", "aime"),
        ("olympiad", "imo", "proof_rearrangement"),
        ("olympiad", "usamo", "proof_rearrangement"),
        ("AMPS_Hard", "amps_hard_gcd", "amps_hard"),
        ("web_of_lies_v2", None, "web_of_lies_v2"),
        ("web_of_lies_v3", "", "web_of_lies_v3"),
        ("zebra_puzzle", None, "zebra_puzzle"),
        ("spatial", None, "spatial"),
        ("LCB_generation", None, "coding"),
        ("coding_completion", None, "coding"),
    ],
)
def test_scorer_is_chosen_by_subtask_else_task(task: str, subtask: str | None, name: str) -> None:
    assert scorer_name({"task": task, "subtask": subtask}) == name


def test_unknown_task_names_the_question_and_task() -> None:
    with pytest.raises(UnknownTaskError, match=r"'q-7'.*'typos'"):
        score({"question_id": "q-7", "task": "typos", "ground_truth": "x"}, "x")


def test_reasoning_channel_is_stripped_first() -> None:
    question = {"question_id": "q", "task": "math_comp", "subtask": "smc", "turns": [AMC_QUESTION]}
    assert score({**question, "ground_truth": "B"}, "<think>AAAAA</think>BBBBB") == 1.0
    assert score({**question, "ground_truth": "B"}, "<think>BBBBB</think>AAAAA") == 0.0


def test_bad_question_raises_naming_it() -> None:
    with pytest.raises(ValueError, match=r"'q-9'.*ground_truth"):
        score({"question_id": "q-9", "task": "spatial"}, "**2**")
    with pytest.raises(ValueError, match=r"'q-9'.*livebench_release_date"):
        score({"question_id": "q-9", "task": "zebra_puzzle", "ground_truth": "a"}, "***a***")


def test_category_score_is_the_mean_of_task_means() -> None:
    frame = pd.DataFrame({"task": ["a", "a", "a", "b"], "score": [1.0, 0.0, 0.5, 1.0]})
    assert category_score(frame) == pytest.approx((0.5 + 1.0) / 2)  # not the row mean 0.625
    with pytest.raises(ValueError, match="missing columns"):
        category_score(frame.rename(columns={"task": "subtask"}))


# ---------------------------------------------------------------- test cases


def test_private_test_cases_round_trip_and_json_first() -> None:
    cases = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_private(encode_private(json.dumps(cases)), "q") == decode_public(json.dumps(cases), "q")
    assert decode_private(json.dumps(cases), "q")[0].output == "2\n"  # plain JSON is read as is


class _Exploit:
    """Unpickling this would call ``os.system`` (the attack a restricted unpickler must stop)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_before_anything_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = encode_private(_Exploit(marker))
    opcodes = [
        (op.name, arg) for op, arg, _ in pickletools.genops(zlib.decompress(base64.b64decode(payload)))
    ]
    assert ("SHORT_BINUNICODE", "system") in opcodes and ("STACK_GLOBAL", None) in opcodes  # a real exploit
    with pytest.raises(
        TestCaseError, match=r"question 'q-evil' private_test_cases: rejected pickle.*refusing"
    ):
        decode_private(payload, "q-evil")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ({"input": "1", "output": "2", "testtype": "stdin"}, "expected a list"),
        ([{"input": "1", "output": 2, "testtype": "stdin"}], "must be strings"),
        ([{"input": "1", "output": "2"}], "expected keys"),
        ([{"input": "1", "output": "2", "testtype": "batch"}], "unknown testtype"),
    ],
)
def test_malformed_test_cases_raise_naming_the_question(value: object, needle: str) -> None:
    with pytest.raises(TestCaseError, match=rf"question 'q-bad'.*{needle}"):
        decode_private(encode_private(value), "q-bad")


def test_undecodable_private_cases_raise() -> None:
    with pytest.raises(TestCaseError, match="q-bad.*not base64/zlib"):
        decode_private("not base64 at all!", "q-bad")


def test_function_name_reads_nested_json() -> None:
    original = {"metadata": json.dumps({"func_name": "countGreater"})}
    assert function_name({"original_json": original}) == "countGreater"
    assert function_name({"original_json": json.dumps({"metadata": "{}"})}) is None
    with pytest.raises(TestCaseError, match="original_json.metadata is missing"):
        function_name({"question_id": "q", "original_json": {}})


# ---------------------------------------------------------------- coding


@pytest.mark.parametrize(
    ("response", "program"),
    [
        ("Here:\n```python\nprint(1)\n```\nand\n```python\nprint(2)\n```\n", "print(2)"),
        ("`print(3)`", "print(3)"),
        ("print(4)\n```", "print(4)"),
        ("print(5)\n\n", "print(5)"),
    ],
)
def test_extract_program(response: str, program: str) -> None:
    assert coding_tasks.extract_program(response) == program


def test_partial_solution_is_prepended_unless_present() -> None:
    question = {"partial_solution": "s = input()"}
    assert coding_tasks.full_program(question, "print(s)") == "s = input()\nprint(s)"
    assert coding_tasks.full_program(question, "s = input()\nprint(s)") == "s = input()\nprint(s)"
    assert coding_tasks.full_program({"partial_solution": ""}, "print(1)") == "print(1)"


@pytest.mark.parametrize(
    ("produced", "expected", "match"),
    [
        ("8 5\n", "8 5", True),
        ("1.50\n", "1.5\n", True),  # compared as decimals
        ("  1 2  \n\n", "1 2", True),
        ("1\n2\n", "1 2\n", False),
        ("abc", "abd", False),
        ("1e1", "10", True),
    ],
)
def test_lcb_output_comparison(produced: str, expected: str, match: bool) -> None:
    assert lcb_harness.outputs_match(produced, expected) is match


def run_lcb(
    code: str, inputs: list[str], outputs: list[str], fn_name: str | None = None
) -> tuple[int, str | None]:
    """LiveCodeBench's verdict on ``code``: the answer in the sandbox, the comparisons here."""
    check = coding_tasks.CodingCheck(code, fn_name, tuple(inputs), tuple(outputs), 2.0)
    talk = functools.partial(coding_tasks.run_check, check)
    return converse_all([talk], Limits(timeout_s=10.0), 1, call_timeout_s=check.timeout_s)[0]


def test_lcb_stdin_protocol() -> None:
    """The prelude supplies forgotten imports; a main guard is unwrapped; the program text is wrapped."""
    code = (
        "def main():\n    n = int(input())\n    print(gcd(n, 6))\n\nif __name__ == '__main__':\n    main()\n"
    )
    assert run_lcb(code, ["4\n", "9\n"], ["2\n", "3\n"]) == (2, None)
    passed, failure = run_lcb("print(int(input()) + 1)", ["1\n"], ["3\n"])
    assert passed == 0 and failure.startswith("wrong answer on test 0")
    # A hoisted "from sys import stdin" gets LiveCodeBench's patched readline/read, not iteration.
    hoisted = "from sys import stdin\nprint(int(stdin.readline()) * 2)"
    assert run_lcb(hoisted, ["4\n", "5\n"], ["8", "10"]) == (2, None)
    iterated = "from sys import stdin\nprint(sum(int(line) for line in stdin))"
    assert run_lcb(iterated, ["4\n"], ["4"])[0] == 0
    assert run_lcb("print(input())\nexit()\nprint('never')", ["a\n", "b\n"], ["a", "b"]) == (2, None)
    passed, failure = run_lcb("def f(:", ["1"], ["1"])
    assert passed == 0 and failure.startswith("load error on test 0")


@pytest.mark.slow
def test_lcb_functional_protocol() -> None:
    """``Solution().method`` or a module-level function; a tuple result counts as a list; the tests
    stop at the first failure, a slow one at its time limit."""
    method = "class Solution:\n    def pair(self, a, b):\n        return (b, a) if a < 9 else [0, 0]\n"
    inputs, outputs = ["1\n2", "3\n4", "9\n9"], ["[2, 1]", "[4, 3]", "[9, 9]"]
    passed, failure = run_lcb(method, inputs, outputs, "pair")
    assert passed == 2 and failure.startswith("wrong answer on test 2")
    assert run_lcb("def pair(a, b):\n    return [b, a]\n", inputs, outputs, "pair") == (3, None)
    passed, failure = run_lcb("def other(a, b):\n    return [b, a]\n", inputs, outputs, "pair")
    assert passed == 0 and failure.startswith("load error")
    raising = "class Solution:\n    def pair(self, a, b):\n        return [b, a][a + 5]\n"
    passed, failure = run_lcb(raising, inputs, outputs, "pair")
    assert passed == 0 and failure.startswith("runtime error on test 0: IndexError")
    slow = "import time\nclass Solution:\n    def pair(self, a, b):\n        time.sleep(a)\n"
    slow += "        return [b, a]\n"
    passed, failure = run_lcb(slow, inputs, outputs, "pair")
    assert passed == 1 and failure.startswith("time limit on test 1")


CODING_ANSWERS = {
    "Sum and Max": (
        "```python\nn = int(input())\na = list(map(int, input().split()))\n"
        "print(reduce(lambda x, y: x + y, a), max(a))\n```",  # reduce comes from the prelude
        "```python\nn = int(input())\na = list(map(int, input().split()))\nprint(sum(a), a[-1])\n```",
    ),
    "count-greater": (
        "```python\nclass Solution:\n    def countGreater(self, nums: List[int], k: int) -> int:\n"
        "        print('debug output is ignored')\n        return sum(x > k for x in nums)\n```",
        "```python\nclass Solution:\n    def countGreater(self, nums, k):\n"
        "        return sum(x >= k for x in nums)\n```",
    ),
    "Reverse Upper": ("```python\nprint(s[::-1].upper())\n```", "```python\nprint(s.upper())\n```"),
    "is-palindrome": (
        "```python\n        return kept == kept[::-1]\n```",
        "```python\n        return len(kept) > 0\n```",
    ),
}


def test_coding_fixtures_pass_a_correct_answer_and_fail_a_wrong_one() -> None:
    rows = records("livebench_coding")
    assert {row["task"] for row in rows} == {"LCB_generation", "coding_completion"}
    assert {function_name(row) is None for row in rows} == {True, False}  # stdin and functional
    good = [CODING_ANSWERS[row["question_title"]][0] for row in rows]
    bad = [CODING_ANSWERS[row["question_title"]][1] for row in rows]
    assert score_many(rows + rows, good + bad, workers=2) == [1.0] * len(rows) + [0.0] * len(rows)


def test_an_answer_writing_its_own_verdict_and_exiting_fails() -> None:
    """A verdict line on the harness's descriptor, then ``os._exit(0)``: no verdict of this run."""
    rows = records("livebench_coding")
    forged = [
        "```python\nimport json, os\nfor fd in range(3, 32):\n    try:\n"
        f"        os.write(fd, (json.dumps({{'passed': {len(load_tests(row))}, 'total': "
        f"{len(load_tests(row))}, 'failure': None}}) + '\\n').encode())\n"
        "    except OSError:\n        pass\nos._exit(0)\n```"
        for row in rows
    ]
    assert score_many(rows, forged, workers=2) == [0.0] * len(rows)


@pytest.mark.slow
def test_coding_time_limit_and_crash_fail() -> None:
    row = records("livebench_coding")[0]
    assert len(load_tests(row)) == 5
    start = time.monotonic()
    answers = ["```python\nwhile True:\n    pass\n```", "```python\nraise SystemError('boom')\n```"]
    assert score_many([row, row], answers, workers=2, limits=Limits(timeout_s=1.0)) == [0.0, 0.0]
    assert time.monotonic() - start < 20


# ---------------------------------------------------------------- fixtures


def ideal_response(row: dict) -> str:
    """A response giving the row's ground truth in the format its question asks for."""
    truth = row["ground_truth"]
    name = scorer_name(row)
    if name == "math_contest":
        return "Reasoning.\n" + truth * 5
    if name == "proof_rearrangement":
        return "Answer: " + ", ".join(truth.split(","))
    if name == "amps_hard":
        return f"Hence $\\boxed{{{truth}}}$"
    if name == "zebra_puzzle" and row["livebench_release_date"] < "2024-11-25":
        return f"***{truth}***"
    if name in ("web_of_lies_v3", "zebra_puzzle"):
        return f"<solution>{truth}</solution>"
    if name in ("web_of_lies_v2", "spatial"):
        return f"**{truth}**"
    return f"The answer is {truth}"  # aime


@pytest.mark.slow
def test_math_and_reasoning_fixtures_score_one_for_their_ground_truth() -> None:
    rows = records("livebench_math") + records("livebench_reasoning")
    names = {scorer_name(row) for row in rows}
    assert names == {
        "math_contest",
        "aime",
        "proof_rearrangement",
        "amps_hard",
        "web_of_lies_v2",
        "web_of_lies_v3",
        "zebra_puzzle",
        "spatial",
    }
    amps = [row for row in rows if scorer_name(row) == "amps_hard"]
    scores = score_many(rows + amps, [ideal_response(row) for row in rows] + ["$\\boxed{x+1}$"] * len(amps))
    assert scores == [1.0] * len(rows) + [0.0] * len(amps)
    frame = pd.DataFrame({"task": [row["task"] for row in rows], "score": scores[: len(rows)]})
    assert category_score(frame) == 1.0
