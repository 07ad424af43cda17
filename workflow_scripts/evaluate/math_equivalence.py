"""Whether an extracted math answer equals the gold answer (GSM8K, MATH-500, LiveBench Math).

Two checks run on every pair. math-verify parses both sides to SymPy and compares them
symbolically; it decides whenever it returns a verdict. When it cannot (a side does not parse, it
errors, or it times out), normalised string matching decides: the Hendrycks-MATH normalisation
plus GSM8K's numeric clean-up, with exact rationals compared by value (``normalize_answer``).

math-verify enforces its timeouts with ``signal.alarm``, which only works in the main thread of a
process, and a pathological expression can still hang SymPy. ``MathChecker`` therefore runs it in
one long-lived worker process, streams pairs to it in batches, and waits for each verdict with its
own timeout; on expiry the worker is killed and restarted and that pair falls back to normalised
matching. The worker is forked from multiprocessing's fork server, a fresh interpreter that imports
this module (math-verify, SymPy) and grades one pair once per grading process (``math_warmup``): no
threads or locks of the caller's are inherited, and a start or restart costs a fork, not that again.
"""

from __future__ import annotations

import logging
import multiprocessing
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import TracebackType

from math_verify import parse, verify
from math_verify.errors import TimeoutException

from workflow_scripts.evaluate.extraction import drop_thousands_commas, read_braced

logger = logging.getLogger(__name__)

Compare = Callable[[str, str], bool | None]

# math-verify's own per-operation alarm inside the worker (whole seconds, as signal.alarm needs).
MATH_VERIFY_TIMEOUT_S = 5
WORKER_START_TIMEOUT_S = 120.0
READY = "ready"

SPACING_COMMANDS = re.compile(r"\\(?:[!,:; ]|q?quad(?![A-Za-z]))|\\displaystyle(?![A-Za-z])")
LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])")
SMALL_FRACTIONS = re.compile(r"\\[dt]frac(?![A-Za-z])")
DEGREES = re.compile(r"\^\s*(?:\{\s*\\circ\s*\}|\\circ(?![A-Za-z]))|°")
TEXT_COMMAND = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mbox|mathrm|mathbf)(?![A-Za-z])\s*(?=\{)"
)
# A unit word: letters, spaces and a few unit punctuation marks ("cm", " square feet", "in.").
UNIT_WORDS = re.compile(r"[A-Za-z .'/-]+")
UNIT_POWER = re.compile(r"\^(?:\d|\{\d\})$")
ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?=(?!=)")
BARE_DECIMAL = re.compile(r"(?<![\d}])\.(?=\d)")
INTEGER_OR_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
THOUSANDS_NUMBER = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
SLASH_FRACTION = re.compile(r"([+-]?\d+)/(\d+)")
# The longest root index read (``\\sqrt[n]``): brackets not closed within it are left as written.
ROOT_INDEX_CHARS = 64
LATEX_FRACTION = re.compile(r"([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}")


@dataclass(frozen=True)
class Verdict:
    """The grade of one (gold, predicted) pair and which check decided it.

    ``method`` is ``"math_verify"`` when math-verify returned a verdict, else ``"normalized"``;
    ``verify_match`` is None when math-verify did not (no parse, error, timeout, no prediction).
    """

    correct: bool
    method: str
    verify_match: bool | None
    normalized_match: bool


def _unwrap_text(text: str) -> str:
    """Replace ``\\text{...}``-like wrappers by their content (``\\text{Evelyn}`` -> ``Evelyn``)."""
    out: list[str] = []
    position = 0
    for match in TEXT_COMMAND.finditer(text):
        if match.start() < position:
            continue
        group = read_braced(text, match.end())
        if group is None:
            break
        out.append(text[position : match.start()] + group[0])
        position = group[1]
    out.append(text[position:])
    return "".join(out)


def _drop_trailing_units(text: str) -> str:
    """Drop a trailing unit in a text wrapper (``5\\text{ cm}^2`` -> ``5``), as Hendrycks MATH does.

    Only a wrapper holding unit-like words and following some content counts; an answer that is
    all text (``\\text{Evelyn}``) is kept.
    """
    stripped = UNIT_POWER.sub("", text.rstrip()).rstrip()
    if not stripped.endswith("}"):
        return text
    for match in reversed(list(TEXT_COMMAND.finditer(stripped))):
        group = read_braced(stripped, match.end())
        if group is None or group[1] != len(stripped):
            continue
        head = stripped[: match.start()].strip()
        if head and UNIT_WORDS.fullmatch(group[0]):
            return head
        return text
    return text


