"""Tests run in the grader against a solution served from the sandbox (HumanEval, MBPP, LiveBench coding).

The solution runs in the sandbox under ``call_server``; the tests are dataset code and run here,
with the solution's names bound to :class:`Remote` proxies whose calls cross the sandbox's call
pipes. A check passes when the tests' code returns normally and the program answered every call:
whatever the solution does (print, exit, crash, hang, flood, write to any descriptor) can only
fail it, or return values. Replies are read by an unpickler that builds plain data and references
only, so no object of the solution's making, and no ``__eq__`` of its choosing, reaches the tests.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib
import io
import pickle
import symtable
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from types import FrameType
from typing import Any, NoReturn, TypeVar

from workflow_scripts.evaluate import call_server, sandbox
from workflow_scripts.evaluate.sandbox import Channel, Isolation, Job, Limits, ProgramStopped

T = TypeVar("T")
TESTS_FILE = "<tests>"  # the file name the tests' code is compiled under (the deadline traces it)
# The only globals a reply may name: value types call_server sends whose pickles need one.
REPLY_GLOBALS = frozenset({("builtins", "complex"), ("builtins", "range")})
# A reply once unpickled: no container reached twice, nesting within the server's own bound,
# and at most this many bytes of text and digits over all the places each value appears.
REPLY_DEPTH = call_server.MAX_DEPTH + 2
REPLY_EXPANDED_BYTES = 4 * sandbox.REPLY_BYTES
_CONTAINERS = (list, tuple, set, frozenset, dict)


class CheckFailed(BaseException):
    """The program can answer no more, or answered outside the protocol: the check fails.

    A ``BaseException``, so that the tests' ``except Exception`` cannot carry on past it.
    ``reason``: a :class:`~workflow_scripts.evaluate.sandbox.ProgramStopped` reason, or
    "protocol" (a reply that is not one of the server's) or "timeout" (the tests' own time).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RemoteError(Exception):
    """A call raised an exception that is not one of the builtin ``Exception`` classes."""


