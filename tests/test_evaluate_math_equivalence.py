"""Math answer checking: normalisation, math-verify in its worker process, timeouts and fallbacks."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time

import pytest

from workflow_scripts.evaluate.math_equivalence import (
    MathChecker,
    Verdict,
    decide,
    normalize_answer,
    normalized_match,
    verify_pair,
)

HANG = "HANG"
DIE = "DIE"
RAISE = "RAISE"


def scripted_compare(gold: str, predicted: str) -> bool | None:
    """A worker function that hangs, dies or raises on cue and otherwise runs math-verify."""
    if HANG in (gold, predicted):
        time.sleep(3600)
    if predicted == DIE:
        os._exit(1)
    if predicted == RAISE:
        raise RuntimeError("scripted failure")
    return verify_pair(gold, predicted)


def forked_warm(gold: str, predicted: str) -> bool:
    """True in a worker that started with math-verify's parsers built and none of the caller's threads."""
    return "workflow_scripts.evaluate.math_warmup" in sys.modules and threading.active_count() == 1


@pytest.fixture(scope="module")
def checker():
    with MathChecker() as running:
        yield running


@pytest.fixture(scope="module")
def scripted_checker():
    with MathChecker(timeout_s=1.0, compare=scripted_compare, batch_size=3) as running:
        yield running


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\frac{1}{2}", r"\frac{1}{2}"),
        ("0.5", r"\frac{1}{2}"),
        (".5", r"\frac{1}{2}"),
        (r"\dfrac12", r"\frac{1}{2}"),
        (r"\tfrac{1}{2}", r"\frac{1}{2}"),
        ("1/2", r"\frac{1}{2}"),
        (r"\frac{-1}{2}", r"-\frac{1}{2}"),
        ("-0.50", r"-\frac{1}{2}"),
        ("1,000", "1000"),
        ("$1,000.00", "1000"),
        (r"\$5.00", "5"),
        ("+7", "7"),
        ("12.", "12"),
        ("-1,234.5", r"-\frac{2469}{2}"),
        ("x = 3", "3"),
        ("x_1=3", "3"),
        ("f(x)=3", "f(x)=3"),
        (r"90^\circ", "90"),
        (r"90^{\circ}", "90"),
        (r"10\%", "10"),
        (r"5\text{ cm}", "5"),
        (r"5 \mbox{ square feet}^2", "5"),
        (r"\text{Evelyn}", "Evelyn"),
        (r"\textbf{(C)}", "(C)"),
        (r"\left( 1, \frac12 \right]", r"(1,\frac{1}{2}]"),
        (r"\sqrt3", r"\sqrt{3}"),
        (r"\frac{\sqrt3}2", r"\frac{\sqrt{3}}{2}"),
        (r"\frac\pi2", r"\frac{\pi}{2}"),
        (r"\sqrt[3]{2}", r"\sqrt[3]{2}"),
        (r"\sqrt[3]2", r"\sqrt[3]{2}"),
        (r"2\sqrt[4] 3", r"2\sqrt[4]{3}"),
        (r"\frac1{\sqrt[3]2}", r"\frac{1}{\sqrt[3]{2}}"),
        (r"\sqrt[3", r"\sqrt[3"),
        (r"3\!\cdot\,2", r"3\cdot2"),
        (r"x + .5", "x+0.5"),
        ("1/0", "1/0"),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    ("gold", "predicted", "expected"),
    [
        (r"\frac{1}{2}", "0.5", True),
        (r"\dfrac12", "1/2", True),
        ("1,000", "1000", True),
        ("18", "$18.00", True),
        ("3", "x=3", True),
        (r"\frac{1}{3}", "0.333", False),
        ("5", "6", False),
        ("5", "", False),
    ],
)
def test_normalized_match(gold, predicted, expected):
    assert normalized_match(gold, predicted) is expected


def test_decide_rule():
    assert decide("3", None, None) == Verdict(False, "normalized", None, False)
    assert decide("3", "3.0", None) == Verdict(True, "normalized", None, True)
    assert decide("3", "3.0", False) == Verdict(False, "math_verify", False, True)
    assert decide("3", "4", True) == Verdict(True, "math_verify", True, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decide("3", "3", True).correct = False


@pytest.mark.parametrize(
    ("gold", "predicted", "expected"),
    [
        (r"\frac{1}{2}", "0.5", True),
        (r"\dfrac12", "1/2", True),
        # math-verify treats an assignment to a single variable as its value, in both directions.
        ("3", "x=3", True),
        ("x=3", "3", True),
        ("x=3", "y=3", False),
        ("1,000", "1000", True),
        (r"\frac{\sqrt{3}}{2}", r"\sqrt{3}/2", True),
        ("x^2+2x+1", "(x+1)^2", True),
        ("[1,2)", "[1, 2)", True),
        ("[1,2)", "(1,2)", False),
        (r"\{1,2\}", r"\{2,1\}", True),
        (r"\frac{1}{3}", "0.333", False),
        ("5", "6", False),
    ],
)
def test_verify_pair(gold, predicted, expected):
    assert verify_pair(gold, predicted) is expected


# math-verify's own table has "Malformed sqrt works": ``\sqrt3`` equals ``\sqrt{3}``. An indexed
# root is the same malformation, which math-verify alone leaves unparsed: both checks (math-verify
# and the normalised fallback) equal it to the braced form, in both directions.
INDEXED_ROOTS = [
    (r"\sqrt{3}", r"\sqrt3", True),
    (r"\sqrt[3]{2}", r"\sqrt[3]2", True),
    (r"\sqrt[3]2", r"\sqrt[3]{2}", True),
    (r"2\sqrt[3]{2}", r"2\sqrt[3]2", True),
    (r"2\sqrt[3]2", r"2\sqrt[3]{2}", True),
    (r"\sqrt[4]{3}", r"\sqrt[4]3", True),
    (r"\sqrt[4]3", r"\sqrt[4]{3}", True),
    (r"\sqrt[3]{2}", r"\sqrt[3]3", False),
    (r"\sqrt[3]2", r"\sqrt2", False),
    (r"\sqrt[4]3", r"\sqrt[3]3", False),
]


@pytest.mark.parametrize(("gold", "predicted", "expected"), INDEXED_ROOTS)
def test_indexed_roots_with_a_bare_argument(gold, predicted, expected):
    assert verify_pair(gold, predicted) is expected
    assert normalized_match(gold, predicted) is expected


@pytest.mark.parametrize(("gold", "predicted"), [("3", ""), ("3", r"\frac{"), ("", "3")])
def test_verify_pair_gives_no_verdict_on_unparseable_input(gold, predicted):
    assert verify_pair(gold, predicted) is None


def test_checker_grades_with_math_verify(checker):
    pairs = [
        (r"\frac{1}{2}", "0.5"),
        (r"\dfrac12", "1/2"),
        ("1,000", "1000"),
        ("[1,2)", "[1, 2)"),
        ("5", "6"),
        ("72", None),
    ]
    verdicts = checker.check_many(pairs)
    assert [v.correct for v in verdicts] == [True, True, True, True, False, False]
    assert [v.method for v in verdicts] == ["math_verify"] * 5 + ["normalized"]
    assert verdicts[-1] == Verdict(False, "normalized", None, False)
    assert checker.check("3", "x=3") == Verdict(True, "math_verify", True, True)


def test_checker_falls_back_when_math_verify_cannot_parse(checker):
    assert checker.check("3", r"3\frac{") == Verdict(False, "normalized", None, False)
    assert checker.check(r"\frac{", r"\frac{") == Verdict(True, "normalized", None, True)


def test_checker_counts_and_logs_disagreements(checker, caplog):
    before = checker.disagreements
    with caplog.at_level(logging.INFO, logger="workflow_scripts.evaluate.math_equivalence"):
        verdicts = checker.check_many([("x=3", "y=3"), (r"\frac{\sqrt{3}}{2}", r"\sqrt{3}/2"), ("4", "4.0")])
    assert verdicts[0] == Verdict(False, "math_verify", False, True)
    assert verdicts[1] == Verdict(True, "math_verify", True, False)
    assert verdicts[2] == Verdict(True, "math_verify", True, True)
    assert checker.disagreements == before + 2
    disagreements = [r.getMessage() for r in caplog.records if "disagree" in r.getMessage()]
    assert len(disagreements) == 2
    assert "gold='x=3'" in disagreements[0] and "predicted='y=3'" in disagreements[0]


def test_checker_rejects_malformed_pairs(checker):
    with pytest.raises(ValueError, match="pair 1: gold answer must be a non-empty string"):
        checker.check_many([("1", "1"), ("", "1")])
    with pytest.raises(ValueError, match="pair 0: predicted answer must be a string or None"):
        checker.check_many([("1", 1)])
    with pytest.raises(ValueError, match=r"pair 0: expected a \(gold, predicted\) tuple"):
        checker.check_many([["1", "1"]])


def test_checker_outside_context_is_an_error():
    with pytest.raises(RuntimeError, match="context manager"):
        MathChecker().check("1", "1")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"timeout_s": 0}, "timeout_s must be positive"), ({"batch_size": 0}, "batch_size")],
)
def test_checker_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MathChecker(**kwargs)


@pytest.mark.slow
def test_timeout_falls_back_to_normalized_and_worker_recovers(scripted_checker, caplog):
    before = scripted_checker.restarts
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="workflow_scripts.evaluate.math_equivalence"):
        verdicts = scripted_checker.check_many(
            [("0.5", r"\frac{1}{2}"), (HANG, HANG), ("2", "3"), ("7", "7"), (r"\frac{1}{2}", "0.5")]
        )
    assert time.monotonic() - started < 30
    assert verdicts == [
        Verdict(True, "math_verify", True, True),
        Verdict(True, "normalized", None, True),
        Verdict(False, "math_verify", False, False),
        Verdict(True, "math_verify", True, True),
        Verdict(True, "math_verify", True, True),
    ]
    assert scripted_checker.restarts == before + 1
    assert any("no verdict within" in r.getMessage() for r in caplog.records)
    assert scripted_checker.check("1/4", "0.25") == Verdict(True, "math_verify", True, True)


def test_dead_worker_is_restarted(scripted_checker):
    before = scripted_checker.restarts
    verdicts = scripted_checker.check_many([("9", DIE), ("9", "9")])
    assert verdicts == [Verdict(False, "normalized", None, False), Verdict(True, "math_verify", True, True)]
    assert scripted_checker.restarts == before + 1


def test_worker_killed_while_idle_is_restarted(scripted_checker):
    before = scripted_checker.restarts
    os.kill(scripted_checker._process.pid, signal.SIGKILL)
    scripted_checker._process.join()
    assert scripted_checker.check("2", "2.0") == Verdict(True, "math_verify", True, True)
    assert scripted_checker.restarts == before + 1


def test_a_worker_starts_warm_and_without_the_callers_threads():
    """Forked from the fork server that graded one pair, not spawned, and not forked from the caller."""
    caller_busy = threading.Event()
    thread = threading.Thread(target=caller_busy.wait, daemon=True)
    thread.start()
    try:
        for _ in range(2):  # the second checker of a process reuses the fork server
            with MathChecker(compare=forked_warm) as warm:
                assert warm.check("1", "2").verify_match is True
    finally:
        caller_busy.set()


def test_raising_compare_falls_back_without_restart(scripted_checker):
    before = scripted_checker.restarts
    assert scripted_checker.check(RAISE, RAISE) == Verdict(True, "normalized", None, True)
    assert scripted_checker.restarts == before


def test_missing_prediction_never_reaches_the_worker(scripted_checker):
    before = scripted_checker.restarts
    started = time.monotonic()
    assert scripted_checker.check(HANG, None) == Verdict(False, "normalized", None, False)
    assert time.monotonic() - started < scripted_checker.timeout_s
    assert scripted_checker.restarts == before


@pytest.mark.slow
def test_decide_survives_huge_and_deep_answers():
    """A 5,000-digit literal and LaTeX nested 2,000 deep give a verdict, not an exception."""
    assert decide("1" * 5000, "1" * 5000, None).correct
    assert not decide("1", "1" * 5000, None).correct
    deep = "1"
    for _ in range(2000):
        deep = f"\\frac{{{deep}}}{{2}}"
    assert not decide("1", deep, None).correct