def _argument(text: str, start: int) -> tuple[str, int] | None:
    """One macro argument at ``start`` (spaces skipped): a brace group, a command or one character."""
    while start < len(text) and text[start].isspace():
        start += 1
    if start >= len(text):
        return None
    if text[start] == "{":
        return read_braced(text, start)
    if text[start] == "\\":
        command = re.match(r"\\(?:[A-Za-z]+|.)?", text[start:])
        return command.group(0), start + command.end()
    return text[start], start + 1


def _closing_bracket(text: str, start: int) -> int | None:
    """The position of the ``]`` closing the ``[`` at ``start`` (nested brackets and braces counted),
    None if it is not within ``ROOT_INDEX_CHARS`` (a root's index is short; the bound keeps many
    unclosed ones linear)."""
    depth = 0
    for position in range(start, min(len(text), start + ROOT_INDEX_CHARS)):
        depth += text[position] in "[{"
        depth -= text[position] in "]}"
        if depth == 0:
            return position
    return None


def _fix_macro_arguments(text: str, indexed_roots_only: bool = False) -> str:
    """Brace the arguments of ``\\frac`` and ``\\sqrt`` (``\\frac12`` -> ``\\frac{1}{2}``).

    Arguments are fixed recursively; a root's index is kept as written and its argument braced
    (``\\sqrt[3]2`` -> ``\\sqrt[3]{2}``). ``indexed_roots_only``: brace only the arguments of
    indexed roots, the one malformed macro math-verify does not fix itself.
    """
    out: list[str] = []
    position = 0
    for match in re.finditer(r"\\(frac|sqrt)(?![A-Za-z])", text):
        if match.start() < position:
            continue
        arity = 2 if match.group(1) == "frac" else 1
        cursor = match.end()
        index = ""
        if arity == 1 and cursor < len(text) and text[cursor] == "[":
            close = _closing_bracket(text, cursor)
            if close is None:
                continue
            index, cursor = text[cursor : close + 1], close + 1
        if indexed_roots_only and not index:
            continue
        arguments: list[str] = []
        for _ in range(arity):
            argument = _argument(text, cursor)
            if argument is None:
                break
            arguments.append(argument[0])
            cursor = argument[1]
        if len(arguments) < arity:
            continue
        braced = "".join(
            "{" + _fix_macro_arguments(argument, indexed_roots_only) + "}" for argument in arguments
        )
        out.append(text[position : match.start()] + match.group(0) + index + braced)
        position = cursor
    out.append(text[position:])
    return "".join(out)


def _as_rational(text: str) -> Fraction | None:
    """The exact value of an integer, decimal, ``a/b`` or ``\\frac{a}{b}`` literal, else None.

    A literal longer than Python's int-to-string limit stays text (None), compared as written.
    """
    limit = sys.get_int_max_str_digits()  # 0: unlimited
    if limit and len(text) > limit:
        return None
    if THOUSANDS_NUMBER.fullmatch(text):
        text = drop_thousands_commas(text)
    if INTEGER_OR_DECIMAL.fullmatch(text):
        return Fraction(text)
    fraction = SLASH_FRACTION.fullmatch(text)
    if fraction and int(fraction.group(2)) != 0:
        return Fraction(int(fraction.group(1)), int(fraction.group(2)))
    fraction = LATEX_FRACTION.fullmatch(text)
    if fraction and int(fraction.group(3)) != 0:
        sign = -1 if fraction.group(1) == "-" else 1
        return sign * Fraction(int(fraction.group(2)), int(fraction.group(3)))
    return None