class Remote:
    """An object of the solution's, kept in the sandbox: call it, read its attributes, pass it back.

    Equal only to itself. Names beginning with ``__`` are not looked up in the sandbox, so no
    protocol of the tests' side (copying, iteration, comparison) reaches the solution's code.
    """

    __slots__ = ("_reference", "_session")

    def __init__(self, session: Session, reference: str | int) -> None:
        self._session = session
        self._reference = reference

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call(self._reference, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._session.attribute(self._reference, name)

    def __repr__(self) -> str:
        return f"<the solution's {self._reference!r}>"

    def __copy__(self) -> Remote:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Remote:
        return self


class Session:
    """Requests to one program under ``call_server``, each answered within ``call_timeout_s``
    (None: the run's own deadline only); the first failure ends the session."""

    def __init__(self, channel: Channel, call_timeout_s: float | None = None) -> None:
        self.channel = channel
        self.call_timeout_s = call_timeout_s
        self.failure: str | None = None
        # The tests' namespace: an instance of a class defined there is sent as the same-named
        # class of the solution's namespace (MBPP's test_setup_code defines classes both use).
        self.namespace: dict[str, Any] = {}

    def load(
        self,
        code: str,
        names: Sequence[str] = (),
        *,
        module: str = "__main__",
        stdin: bool = False,
        int_digits: int | None = None,
    ) -> dict[str, str | None]:
        """Execute ``code`` in the program as module ``module``; which of ``names`` it binds, each
        to the name of the module it is, or to None if it is anything else.

        ``stdin``: load it as a LiveCodeBench stdin program (see ``call_server.call_with_stdin``);
        ``int_digits``: the program's limit on int-to-str conversion.
        """
        options = {"name": module, "stdin": stdin, "int_digits": int_digits}
        found = self._request(("load", code, list(names), options), "loaded")
        if type(found) is not dict or not all(
            type(key) is str and (info is None or type(info) is str) for key, info in found.items()
        ):
            self._fail("protocol")
        return found

    def call(self, reference: str | int, args: tuple, kwargs: dict[str, Any]) -> Any:
        """The value of ``reference(*args, **kwargs)`` in the program (a name or a held object)."""
        return self._request(("call", reference, args, kwargs))

    def attribute(self, reference: str | int, name: str) -> Any:
        return self._request(("getattr", reference, name))

    def call_with_stdin(self, reference: str | int, text: str) -> Any:
        """What ``reference()`` prints with stdin serving ``text`` (LiveCodeBench's stdin programs)."""
        return self._request(("stdin_call", reference, text))

    def _request(self, message: tuple, expected: str = "value") -> Any:
        if self.failure is not None:
            raise CheckFailed(self.failure)
        buffer = io.BytesIO()
        _RequestPickler(buffer, self).dump(message)
        deadline = None if self.call_timeout_s is None else time.monotonic() + self.call_timeout_s
        try:
            data = self.channel.exchange(buffer.getvalue(), deadline)
        except ProgramStopped as stopped:
            self._fail(stopped.reason)
        try:
            reply = _ReplyUnpickler(io.BytesIO(data), self).load()
            check_tree(reply)
        except Exception:
            self._fail("protocol")
        if type(reply) is not tuple or not reply:
            self._fail("protocol")
        if reply[0] == "raised" and len(reply) == 3 and all(type(part) is str for part in reply[1:]):
            raise remote_exception(reply[1], reply[2])
        if reply[0] != expected or len(reply) != 2:
            self._fail("protocol")
        return reply[1]

    def _fail(self, reason: str) -> NoReturn:
        self.failure = reason
        raise CheckFailed(reason)


def remote_exception(name: str, message: str) -> Exception:
    """The exception a call raised in the program, as the builtin class of that name if it is an
    ``Exception`` one (so the tests can expect a ``ValueError``), else a :class:`RemoteError`."""
    cls = getattr(builtins, name, None) if name.isidentifier() else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        with contextlib.suppress(Exception):
            return cls(message)
    return RemoteError(f"{name}: {message}")


class _RequestPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, session: Session) -> None:
        super().__init__(file, protocol=call_server.PICKLE_PROTOCOL)
        self.session = session

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is Remote:
            if obj._session is not self.session:
                raise pickle.PicklingError("a reference of another program")
            return ("ref", obj._reference)
        cls = type(obj)
        if cls.__module__ == self.session.namespace.get("__name__") and (
            self.session.namespace.get(cls.__qualname__) is cls
        ):
            return ("instance", cls.__qualname__, dict(vars(obj)))
        return None


class _ReplyUnpickler(pickle.Unpickler):
    """Builds plain data and :class:`Remote` references; refuses every other global."""

    def __init__(self, file: io.BytesIO, session: Session) -> None:
        super().__init__(file)
        self.session = session

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in REPLY_GLOBALS:
            return getattr(builtins, name)
        raise pickle.UnpicklingError(f"a reply may not name {module}.{name}")

    def persistent_load(self, pid: Any) -> Remote:
        if type(pid) is tuple and len(pid) == 2 and pid[0] == "ref" and type(pid[1]) is int:
            return Remote(self.session, pid[1])
        raise pickle.UnpicklingError("not a reference")


def check_tree(value: object) -> None:
    """Raise ``ValueError`` unless ``value`` is a tree of bounded depth and expanded size.

    A pickle can reach one container from many places; comparing such a graph can take time
    exponential in its size, and a cyclic one recurses without end. Empty containers are exempt
    (the interpreter shares the empty tuple).
    """
    seen: set[int] = set()
    budget = REPLY_EXPANDED_BYTES
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        budget -= 1 + (len(item) if kind in (str, bytes, bytearray) else 0)
        budget -= item.bit_length() // 8 if kind is int else 0
        if budget < 0:
            raise ValueError("the reply is too large once expanded")
        if kind not in _CONTAINERS or not item:
            continue
        if id(item) in seen or depth >= REPLY_DEPTH:
            raise ValueError("the reply is not a tree of bounded depth")
        seen.add(id(item))
        children = [part for pair in item.items() for part in pair] if kind is dict else item
        stack.extend((child, depth + 1) for child in children)


