"""Serve calls into a solution's code: the program the sandbox runs for graded code; it decides nothing.

The grader (``calls``) sends the solution's source, then calls, each a pickled message on
``CALL_FDS[0]``; this program executes the source in a fresh namespace and answers each message
on ``CALL_FDS[1]`` with the value returned or the exception raised. It sends plain data only
(``plain``): any other object stays here and goes as a numbered reference, which later messages
may pass back or call. Whether the solution passes is decided by the tests, which run in the
grader on these values; the solution may take this program over, and gains no more than the
values it could return anyway. Standard library only: the sandbox runs this file by itself.
"""

from __future__ import annotations

import builtins
import io
import os
import pickle
import struct
import sys
import types
from collections.abc import Callable
from typing import Any

CALL_FDS = (3, 4)  # sandbox_launcher.CALL_FDS: messages in, replies out
MESSAGE_HEADER = struct.Struct(">Q")  # sandbox.MESSAGE_HEADER: the length of the message after it
PICKLE_PROTOCOL = 5
# Nesting deeper than this is not sent as data: the rest goes as a reference (a cyclic list ends so).
MAX_DEPTH = 200
# Sent as themselves; subclasses of these (and of the containers) are sent as the base type.
ATOMS = (type(None), bool, int, float, complex, str, bytes, bytearray, range)
CONTAINERS = (list, tuple, set, frozenset)


class Held:
    """A reference to an object kept in this program, sent as its number."""

    __slots__ = ("number",)

    def __init__(self, number: int) -> None:
        self.number = number


