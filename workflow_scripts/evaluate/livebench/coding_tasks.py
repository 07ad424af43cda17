"""LiveBench Coding scorer (LCB_generation and coding_completion): the answer must pass every test.

Re-implements ``LCB_generation_process_results`` (livebench/process_results/coding) with
LiveCodeBench's test runner: the program is the last fenced block of the response (LiveBench's
``extract_code``), prefixed with the question's ``partial_solution`` for completion questions
unless the answer already starts with it, and it scores 1 only if it passes all public and
private tests. The tests run inside the sandbox: ``lcb_harness.py`` is the program, the answer
and tests its stdin, with ``timeout_s`` per test (LiveBench uses 6 s, the sandbox default) and
LiveCodeBench's global budget of ``(timeout_s + 1) x tests + 5`` seconds for the whole run
(``scoring.score_many`` gives each run of a batch the largest budget in it; a program past its
own budget is still stopped by the per-test limit, so only a hang inside one C call runs longer).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from workflow_scripts.evaluate.livebench.testcases import TestCase, TestCaseError, function_name, load_tests
from workflow_scripts.evaluate.sandbox import Job, Outcome

FENCE = "```"
HARNESS_PACKAGE = "workflow_scripts.evaluate.livebench"
HARNESS_FILE = "lcb_harness.py"


@cache
def harness_source() -> str:
    """The source of the test-running program sent to the sandbox."""
    return (resources.files(HARNESS_PACKAGE) / HARNESS_FILE).read_text(encoding="utf-8")


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
    """The sandbox job that tests one answer, how many tests it must pass, and the run's token.

    The harness echoes ``token`` (random per run, sent on stdin with the tests) in its verdict,
    so a line the answer writes to the harness's verdict descriptor before exiting is no verdict.
    """

    job: Job
    tests: int
    token: str


def coding_check(question: Mapping[str, Any], response: str, timeout_s: float) -> CodingCheck:
    """The job running ``response``'s program against all tests of ``question``, ``timeout_s`` each."""
    question_id = question.get("question_id")
    tests = load_tests(question)
    fn_name = function_name(question)
    if fn_name is not None:
        _check_functional_json(tests, question_id)
    payload = {
        "code": full_program(question, extract_program(response)),
        "fn_name": fn_name,
        "inputs": [test.input for test in tests],
        "outputs": [test.output for test in tests],
        "timeout_s": timeout_s,
        "token": secrets.token_hex(16),
    }
    job = Job(source=harness_source(), stdin=json.dumps(payload))
    return CodingCheck(job, len(tests), payload["token"])


def run_budget_s(tests: int, timeout_s: float) -> float:
    """LiveCodeBench's wall-clock budget for a whole run: ``(timeout_s + 1) x tests + 5`` seconds."""
    return (timeout_s + 1.0) * tests + 5.0


def passed_all(outcome: Outcome, check: CodingCheck) -> bool:
    """Whether the harness's verdict (the last line of its stdout) reports all tests passed.

    A run that wrote no verdict of this run (killed, timed out, crashed, exited early, or a
    verdict without the run's token) has failed.
    """
    lines = outcome.stdout.strip().splitlines()
    if not lines:
        return False
    try:
        verdict = json.loads(lines[-1])
    except json.JSONDecodeError:
        return False
    return (
        isinstance(verdict, dict)
        and verdict.get("token") == check.token
        and verdict.get("total") == check.tests
        and verdict.get("passed") == check.tests
    )