@dataclass(frozen=True)
class TestProgram:
    """A solution and the dataset's tests for it.

    The grader runs ``definitions`` (helpers, imports, setup, the test function), binds the names
    in ``remote`` to the solution's, then runs ``body``; the check passes if that returns. A name
    the tests read but never bind is bound to the solution's object of that name if it defines
    one, except a module: a standard-library module the solution imported under its own name is
    imported here, any other is left unbound (so a test's ``math.isclose`` is the real one).
    """

    __test__ = False  # not a pytest test class

    solution: str  # the code the sandbox loads
    definitions: str
    body: str
    remote: tuple[str, ...] = ()


def free_names(source: str) -> set[str]:
    """The global names ``source`` reads but binds nowhere (nor with ``global``); builtins excluded."""
    top = symtable.symtable(source, TESTS_FILE, "exec")
    read: set[str] = set()
    bound: set[str] = set()
    tables = [top]
    while tables:
        table = tables.pop()
        for symbol in table.get_symbols():
            name = symbol.get_name()
            if table is top:
                if symbol.is_assigned() or symbol.is_imported():
                    bound.add(name)
            elif not symbol.is_global():
                continue
            elif symbol.is_declared_global() and symbol.is_assigned():
                bound.add(name)
            if symbol.is_referenced():
                read.add(name)
        tables.extend(table.get_children())
    return read - bound - set(dir(builtins))


def _bindings(session: Session, found: dict[str, str | None]) -> dict[str, Any]:
    """What each name the solution binds stands for in the tests (see :class:`TestProgram`)."""
    bindings: dict[str, Any] = {}
    for name, module in found.items():
        if module is None:
            bindings[name] = Remote(session, name)
        elif module == name and name in sys.stdlib_module_names:
            bindings[name] = importlib.import_module(name)
    return bindings


@contextlib.contextmanager
def deadline(until: float) -> Iterator[None]:
    """Raise :class:`CheckFailed` ("timeout") in the tests' own code (``TESTS_FILE``) once
    ``time.monotonic()`` passes ``until``; a wait on the program has that deadline already."""

    def each_line(frame: FrameType, event: str, arg: object) -> Any:
        if time.monotonic() > until:
            raise CheckFailed("timeout")
        return each_line

    def each_call(frame: FrameType, event: str, arg: object) -> Any:
        return each_line if frame.f_code.co_filename == TESTS_FILE else None

    previous = sys.gettrace()
    sys.settrace(each_call)
    try:
        yield
    finally:
        sys.settrace(previous)


def run_tests(session: Session, program: TestProgram) -> bool:
    """Load the solution, run the tests against it within the run's deadline; whether they passed."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    session.namespace = namespace
    try:
        free = free_names(f"{program.definitions}\n{program.body}")
        namespace.update(_bindings(session, session.load(program.solution, sorted(free))))
        with deadline(session.channel.deadline):
            exec(compile(program.definitions, TESTS_FILE, "exec"), namespace)
            namespace.update({name: Remote(session, name) for name in program.remote})
            exec(compile(program.body, TESTS_FILE, "exec"), namespace)
    except (Exception, CheckFailed):
        return False
    return session.failure is None


@functools.cache
def server_source() -> str:
    """The source of ``call_server``, the program each session runs in the sandbox."""
    return resources.files(__package__).joinpath("call_server.py").read_text(encoding="utf-8")


def converse_all(
    talks: Sequence[Callable[[Session], T]],
    limits: Limits,
    workers: int,
    *,
    isolation: Isolation | None = None,
    call_timeout_s: float | None = None,
) -> list[T]:
    """``talk(session)`` for each talk, each with a program of its own under ``call_server`` in
    the sandbox (``limits``), on ``workers`` threads; order preserved."""
    job = Job(server_source())
    jobs = [(job, functools.partial(_talk, talk, call_timeout_s)) for talk in talks]
    return sandbox.converse_all(jobs, limits, workers, isolation=isolation)


def _talk(talk: Callable[[Session], T], call_timeout_s: float | None, channel: Channel) -> T:
    return talk(Session(channel, call_timeout_s))


def check_all(
    programs: Sequence[TestProgram], limits: Limits, workers: int, *, isolation: Isolation | None = None
) -> list[bool]:
    """Whether each solution passes its tests (:func:`run_tests`), ``limits.timeout_s`` for each."""
    talks = [functools.partial(_run, program) for program in programs]
    return converse_all(talks, limits, workers, isolation=isolation)


def _run(program: TestProgram, session: Session) -> bool:
    return run_tests(session, program)