class Server:
    """The solution's namespace, the objects sent as references, and the stream its load read."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {}
        self.held: list[object] = []
        self.load_stdin: io.StringIO | None = None

    def answer(self, message: bytes) -> bytes:
        """The pickled reply to one pickled request: ("value", v), ("loaded", names) or
        ("raised", exception type name, message)."""
        try:
            kind, *arguments = _RequestUnpickler(io.BytesIO(message), self).load()
            reply = getattr(self, f"_{kind}")(*arguments)
            if reply[0] == "value":
                reply = ("value", plain(reply[1], self))
        except BaseException as error:  # the solution's failure is the grader's to judge
            reply = ("raised", type(error).__name__, _text(error))
        return self._dumps(reply)

    def _dumps(self, reply: tuple) -> bytes:
        buffer = io.BytesIO()
        try:
            _ReplyPickler(buffer).dump(reply)
        except BaseException as error:
            buffer = io.BytesIO()
            _ReplyPickler(buffer).dump(("raised", type(error).__name__, _text(error)))
        return buffer.getvalue()

    def _load(self, code: str, names: list[str], options: dict[str, Any]) -> tuple:
        """Execute ``code`` as a module named ``options["name"]``; report which of ``names`` it binds
        (to a module: its name; else None).

        ``options["stdin"]``: ``sys.stdin`` is an empty stream while it loads, kept for
        :meth:`_stdin_call` (LiveCodeBench's stdin programs); ``options["int_digits"]``: the
        interpreter's limit on int-to-str conversion.
        """
        if options.get("int_digits"):
            sys.set_int_max_str_digits(options["int_digits"])
        module = types.ModuleType(options.get("name", "__main__"))
        self.namespace = vars(module)
        if module.__name__ == "__main__":  # as when the solution was the program itself
            sys.modules["__main__"] = module
        saved = sys.stdin
        if options.get("stdin"):
            self.load_stdin = sys.stdin = io.StringIO("")
        try:
            exec(compile(code, "<solution>", "exec"), self.namespace)
        finally:
            sys.stdin = saved
        found = {}
        for name in names:
            if name in self.namespace:
                value = self.namespace[name]
                found[name] = value.__name__ if isinstance(value, types.ModuleType) else None
        return ("loaded", found)

    def _call(self, reference: str | int, args: tuple, kwargs: dict[str, Any]) -> tuple:
        return ("value", self.resolve(reference)(*args, **kwargs))

    def _getattr(self, reference: str | int, name: str) -> tuple:
        return ("value", getattr(self.resolve(reference), name))

    def _stdin_call(self, reference: str | int, text: str) -> tuple:
        return ("value", call_with_stdin(self.resolve(reference), text, self.load_stdin or io.StringIO("")))

    def resolve(self, reference: str | int) -> Any:
        """A held object by number, or a name of the solution's namespace."""
        if isinstance(reference, int):
            return self.held[reference]
        if reference not in self.namespace:
            raise NameError(f"name {reference!r} is not defined")
        return self.namespace[reference]

    def hold(self, value: object) -> Held:
        self.held.append(value)
        return Held(len(self.held) - 1)


def call_with_stdin(function: Callable[[], object], text: str, load_stdin: io.StringIO) -> str:
    """Call ``function()`` with stdin serving ``text``; what it printed to stdout.

    As under LiveCodeBench's patches: ``sys.stdin`` is a fresh stream of the input, ``open`` returns
    one, and the stream that was ``sys.stdin`` while the program loaded (bound by a hoisted
    ``from sys import stdin``) answers ``readline`` with the input's lines without their newline
    (``StopIteration`` after the last), ``readlines`` and ``read`` with the input.
    ``SystemExit`` ends the call normally, as LiveCodeBench allows ``exit()`` in stdin programs.
    """
    lines = iter(text.split("\n"))
    load_stdin.readline = lambda *args: next(lines)
    load_stdin.readlines = lambda *args: text.split("\n")
    load_stdin.read = lambda *args: text
    captured = io.StringIO()
    saved = sys.stdin, sys.stdout, builtins.open
    sys.stdin, sys.stdout = io.StringIO(text), captured
    builtins.open = lambda *args, **kwargs: io.StringIO(text)
    try:
        function()
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout, builtins.open = saved
        del load_stdin.readline, load_stdin.readlines, load_stdin.read
    return captured.getvalue()


def plain(value: object, server: Server, depth: int = 0) -> object:
    """``value`` as plain data: atoms, lists, tuples, sets, frozensets and dicts of plain data,
    NumPy values by ``tolist()``, and a :class:`Held` reference for anything else."""
    kind = type(value)
    if kind in ATOMS:
        return value
    if depth > MAX_DEPTH:
        return server.hold(value)
    for base in ATOMS[2:]:
        if isinstance(value, base):
            return base(value)
    for base in CONTAINERS:
        if isinstance(value, base):
            return base(plain(item, server, depth + 1) for item in value)
    if isinstance(value, dict):
        return {plain(k, server, depth + 1): plain(v, server, depth + 1) for k, v in value.items()}
    if kind.__module__ == "numpy" and hasattr(value, "tolist"):
        return plain(value.tolist(), server, depth + 1)
    return server.hold(value)


class _RequestUnpickler(pickle.Unpickler):
    """Reads the grader's messages: references to held objects, and instances of the tests' classes
    rebuilt as the same-named class of the solution's namespace."""

    def __init__(self, file: io.BytesIO, server: Server) -> None:
        super().__init__(file)
        self.server = server

    def persistent_load(self, pid: Any) -> object:
        if pid[0] == "ref":
            return self.server.resolve(pid[1])
        _, name, state = pid
        cls = self.server.namespace[name]
        instance = cls.__new__(cls)
        instance.__dict__.update(state)
        return instance


class _ReplyPickler(pickle.Pickler):
    """Pickles a reply whose value is first made plain; references go as ("ref", number)."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=PICKLE_PROTOCOL)

    def persistent_id(self, obj: Any) -> Any:
        return ("ref", obj.number) if type(obj) is Held else None


def _text(error: BaseException) -> str:
    try:
        return str(error)[:1000]
    except BaseException:
        return "<unprintable>"


def read_message(fd: int) -> bytes | None:
    """One message from ``fd``, None at the end of the stream."""
    header = _read_exactly(fd, MESSAGE_HEADER.size)
    if header is None:
        return None
    return _read_exactly(fd, MESSAGE_HEADER.unpack(header)[0])


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def write_message(fd: int, payload: bytes) -> None:
    view = memoryview(MESSAGE_HEADER.pack(len(payload)) + payload)
    while view:
        view = view[os.write(fd, view) :]


def main() -> None:
    """Answer messages until the grader closes the pipe. The program's stdout is /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    server = Server()
    while (message := read_message(CALL_FDS[0])) is not None:
        write_message(CALL_FDS[1], server.answer(message))
    os._exit(0)


if __name__ == "__main__":
    main()
