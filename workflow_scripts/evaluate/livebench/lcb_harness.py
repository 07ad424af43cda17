"""Test one LiveBench coding answer the way LiveCodeBench does, deciding in the grader.

The semantics that decide scores are LiveCodeBench's ``run_test`` (livebench/lcb_runner): a
prelude of star imports, tests in order up to the first failure, ``timeout_s`` seconds per test.
The answer runs in the sandbox under ``call_server`` (a ``calls.Session``); the expected
outputs never leave the grader, where each output or return value is compared with them.
"""

from __future__ import annotations

import ast
import json
from decimal import Decimal, InvalidOperation

from workflow_scripts.evaluate.calls import CheckFailed, Remote, Session

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
MODULE = "tmp_sol"  # the module name LiveCodeBench loads an answer under
MAIN_GUARD = "__name__ == '__main__'"
# LiveCodeBench's evaluator lifts Python's cap on int-to-str conversion to this many digits.
INT_DIGITS = 50000


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


def _failure(kind: str, index: int, error: BaseException | None = None) -> str:
    detail = f": {type(error).__name__}: {error}"[:300] if error is not None else ""
    return f"{kind} on test {index}{detail}"


def _stopped(error: BaseException, index: int) -> str:
    """A failed call's verdict: a time limit if the program did not answer in time."""
    timed_out = isinstance(error, CheckFailed) and error.reason == "timeout"
    return _failure("time limit" if timed_out else "runtime error", index, error)


def run_stdin_tests(
    session: Session, code: str, inputs: list[str], outputs: list[str]
) -> tuple[int, str | None]:
    """Run a stdin program on each test in order; the number passed and the first failure.

    As LiveCodeBench: a trailing ``if __name__ == '__main__':`` block is unwrapped,
    top-level statements other than imports become the body of one function, called once per test
    with ``sys.stdin`` (and ``open``) serving the test input and ``sys.stdout`` captured
    (``call_server.call_with_stdin``); outputs match when they have the same stripped lines, each
    equal as text or as a row of decimals. Each load and test has the session's call timeout.
    """
    try:
        wrapped = wrap_in_function(unwrap_main_guard(code))
        found = session.load(wrapped, [WRAPPER_NAME], module=MODULE, stdin=True, int_digits=INT_DIGITS)
        if WRAPPER_NAME not in found:
            raise AttributeError(f"{WRAPPER_NAME} is not defined")
    except (Exception, CheckFailed) as error:
        return 0, _failure("load error", 0, error)
    for index, (test_input, expected) in enumerate(zip(inputs, outputs, strict=True)):
        try:
            produced = session.call_with_stdin(WRAPPER_NAME, test_input)
        except (Exception, CheckFailed) as error:
            return index, _stopped(error, index)
        if not isinstance(produced, str) or not outputs_match(produced, expected):
            return index, _failure("wrong answer", index)
    return len(inputs), None


def run_functional_tests(
    session: Session, code: str, fn_name: str, inputs: list[str], outputs: list[str]
) -> tuple[int, str | None]:
    """Call the answer's ``fn_name`` on each test in order; the number passed and the first failure.

    As LiveCodeBench: the named method of ``Solution()`` (if the code defines ``class Solution``)
    or the module-level function is called with one JSON value per input line; the result (a
    tuple as a list) must equal the JSON expected output. Each load and test has the session's
    call timeout.
    """
    try:
        arguments = [[json.loads(line) for line in test_input.split("\n")] for test_input in inputs]
        expected = [json.loads(output) for output in outputs]
        program = PRELUDE + "\n\n" + code
        found = session.load(program, [fn_name, "Solution"], module=MODULE, int_digits=INT_DIGITS)
        if "class Solution" in program:
            instance = Remote(session, "Solution")()
            if type(instance) is not Remote:
                raise TypeError("Solution() returned data, not an object")
            method = getattr(instance, fn_name)
        elif fn_name in found:
            method = Remote(session, fn_name)
        else:
            raise AttributeError(f"{fn_name} is not defined")
    except (Exception, CheckFailed) as error:
        return 0, _failure("load error", 0, error)
    for index, (args, wanted) in enumerate(zip(arguments, expected, strict=True)):
        try:
            result = method(*args)
        except (Exception, CheckFailed) as error:
            return index, _stopped(error, index)
        if isinstance(result, tuple):
            result = list(result)
        if result != wanted:
            return index, _failure("wrong answer", index)
    return len(inputs), None
