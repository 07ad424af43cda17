"""Calls from tests in the grader into a solution served from the sandbox (``calls``, ``call_server``).

Values cross the pipe as plain data or references, never as objects of the solution's classes;
replies that are not the server's (other globals, shared or cyclic containers, junk) fail the
session; the tests' own loops stop at the run's deadline. Sessions run in the real sandbox.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from workflow_scripts.evaluate import call_server, calls, sandbox, sandbox_launcher
from workflow_scripts.evaluate.calls import (
    CheckFailed,
    Remote,
    RemoteError,
    Session,
    TestProgram,
    check_all,
    check_tree,
    converse_all,
    free_names,
    remote_exception,
)
from workflow_scripts.evaluate.sandbox import IsolationUnavailable, Limits, require_isolation

LIMITS = Limits(timeout_s=5.0, memory_mb=1024)


@pytest.fixture(scope="module", autouse=True)
def sandbox_isolates() -> None:
    try:
        require_isolation(allow_unisolated=False)
    except IsolationUnavailable as error:
        pytest.skip(f"solutions run only in an isolating sandbox: {error}")


def session_with(code: str, talk: Callable[[Session], Any], limits: Limits = LIMITS, **load: Any) -> Any:
    """``talk(session)`` after loading ``code`` into a fresh served program."""

    def loaded(session: Session) -> Any:
        session.load(code, **load)
        return talk(session)

    return converse_all([loaded], limits, 1)[0]


VALUES = """
import collections, numpy
Point = collections.namedtuple("Point", "x y")
class Small(int):
    def __eq__(self, other):
        return True
def values():
    return {
        "floats": [1.5, float("nan"), float("inf"), -float("inf"), -0.0],
        "tuple": (1, "a", (2.0, None)),
        "nested": [[1, [2, [3, []]]], {"k": [True, False]}],
        "none": None,
        "set": {1, 2}, "frozenset": frozenset({"x"}), "complex": 1 - 2j,
        "bytes": b"\\x00\\xff", "bytearray": bytearray(b"ab"), "range": range(1, 7, 2), "big": 3 ** 400,
        "namedtuple": Point(1, 2), "counter": collections.Counter("aab"),
        "ordered": collections.OrderedDict(b=1, a=2), "small": Small(5),
        "numpy_scalar": numpy.float64(0.25), "numpy_array": numpy.arange(6).reshape(2, 3),
    }
"""


def test_values_cross_as_plain_builtins():
    got = session_with(VALUES, lambda session: Remote(session, "values")())
    floats = got["floats"]
    assert floats[0] == 1.5 and math.isnan(floats[1]) and floats[2:4] == [math.inf, -math.inf]
    assert math.copysign(1.0, floats[4]) == -1.0
    assert got["tuple"] == (1, "a", (2.0, None)) and type(got["tuple"][2]) is tuple
    assert got["nested"] == [[1, [2, [3, []]]], {"k": [True, False]}] and got["none"] is None
    assert (got["set"], got["frozenset"], got["complex"]) == ({1, 2}, frozenset({"x"}), 1 - 2j)
    assert (got["bytes"], got["bytearray"], got["range"], got["big"]) == (
        b"\x00\xff",
        bytearray(b"ab"),
        range(1, 7, 2),
        3**400,
    )
    assert type(got["namedtuple"]) is tuple and got["namedtuple"] == (1, 2)
    assert type(got["counter"]) is dict and got["counter"] == {"a": 2, "b": 1}
    assert type(got["ordered"]) is dict and list(got["ordered"]) == ["b", "a"]
    assert type(got["small"]) is int and got["small"] == 5 and got["small"] != 6  # the base value only
    assert type(got["numpy_scalar"]) is float and got["numpy_array"] == [[0, 1, 2], [3, 4, 5]]


OBJECTS = """
class Box:
    def __init__(self, size):
        self.size = size
    def grow(self, by):
        self.size += by
        return self
    def __eq__(self, other):
        return True
    def __len__(self):
        return self.size
def make(size):
    return Box(size)
def measure(box):
    return box.size
def numbers():
    for n in range(3):
        yield n
"""


def test_other_objects_are_references_equal_only_to_themselves():
    def talk(session: Session) -> None:
        make, measure = Remote(session, "make"), Remote(session, "measure")
        box, other = make(3), make(3)
        assert type(box) is Remote and box == box and box != other and box != 3
        assert box.size == 3 and measure(box.grow(4)) == 7  # attributes, methods, passed back
        assert box.grow(1) is not box and measure(box) == 8  # a new reference to the same object
        assert type(Remote(session, "numbers")()) is Remote
        with pytest.raises(AttributeError):
            box.__len__  # noqa: B018 (no protocol reaches the solution's code)
        with pytest.raises(TypeError):
            len(box)
        assert session.failure is None

    session_with(OBJECTS, talk)


RAISING = """
class Custom(Exception):
    pass
def fails(kind):
    if kind == "value":
        raise ValueError("bad value")
    if kind == "custom":
        raise Custom("mine")
    raise SystemExit(0)
def fine():
    return 1
