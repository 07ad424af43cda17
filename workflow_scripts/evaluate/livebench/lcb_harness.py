"""Test one LiveBench coding answer the way LiveCodeBench does; a standalone program for the sandbox.

``coding_tasks`` sends this file's source to the sandbox as the program, and the answer and its
tests on stdin (``main``). The semantics that decide scores are LiveCodeBench's ``run_test``
(livebench/lcb_runner): a prelude of star imports, tests in order up to the first failure,
``timeout_s`` seconds per test. Standard library only: it runs with ``python -I``.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import os
import signal
import sys
import types
from decimal import Decimal, InvalidOperation

# The prelude of LiveCodeBench's testing_util: these modules are star-imported, then imported by name.
STAR_IMPORTED = (
    "string re datetime collections heapq bisect copy math random statistics itertools functools "
    "operator io sys json builtins typing"
).split()
NAME_IMPORTED = (
    "string re datetime collections heapq bisect copy math random statistics itertools functools "
    "operator io sys json"
).split()
RECURSION_LIMIT = 50000
PRELUDE = (
    "".join(f"from {module} import *\n" for module in STAR_IMPORTED)
    + "".join(f"import {module}\n" for module in NAME_IMPORTED)
    + f"sys.setrecursionlimit({RECURSION_LIMIT})\n"
)
WRAPPER_NAME = "wrapped_function"
MAIN_GUARD = "__name__ == '__main__'"
# LiveCodeBench's evaluator lifts Python's cap on int-to-str conversion to this many digits.
INT_DIGITS = 50000


class TimeLimit(BaseException):
    """Raised in the answer's code when its time is up (a BaseException, so ``except Exception`` in
    the answer cannot swallow it)."""


def _raise_time_limit(signum: int, frame: types.FrameType | None) -> None:
    raise TimeLimit


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the block with ``TimeLimit`` after ``seconds`` of wall-clock time."""
    signal.signal(signal.SIGALRM, _raise_time_limit)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def unwrap_main_guard(code: str) -> str:
    """Replace a final ``if __name__ == '__main__':`` block by its body (code that does not parse is kept)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.If) and ast.unparse(last.test).strip() == MAIN_GUARD:
        return ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    return code


def wrap_in_function(code: str) -> str:
    """The prelude, the code's top-level imports, then every other statement as the body of
    ``wrapped_function()`` (code that does not parse is returned unchanged and fails to load)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    imports = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    others = [node for node in tree.body if not isinstance(node, ast.Import | ast.ImportFrom)]
    extra = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}
    function = ast.FunctionDef(
        name=WRAPPER_NAME,
        args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=others,
        decorator_list=[],
        returns=None,
        lineno=1,
        **extra,
    )
    return PRELUDE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)


def load_program(code: str, seconds: float) -> object:
    """Execute ``code`` as a module; an instance of its ``Solution`` class if the text defines one."""
    module = types.ModuleType("tmp_sol", "")
    with time_limit(seconds):
        exec(code, module.__dict__)
        if "class Solution" in code:
            return module.Solution()
    return module


def stripped_lines(text: str) -> list[str]:
    """The lines of ``text`` without surrounding whitespace (leading and trailing blank lines dropped)."""
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(item) for item in line.split()]
    except InvalidOperation:
        return None


def outputs_match(produced: str, expected: str) -> bool:
    """LiveCodeBench's stdout comparison: same number of stripped lines, each line equal as text or
    (whitespace-separated) as decimal numbers, so ``1.50`` matches ``1.5``."""
    produced_lines, expected_lines = stripped_lines(produced), stripped_lines(expected)
    if len(produced_lines) != len(expected_lines):
        return False
    for mine, theirs in zip(produced_lines, expected_lines, strict=True):
        if mine == theirs:
            continue
        mine_numbers, their_numbers = _decimals(mine), _decimals(theirs)
        if mine_numbers is None or their_numbers is None or mine_numbers != their_numbers:
            return False
    return True


def run_with_stdin(function: object, test_input: str, load_stdin: io.StringIO) -> str:
    """Call ``function()`` with stdin serving ``test_input``; what it printed to stdout.

    As under LiveCodeBench's patches: ``sys.stdin`` is a fresh stream of the input, ``open`` returns
    one, and the stream that was ``sys.stdin`` while the program loaded (bound by a hoisted
    ``from sys import stdin``) answers ``readline`` with the input's lines without their newline
    (``StopIteration`` after the last), ``readlines`` and ``read`` with the input.
    ``SystemExit`` ends the call normally, as LiveCodeBench allows ``exit()`` in stdin programs.
    """
    lines = iter(test_input.split("\n"))
    load_stdin.readline = lambda *args: next(lines)
    load_stdin.readlines = lambda *args: test_input.split("\n")
    load_stdin.read = lambda *args: test_input
    captured = io.StringIO()
    saved = sys.stdin, sys.stdout, builtins.open
    sys.stdin, sys.stdout = io.StringIO(test_input), captured
    builtins.open = lambda *args, **kwargs: io.StringIO(test_input)
    try:
        function()
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout, builtins.open = saved
        del load_stdin.readline, load_stdin.readlines, load_stdin.read
    return captured.getvalue()


