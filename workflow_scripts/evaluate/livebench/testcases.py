"""Test cases of LiveBench coding questions, decoded without trusting the pickle.

The hub stores ``public_test_cases`` as a JSON string and ``private_test_cases`` as
base64 -> zlib -> pickle of a JSON string (LiveCodeBench's encoding). Unpickling untrusted bytes
can run arbitrary code, so the pickle is read by an unpickler that refuses every global: only
plain values (str, int, list, dict, ...) can come out of it. The result is then checked to be a
list of ``{input, output, testtype}`` objects with string fields; anything else raises
``TestCaseError`` naming the question.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TEST_FIELDS = frozenset({"input", "output", "testtype"})
TEST_TYPES = frozenset({"stdin", "functional"})


class TestCaseError(ValueError):
    """Test cases that cannot be decoded or do not have the expected structure."""

    __test__ = False  # not a pytest test class


@dataclass(frozen=True)
class TestCase:
    """One test: the input (stdin text, or one JSON argument per line), the expected output, its type."""

    __test__ = False  # not a pytest test class

    input: str
    output: str
    testtype: str


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler for plain data: every global (class, function, module attribute) is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name} from a test-case pickle")


def plain_unpickle(data: bytes) -> Any:
    """Unpickle ``data`` allowing no globals, so no object's code can run while loading."""
    return _PlainUnpickler(io.BytesIO(data)).load()


def validate_cases(value: Any, question_id: str, field: str) -> list[TestCase]:
    """``value`` as test cases: a list of objects with exactly string ``input``, ``output``, ``testtype``."""
    where = f"question {question_id!r} {field}"
    if not isinstance(value, list):
        raise TestCaseError(f"{where}: expected a list of test cases, got {type(value).__name__}")
    cases = []
    for index, case in enumerate(value):
        if not isinstance(case, dict) or set(case) != TEST_FIELDS:
            keys = sorted(case) if isinstance(case, dict) else type(case).__name__
            raise TestCaseError(f"{where}[{index}]: expected keys {sorted(TEST_FIELDS)}, got {keys}")
        if not all(isinstance(case[key], str) for key in TEST_FIELDS):
            raise TestCaseError(f"{where}[{index}]: input, output and testtype must be strings")
        if case["testtype"] not in TEST_TYPES:
            raise TestCaseError(f"{where}[{index}]: unknown testtype {case['testtype']!r}")
        cases.append(TestCase(case["input"], case["output"], case["testtype"]))
    return cases


def _parse_json(text: str, question_id: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise TestCaseError(f"question {question_id!r} {field}: not valid JSON ({error})") from error


def decode_public(raw: Any, question_id: str) -> list[TestCase]:
    """The public test cases: a JSON string of the case list."""
    if not isinstance(raw, str):
        raise TestCaseError(f"question {question_id!r} public_test_cases: expected a JSON string")
    return validate_cases(
        _parse_json(raw, question_id, "public_test_cases"), question_id, "public_test_cases"
    )


def decode_private(raw: Any, question_id: str) -> list[TestCase]:
    """The private test cases: plain JSON if it parses (as LiveBench tries first), else
    base64 -> zlib -> pickle (globals refused) of a JSON string (or of the list itself)."""
    field = "private_test_cases"
    if not isinstance(raw, str):
        raise TestCaseError(f"question {question_id!r} {field}: expected a string")
    try:
        return validate_cases(json.loads(raw), question_id, field)
    except json.JSONDecodeError:
        pass
    try:
        data = zlib.decompress(base64.b64decode(raw.encode("ascii")))
    except (binascii.Error, UnicodeEncodeError, zlib.error) as error:
        raise TestCaseError(f"question {question_id!r} {field}: not base64/zlib data ({error})") from error
    try:
        value = plain_unpickle(data)
    except Exception as error:  # a malformed pickle can fail in many ways; all mean "rejected"
        raise TestCaseError(f"question {question_id!r} {field}: rejected pickle ({error})") from error
    if isinstance(value, str):
        value = _parse_json(value, question_id, field)
    return validate_cases(value, question_id, field)


def function_name(question: Mapping[str, Any]) -> str | None:
    """``original_json.metadata.func_name`` (each level a mapping or a JSON string), or None (stdin)."""
    question_id = question.get("question_id")
    original = question.get("original_json")
    if isinstance(original, str):
        original = _parse_json(original, question_id, "original_json")
    if not isinstance(original, Mapping) or "metadata" not in original:
        raise TestCaseError(f"question {question_id!r}: original_json.metadata is missing")
    metadata = original["metadata"]
    if isinstance(metadata, str):
        metadata = _parse_json(metadata, question_id, "original_json.metadata")
    if not isinstance(metadata, Mapping):
        raise TestCaseError(f"question {question_id!r} original_json.metadata: expected an object")
    name = metadata.get("func_name")
    if name is not None and not (isinstance(name, str) and name.isidentifier()):
        raise TestCaseError(f"question {question_id!r}: func_name {name!r} is not a Python identifier")
    return name


def load_tests(question: Mapping[str, Any]) -> list[TestCase]:
    """All tests of a coding question, public first then private (LiveBench runs both)."""
    question_id = question.get("question_id")
    missing = [key for key in ("public_test_cases", "private_test_cases") if key not in question]
    if missing:
        raise TestCaseError(f"question {question_id!r}: missing {missing}")
    tests = decode_public(question["public_test_cases"], question_id) + decode_private(
        question["private_test_cases"], question_id
    )
    if not tests:
        raise TestCaseError(f"question {question_id!r}: no test cases")
    return tests