"""


def test_exceptions_come_back_as_builtin_classes_or_remote_errors():
    def talk(session: Session) -> list[str]:
        fails = Remote(session, "fails")
        with pytest.raises(ValueError, match="bad value"):
            fails("value")
        with pytest.raises(RemoteError, match="Custom: mine"):
            fails("custom")
        with pytest.raises(RemoteError, match="SystemExit"):
            fails("exit")
        with pytest.raises(NameError):
            Remote(session, "missing")()
        return Remote(session, "fine")()

    assert session_with(RAISING, talk) == 1


def test_remote_exception_names_only_builtin_exception_classes():
    assert type(remote_exception("KeyError", "k")) is KeyError
    assert type(remote_exception("KeyboardInterrupt", "")) is RemoteError  # not an Exception class
    assert type(remote_exception("os.system", "")) is RemoteError
    assert type(remote_exception("UnicodeDecodeError", "x")) is RemoteError  # needs other arguments


class _RunsCommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True


def _unpickle_reply(data: bytes) -> Any:
    return calls._ReplyUnpickler(io.BytesIO(data), session=None).load()  # type: ignore[arg-type]


def test_a_reply_naming_any_other_global_is_refused_before_it_runs(tmp_path: Path):
    marker = tmp_path / "ran"
    for value in (_RunsCommand(marker), _AlwaysEqual(), print):
        with pytest.raises(pickle.UnpicklingError, match="may not name"):
            _unpickle_reply(pickle.dumps(("value", value)))
    assert not marker.exists()
    assert pickle.loads(pickle.dumps(_RunsCommand(marker))) == 0 and marker.exists()  # a real exploit
    assert _unpickle_reply(pickle.dumps(("value", [1 + 1j, range(3)]))) == ("value", [1 + 1j, range(3)])


def test_replies_must_be_trees_of_bounded_size():
    shared = [1, 2]
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    deep: list[Any] = []
    for _ in range(calls.REPLY_DEPTH + 1):
        deep = [deep]
    big = "x" * (1 << 20)
    for value in ([shared, shared], cyclic, deep, [big] * (calls.REPLY_EXPANDED_BYTES // len(big) + 1)):
        with pytest.raises(ValueError):
            check_tree(_unpickle_reply(pickle.dumps(value)))
    check_tree(_unpickle_reply(pickle.dumps([(), (), [[1], [1]], {"a": [2]}, [big] * 4])))


def test_free_names_are_read_and_never_bound():
    source = (
        "import math\nfrom typing import List\ndef helper(x):\n    return math.pow(x, 2)\n"
        "def check(candidate):\n    global seen\n    seen = candidate(helper(2))\n"
        "    assert other(seen) and [q for q in range(3)]\n"
        "assert solve(3) == len(str(sqrt))\n"
    )
    assert free_names(source) == {"other", "solve", "sqrt"}


def test_the_solutions_stdlib_modules_are_the_graders_own():
    """A test's ``math.isclose`` is the real one even where the solution binds ``math`` to a fake."""
    honest = "import math\ndef hyp(a, b):\n    return math.sqrt(a * a + b * b)\n"
    faking = (
        "import types\nmath = types.ModuleType('math')\nmath.isclose = lambda *args, **kwargs: True\n"
        "def hyp(a, b):\n    return 0.0\n"
    )
    aliased = "import math as m\ndef hyp(a, b):\n    return m.sqrt(a * a + b * b)\n"  # no math for the tests
    programs = [
        TestProgram(solution, "", "assert math.isclose(hyp(3, 4), 5.0)\n")
        for solution in (honest, faking, aliased)
    ]
    assert check_all(programs, LIMITS, 2) == [True, False, False]


@pytest.mark.slow
def test_the_tests_own_loop_stops_at_the_deadline():
    limits = Limits(timeout_s=1.5, memory_mb=1024)
    program = TestProgram("def f():\n    return 10 ** 12\n", "", "for _ in range(f()):\n    pass\n")
    start = time.monotonic()
    assert check_all([program], limits, 1) == [False]
    assert time.monotonic() - start < limits.timeout_s + 15  # slack for a loaded machine; the loop runs hours


@pytest.mark.slow
def test_a_reply_that_is_not_the_servers_fails_the_session():
    """A program answering with junk, a well-formed pickle of the wrong shape, or nothing."""
    junk = (
        "import os, struct\nos.read(3, 1 << 16)\nos.write(4, struct.pack('>Q', 5) + b'junk!')\n"
        "os.read(3, 1)\n"
    )
    shape = (
        "import os, pickle, struct\nos.read(3, 1 << 16)\ndata = pickle.dumps(('value', 1, 2))\n"
        "os.write(4, struct.pack('>Q', len(data)) + data)\nos.read(3, 1)\n"
    )
    silent = "import time\ntime.sleep(30)\n"
    reasons = []
    for source in (junk, shape, silent):

        def talk(session: Session) -> str | None:
            with pytest.raises(CheckFailed):
                session.call("f", (), {})
            with pytest.raises(CheckFailed):  # and stays failed
                session.call("f", (), {})
            return session.failure

        jobs = [(sandbox.Job(source), lambda channel: talk(Session(channel, call_timeout_s=1.0)))]
        reasons += sandbox.converse_all(jobs, LIMITS, 1)
    assert reasons == ["protocol", "protocol", "timeout"]


def test_server_constants_match_the_sandboxs():
    assert call_server.CALL_FDS == sandbox_launcher.CALL_FDS
    assert call_server.MESSAGE_HEADER.format == sandbox.MESSAGE_HEADER.format