def _failure(kind: str, index: int, error: BaseException | None = None) -> str:
    detail = f": {type(error).__name__}: {error}"[:300] if error is not None else ""
    return f"{kind} on test {index}{detail}"


def run_stdin_tests(
    code: str, inputs: list[str], outputs: list[str], seconds: float
) -> tuple[int, str | None]:
    """Run a stdin program on each test in order; the number passed and the first failure.

    As LiveCodeBench: a trailing ``if __name__ == '__main__':`` block is unwrapped,
    top-level statements other than imports become the body of one function, called once per test
    with ``sys.stdin`` (and ``open``) serving the test input and ``sys.stdout`` captured; outputs
    match when they have the same stripped lines, each equal as text or as a row of decimals.
    """
    load_stdin = io.StringIO("")
    saved_stdin, sys.stdin = sys.stdin, load_stdin
    try:
        program = load_program(wrap_in_function(unwrap_main_guard(code)), seconds)
        function = getattr(program, WRAPPER_NAME)
    except BaseException as error:
        return 0, _failure("load error", 0, error)
    finally:
        sys.stdin = saved_stdin
    for index, (test_input, expected) in enumerate(zip(inputs, outputs, strict=True)):
        try:
            with time_limit(seconds):
                produced = run_with_stdin(function, test_input, load_stdin)
        except TimeLimit as error:
            return index, _failure("time limit", index, error)
        except BaseException as error:
            return index, _failure("runtime error", index, error)
        if not outputs_match(produced, expected):
            return index, _failure("wrong answer", index)
    return len(inputs), None


def run_functional_tests(
    code: str, fn_name: str, inputs: list[str], outputs: list[str], seconds: float
) -> tuple[int, str | None]:
    """Call the answer's ``fn_name`` on each test in order; the number passed and the first failure.

    As LiveCodeBench: the named method of ``Solution()`` (or the module-level function) is
    called with one JSON value per input line; the result (a tuple as a list) must equal the JSON
    expected output.
    """
    try:
        program = load_program(PRELUDE + "\n\n" + code, seconds)
        method = getattr(program, fn_name)
        arguments = [[json.loads(line) for line in test_input.split("\n")] for test_input in inputs]
        expected = [json.loads(output) for output in outputs]
    except BaseException as error:
        return 0, _failure("load error", 0, error)
    for index, (args, wanted) in enumerate(zip(arguments, expected, strict=True)):
        try:
            with time_limit(seconds):
                result = method(*args)
        except TimeLimit as error:
            return index, _failure("time limit", index, error)
        except BaseException as error:
            return index, _failure("runtime error", index, error)
        if isinstance(result, tuple):
            result = list(result)
        if result != wanted:
            return index, _failure("wrong answer", index)
    return len(inputs), None


def main() -> None:
    """Read the job from stdin, run its tests, write the verdict line, exit at once.

    ``coding_tasks`` sends this file's source to the sandbox as the program to run, and the answer and
    its tests on stdin as one JSON object::

        {"code": str, "fn_name": str | null, "inputs": [str], "outputs": [str], "timeout_s": float,
         "token": str}

    It writes one JSON line, ``{"passed": k, "total": n, "failure": str | null, "token": str}``
    (the job's token, so the grader can tell its verdict from one the answer wrote): tests run in order
    and stop at the first failure, as in LiveCodeBench's ``run_test`` (livebench/lcb_runner).

    The answer's writes to the real stdout go to /dev/null, so only this program writes the verdict.
    """
    job = json.loads(sys.stdin.read())
    verdict_fd = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.set_int_max_str_digits(INT_DIGITS)
    if job["fn_name"] is None:
        passed, failure = run_stdin_tests(job["code"], job["inputs"], job["outputs"], job["timeout_s"])
    else:
        passed, failure = run_functional_tests(
            job["code"], job["fn_name"], job["inputs"], job["outputs"], job["timeout_s"]
        )
    verdict = {"passed": passed, "total": len(job["inputs"]), "failure": failure, "token": job["token"]}
    os.write(verdict_fd, (json.dumps(verdict) + "\n").encode("utf-8"))
    os._exit(0)


if __name__ == "__main__":
    main()