def _format_rational(value: Fraction) -> str:
    """The canonical string of an exact rational: ``3``, ``\\frac{1}{2}``, ``-\\frac{5}{2}``."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def normalize_answer(text: str) -> str:
    """Canonical string of a math answer, for plain matching when math-verify gives no verdict.

    The Hendrycks-MATH normalisation: drop ``\\left``/``\\right``, spacing commands, degrees, ``$``
    and ``\\$``, percent signs, trailing unit text, ``\\text{...}``-like wrappers; ``\\dfrac`` and
    ``\\tfrac`` become ``\\frac``; macro arguments get braces (``\\frac12``, ``\\sqrt3``); whitespace
    is removed; a single-variable assignment keeps its right side (``x=3`` -> ``3``); a trailing
    period and a leading ``+`` go; a bare decimal gets its zero (``.5`` -> ``0.5``). GSM8K's numeric
    clean-up: thousands commas and trailing zeros vanish. Exact rational literals (integers,
    decimals, ``a/b``, ``\\frac{a}{b}``) are rewritten by value, which generalises Hendrycks's single
    ``0.5 -> \\frac{1}{2}`` rule: ``0.5``, ``1/2``, ``\\dfrac12`` all become ``\\frac{1}{2}``.
    """
    text = text.replace("\n", " ").strip()
    text = SPACING_COMMANDS.sub(" ", text)
    text = LEFT_RIGHT.sub("", text)
    text = SMALL_FRACTIONS.sub(r"\\frac", text)
    text = DEGREES.sub("", text)
    text = text.replace("\\$", "").replace("$", "")
    text = text.replace("\\%", "").replace("%", "")
    text = _unwrap_text(_drop_trailing_units(text))
    text = _fix_macro_arguments(text)
    text = re.sub(r"\s+", "", text)
    if text.count("=") == 1:
        text = ASSIGNMENT.sub("", text)
    text = text.removesuffix(".").removeprefix("+")
    text = BARE_DECIMAL.sub("0.", text)
    value = _as_rational(text)
    return _format_rational(value) if value is not None else text


def normalized_match(gold: str, predicted: str) -> bool:
    """Whether the two answers have the same non-empty normalised form."""
    normalized = normalize_answer(predicted)
    return bool(normalized) and normalized == normalize_answer(gold)


def _parse_answer(answer: str) -> list:
    """math-verify's parse of a bare answer string, wrapped in ``\\boxed{}`` so that it is found.

    math-verify's ``parse`` extracts expressions from free text, where a bare ``3`` or ``\\frac{1}{2}``
    is not recognised reliably; a boxed answer is its highest-priority LaTeX target. Only parsed SymPy
    objects are kept (no string fallback), so an unparseable side means "no verdict". An indexed
    root's bare argument is braced first (``\\sqrt[3]2``), which math-verify parses to nothing,
    as it braces ``\\sqrt3`` itself (its test table: ``\\sqrt3`` equals ``\\sqrt{3}``).
    """
    return parse(
        f"\\boxed{{{_fix_macro_arguments(answer, indexed_roots_only=True)}}}",
        fallback_mode="no_fallback",
        parsing_timeout=MATH_VERIFY_TIMEOUT_S,
        raise_on_error=True,
    )


def verify_pair(gold: str, predicted: str) -> bool | None:
    """math-verify's verdict on one pair (gold first: ``verify`` is not symmetric), or None.

    None when either side does not parse or parsing/comparison raises or hits math-verify's own
    alarm. Must run in a process's main thread (``signal.alarm``). math-verify accepts a matching
    assignment for a number (gold ``3``, prediction ``x=3``) but not assignments to different
    variables (``x=3`` vs ``y=3``).
    """
    try:
        gold_parsed = _parse_answer(gold)
        predicted_parsed = _parse_answer(predicted)
        if not gold_parsed or not predicted_parsed:
            return None
        return verify(
            gold_parsed, predicted_parsed, timeout_seconds=MATH_VERIFY_TIMEOUT_S, raise_on_error=True
        )
    except (Exception, TimeoutException):
        return None


def decide(gold: str, predicted: str | None, verify_match: bool | None) -> Verdict:
    """Combine the two checks: math-verify decides when it gave a verdict, normalised matching otherwise."""
    if predicted is None:
        return Verdict(correct=False, method="normalized", verify_match=None, normalized_match=False)
    try:
        normalized = normalized_match(gold, predicted)
    except RecursionError as error:  # LaTeX nested thousands deep
        logger.warning(
            "normalised matching failed, counted as no match (%s): predicted=%.200r", error, predicted
        )
        normalized = False
    if verify_match is None:
        return Verdict(
            correct=normalized, method="normalized", verify_match=None, normalized_match=normalized
        )
    return Verdict(
        correct=verify_match, method="math_verify", verify_match=verify_match, normalized_match=normalized
    )


def _serve(conn: Connection, compare: Compare) -> None:
    """Worker loop: answer each batch of pairs with one message per pair, until the pipe closes."""
    conn.send(READY)
    while True:
        try:
            batch = conn.recv()
        except EOFError:
            return
        for gold, predicted in batch:
            try:
                outcome = compare(gold, predicted)
            except Exception:
                outcome = None
            conn.send(outcome)


class _Lost:
    """Marker for a verdict that never arrived (timeout or dead worker)."""


LOST = _Lost()


def _validated(pairs: Iterable[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The pairs as a list, with a clear error for a pair whose gold or prediction is malformed."""
    checked = list(pairs)
    for index, pair in enumerate(checked):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ValueError(f"pair {index}: expected a (gold, predicted) tuple, got {pair!r}")
        gold, predicted = pair
        if not isinstance(gold, str) or not gold.strip():
            raise ValueError(f"pair {index}: gold answer must be a non-empty string, got {gold!r}")
        if predicted is not None and not isinstance(predicted, str):
            raise ValueError(f"pair {index}: predicted answer must be a string or None, got {predicted!r}")
    return checked


