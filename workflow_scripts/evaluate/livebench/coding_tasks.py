"""LiveBench Coding scorer (LCB_generation and coding_completion): the answer must pass every test.

Re-implements ``LCB_generation_process_results`` (livebench/process_results/coding) with
LiveCodeBench's test runner: the program is the last fenced block of the response (LiveBench's
``extract_code``), prefixed with the question's ``partial_solution`` for completion questions
unless the answer already starts with it, and it scores 1 only if it passes all public and
private tests. The answer runs in the sandbox and the tests in the grader (``lcb_harness``): it
receives each test's input and returns its output, which the grader compares with the expected
one, so no expected output enters the sandbox. Each test may take ``timeout_s`` (LiveBench uses
6 s, the sandbox default) and the whole run LiveCodeBench's global budget of
``(timeout_s + 1) x tests + 5`` seconds (``scoring.score_many`` gives each run of a batch the
largest budget in it; a program past its own budget is still stopped by the per-test limit).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workflow_scripts.evaluate.calls import Session
from workflow_scripts.evaluate.livebench import lcb_harness
from workflow_scripts.evaluate.livebench.testcases import TestCase, TestCaseError, function_name, load_tests

FENCE = "```"


def extract_program(response: str) -> str:
    """LiveBench's code extraction: the text between the last two lines containing a fence.

    With fewer than two such lines: a response wrapped in single backticks loses them; a lone
    fence on the last line is dropped; otherwise the whole response (right-stripped) is the code.
    """
    lines = response.rstrip().split("\n")
    fences = [index for index, line in enumerate(lines) if FENCE in line]
    if len(fences) >= 2:
        return "\n".join(lines[fences[-2] + 1 : fences[-1]])
    if len(response) > 1 and response[0] == "`" and response[-1] == "`":
        return response[1:-1]
    if len(fences) == 1 and fences[0] == len(lines) - 1:
        return "\n".join(lines[:-1])
    return response.rstrip()


def full_program(question: Mapping[str, Any], code: str) -> str:
    """The answer completed with the question's ``partial_solution`` (coding_completion), if any."""
    partial = question.get("partial_solution")
    if isinstance(partial, str) and partial and not code.startswith(partial):
        return partial + "\n" + code
    return code


def _check_functional_json(tests: list[TestCase], question_id: str) -> None:
    """Functional tests hold one JSON value per input line and a JSON output; raise naming the test if not."""
    for index, test in enumerate(tests):
        try:
            for line in test.input.split("\n"):
                json.loads(line)
            json.loads(test.output)
        except json.JSONDecodeError as error:
            raise TestCaseError(
                f"question {question_id!r} test {index}: functional input/output is not JSON ({error})"
            ) from error


@dataclass(frozen=True)
class CodingCheck:
    """One answer's program and the tests it must pass: a stdin program if ``fn_name`` is None,
    else the function (or ``Solution`` method) of that name; ``timeout_s`` per test."""

    code: str
    fn_name: str | None
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    timeout_s: float


def coding_check(question: Mapping[str, Any], response: str, timeout_s: float) -> CodingCheck:
    """The check of ``response``'s program against all tests of ``question``, ``timeout_s`` each."""
    question_id = question.get("question_id")
    tests = load_tests(question)
    fn_name = function_name(question)
    if fn_name is not None:
        _check_functional_json(tests, question_id)
    code = full_program(question, extract_program(response))
    inputs = tuple(test.input for test in tests)
    return CodingCheck(code, fn_name, inputs, tuple(test.output for test in tests), timeout_s)


def run_budget_s(tests: int, timeout_s: float) -> float:
    """LiveCodeBench's wall-clock budget for a whole run: ``(timeout_s + 1) x tests + 5`` seconds."""
    return (timeout_s + 1.0) * tests + 5.0


def run_check(check: CodingCheck, session: Session) -> tuple[int, str | None]:
    """The number of tests passed in order, up to the first failure, and that failure (if any).

    ``session``'s calls should time out after ``check.timeout_s``.
    """
    inputs, outputs = list(check.inputs), list(check.outputs)
    if check.fn_name is None:
        return lcb_harness.run_stdin_tests(session, check.code, inputs, outputs)
    return lcb_harness.run_functional_tests(session, check.code, check.fn_name, inputs, outputs)


def passed_all(check: CodingCheck, verdict: tuple[int, str | None]) -> bool:
    """Whether ``verdict`` (of :func:`run_check`) passed every test of ``check``."""
    passed, failure = verdict
    return failure is None and passed == len(check.inputs)