class MathChecker:
    """Grades math answers with math-verify in one worker process, falling back to normalised matching.

    Use as a context manager; the worker starts on entry and stops on exit. ``timeout_s`` bounds the
    wait for each pair's verdict; on expiry the worker is killed and restarted and the pair is graded
    by normalised matching. ``compare`` is the function the worker runs (a picklable module-level
    function, ``verify_pair`` by default). ``disagreements`` counts pairs where both checks gave a
    verdict and they differed; ``restarts`` counts worker restarts (timeouts and deaths).

    The fork server starts with a process's first checker and imports this module, not the
    caller's main module; ``compare`` is pickled by reference, so its module must be importable.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        compare: Compare = verify_pair,
        batch_size: int = 256,
        start_timeout_s: float = WORKER_START_TIMEOUT_S,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"MathChecker: timeout_s must be positive, got {timeout_s}")
        if batch_size < 1:
            raise ValueError(f"MathChecker: batch_size must be at least 1, got {batch_size}")
        self.timeout_s = timeout_s
        self.disagreements = 0
        self.restarts = 0
        self._compare = compare
        self._batch_size = batch_size
        self._start_timeout_s = start_timeout_s
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["workflow_scripts.evaluate.math_warmup"])
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None

    def __enter__(self) -> MathChecker:
        self._start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        """Start the worker and wait until it is listening."""
        conn, child_conn = self._context.Pipe()
        process = self._context.Process(
            target=_serve, args=(child_conn, self._compare), name="math-verify-worker", daemon=True
        )
        process.start()
        child_conn.close()
        self._process, self._conn = process, conn
        try:
            ready = conn.recv() if conn.poll(self._start_timeout_s) else None
        except EOFError:
            ready = None
        if ready != READY:
            self._kill()
            raise RuntimeError(f"math-verify worker did not start within {self._start_timeout_s} s")

    def _kill(self) -> None:
        """Stop the worker at once (it may be stuck) and release its pipe."""
        if self._process is not None:
            self._process.kill()
            self._process.join()
            self._process.close()
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None

    def close(self) -> None:
        """Stop the worker: close its pipe so that it exits, and kill it if it does not."""
        if self._process is None:
            return
        self._conn.close()
        self._conn = None
        self._process.join(timeout=self.timeout_s)
        self._kill()

    def _receive(self) -> bool | None | _Lost:
        """The worker's next verdict, or LOST if none arrives within ``timeout_s``."""
        try:
            return self._conn.recv() if self._conn.poll(self.timeout_s) else LOST
        except (EOFError, OSError):
            return LOST

    def _send(self, batch: Sequence[tuple[str, str]]) -> None:
        """Send a batch, restarting a worker that died while idle."""
        try:
            self._conn.send(list(batch))
        except OSError:
            self.restarts += 1
            logger.warning("math-verify worker died while idle; restarting it")
            self._kill()
            self._start()
            self._conn.send(list(batch))

    def _verify_all(self, pairs: Sequence[tuple[str, str]]) -> list[bool | None]:
        """math-verify's verdict on every pair, in order; None where it timed out or gave none."""
        outcomes: list[bool | None] = []
        while len(outcomes) < len(pairs):
            batch = pairs[len(outcomes) : len(outcomes) + self._batch_size]
            self._send(batch)
            for gold, predicted in batch:
                outcome = self._receive()
                if isinstance(outcome, _Lost):
                    self.restarts += 1
                    logger.warning(
                        "math-verify gave no verdict within %.1f s (gold=%r, predicted=%r); restarting it",
                        self.timeout_s,
                        gold,
                        predicted,
                    )
                    outcomes.append(None)
                    self._kill()
                    self._start()
                    break
                outcomes.append(outcome)
        return outcomes

    def check_many(self, pairs: Iterable[tuple[str, str | None]]) -> list[Verdict]:
        """Grade (gold, predicted) pairs in order; a None prediction is incorrect without a worker call."""
        if self._process is None:
            raise RuntimeError("MathChecker must be used as a context manager (with MathChecker() as c: ...)")
        checked = _validated(pairs)
        answered = [(gold, predicted) for gold, predicted in checked if predicted is not None]
        outcomes = iter(self._verify_all(answered))
        verdicts = []
        for gold, predicted in checked:
            verdict = decide(gold, predicted, next(outcomes) if predicted is not None else None)
            if verdict.verify_match is not None and verdict.verify_match != verdict.normalized_match:
                self.disagreements += 1
                logger.info(
                    "math-verify (%s) and normalised matching (%s) disagree: gold=%r predicted=%r",
                    verdict.verify_match,
                    verdict.normalized_match,
                    gold,
                    predicted,
                )
            verdicts.append(verdict)
        return verdicts

    def check(self, gold: str, predicted: str | None) -> Verdict:
        """Grade one (gold, predicted) pair (see ``check_many``)."""
        return self.check_many([(gold, predicted)])[0]
