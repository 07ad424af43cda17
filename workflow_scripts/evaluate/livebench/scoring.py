"""Score responses to LiveBench questions by LiveBench's own rules, and aggregate them per category.

The scorer of a question is chosen as in LiveBench's ``gen_ground_truth_judgment.py``: by its
``subtask`` if it has one, else by its ``task`` (AMC/SMC, AIME, IMO/USAMO subtasks; AMPS_Hard;
web_of_lies_v2/v3; zebra_puzzle; spatial; LCB_generation and coding_completion). Reasoning
channels are removed first (``extraction.strip_reasoning``). A response LiveBench's parser fails
on scores 0, as LiveBench's dispatcher records it; a malformed question raises, naming it.
``score_many`` runs all AMPS_Hard SymPy checks in one worker with LiveBench's timeout and all
coding programs in the sandbox in parallel. ``category_score`` is LiveBench's category score:
the mean over tasks of each task's mean score.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import pandas as pd

from workflow_scripts.evaluate.calls import converse_all
from workflow_scripts.evaluate.extraction import strip_reasoning
from workflow_scripts.evaluate.livebench import math_tasks, reasoning_tasks
from workflow_scripts.evaluate.livebench.coding_tasks import (
    CodingCheck,
    coding_check,
    passed_all,
    run_budget_s,
    run_check,
)
from workflow_scripts.evaluate.livebench.math_tasks import (
    AMPS_EQUIVALENCE_TIMEOUT_S,
    EquivalenceQuery,
    amps_hard_prepare,
    latex_equivalent,
)
from workflow_scripts.evaluate.livebench.parsing import UnparseableResponse
from workflow_scripts.evaluate.livebench.testcases import TestCaseError
from workflow_scripts.evaluate.math_equivalence import MathChecker
from workflow_scripts.evaluate.sandbox import Limits

Question = Mapping[str, Any]
RELEASE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
CONTEST_PREFIXES = ("amc", "smc")
OLYMPIAD_PREFIXES = ("imo", "usamo")
CODING_TASKS = ("LCB_generation", "coding_completion")
AMPS_HARD_MARK = "amps_hard"
ZEBRA_MARK = "zebra_puzzle"


class UnknownTaskError(ValueError):
    """A question whose task has no LiveBench scorer here."""


def _question_id(question: Question) -> str:
    return str(question.get("question_id", "<no question_id>"))


def scorer_name(question: Question) -> str:
    """The scorer LiveBench applies to ``question``: chosen by ``subtask`` if non-empty, else ``task``.

    One of ``math_contest``, ``aime``, ``proof_rearrangement``, ``amps_hard``, ``web_of_lies_v2``,
    ``web_of_lies_v3``, ``zebra_puzzle``, ``spatial``, ``coding``; raises ``UnknownTaskError``
    naming the question and task otherwise.
    """
    task, subtask = question.get("task"), question.get("subtask")
    task = task if isinstance(task, str) else ""
    key = subtask if isinstance(subtask, str) and subtask else task
    parts = key.split("_")
    if parts[0] in CONTEST_PREFIXES or (len(parts) > 1 and parts[1] == "amc"):
        return "math_contest"
    if parts[0] == "aime":
        return "aime"
    if parts[0] in OLYMPIAD_PREFIXES:
        return "proof_rearrangement"
    if AMPS_HARD_MARK in key or AMPS_HARD_MARK in task:
        return "amps_hard"
    if key in ("web_of_lies_v2", "web_of_lies_v3", "spatial"):
        return key
    if ZEBRA_MARK in key:
        return "zebra_puzzle"
    if key in CODING_TASKS:
        return "coding"
    raise UnknownTaskError(
        f"question {_question_id(question)!r}: no LiveBench scorer for task {task!r} (subtask {subtask!r})"
    )


def _ground_truth(question: Question) -> str:
    truth = question.get("ground_truth")
    if not isinstance(truth, str):
        raise ValueError(f"ground_truth must be a string, got {type(truth).__name__}")
    return truth


def _question_text(question: Question) -> str:
    """The first turn (the question LiveBench's AMC scorer reads the option values from)."""
    turns = question.get("turns")
    if isinstance(turns, str) or turns is None or len(turns) == 0 or not isinstance(turns[0], str):
        raise ValueError("turns must be a non-empty list of strings")
    return turns[0]


def release_date(question: Question) -> str:
    """``livebench_release_date`` as ``YYYY-MM-DD`` (a date, a datetime or an ISO string)."""
    value = question.get("livebench_release_date")
    if isinstance(value, dt.date):
        return value.strftime("%Y-%m-%d")
    if isinstance(value, str) and RELEASE_DATE.match(value):
        return value[:10]
    raise ValueError(f"livebench_release_date must be a date or 'YYYY-MM-DD...', got {value!r}")


def _math_contest(question: Question, response: str) -> float:
    return math_tasks.math_contest_score(_ground_truth(question), response, _question_text(question))


def _aime(question: Question, response: str) -> float:
    return math_tasks.aime_score(_ground_truth(question), response)


def _proof_rearrangement(question: Question, response: str) -> float:
    return math_tasks.proof_rearrangement_score(_ground_truth(question), response)


def _web_of_lies_v2(question: Question, response: str) -> float:
    return reasoning_tasks.web_of_lies_v2_score(_ground_truth(question), response)


def _web_of_lies_v3(question: Question, response: str) -> float:
    return reasoning_tasks.web_of_lies_v3_score(_ground_truth(question), response)


def _zebra_puzzle(question: Question, response: str) -> float:
    return reasoning_tasks.zebra_puzzle_score(_ground_truth(question), response, release_date(question))


def _spatial(question: Question, response: str) -> float:
    return reasoning_tasks.spatial_score(_ground_truth(question), response)


# Scorers that decide from the text alone; amps_hard and coding need a worker or the sandbox.
TEXT_SCORERS: dict[str, Callable[[Question, str], float]] = {
    "math_contest": _math_contest,
    "aime": _aime,
    "proof_rearrangement": _proof_rearrangement,
    "web_of_lies_v2": _web_of_lies_v2,
    "web_of_lies_v3": _web_of_lies_v3,
    "zebra_puzzle": _zebra_puzzle,
    "spatial": _spatial,
}


def _resolve_equivalences(queries: dict[int, EquivalenceQuery], scores: list[float | None]) -> None:
    """Score AMPS_Hard answers by LiveBench's SymPy check, in one worker, 60 s per answer."""
    if not queries:
        return
    with MathChecker(timeout_s=AMPS_EQUIVALENCE_TIMEOUT_S, compare=latex_equivalent) as checker:
        verdicts = checker.check_many([(query.gold, query.answer) for query in queries.values()])
    for index, verdict in zip(queries, verdicts, strict=True):
        scores[index] = float(verdict.verify_match is True)


def _run_checks(
    checks: dict[int, CodingCheck], scores: list[float | None], limits: Limits, workers: int
) -> None:
    """Check every coding answer (in the sandbox, ``limits.timeout_s`` per test); each run gets the
    largest budget any of them needs."""
    if not checks:
        return
    budget = max(run_budget_s(len(check.inputs), limits.timeout_s) for check in checks.values())
    talks = [partial(run_check, check) for check in checks.values()]
    verdicts = converse_all(
        talks, replace(limits, timeout_s=budget), workers, call_timeout_s=limits.timeout_s
    )
    for (index, check), verdict in zip(checks.items(), verdicts, strict=True):
        scores[index] = float(passed_all(check, verdict))


def score_many(
    questions: Sequence[Question],
    responses: Sequence[str],
    workers: int = 1,
    limits: Limits | None = None,
) -> list[float]:
    """LiveBench's score in [0, 1] of each response to its question, in order.

    ``limits.timeout_s`` is the time each coding test may take (LiveBench: 6 s); ``workers``
    coding programs run at once.
    """
    if len(questions) != len(responses):
        raise ValueError(f"score_many: {len(questions)} questions but {len(responses)} responses")
    limits = limits or Limits()
    scores: list[float | None] = [None] * len(questions)
    queries: dict[int, EquivalenceQuery] = {}
    checks: dict[int, CodingCheck] = {}
    for index, (question, response) in enumerate(zip(questions, responses, strict=True)):
        name = scorer_name(question)
        text = strip_reasoning(response)
        try:
            if name == "coding":
                checks[index] = coding_check(question, text, limits.timeout_s)
            elif name == "amps_hard":
                prepared = amps_hard_prepare(_ground_truth(question), text)
                if isinstance(prepared, EquivalenceQuery):
                    queries[index] = prepared
                else:
                    scores[index] = prepared
            else:
                scores[index] = TEXT_SCORERS[name](question, text)
        except UnparseableResponse:
            scores[index] = 0.0
        except TestCaseError:
            raise
        except ValueError as error:
            raise ValueError(
                f"LiveBench question {_question_id(question)!r} (task {question.get('task')!r}): {error}"
            ) from error
    _resolve_equivalences(queries, scores)
    _run_checks(checks, scores, limits, workers)
    return [float(value) for value in scores]


def score(question: Question, response: str, limits: Limits | None = None) -> float:
    """LiveBench's score in [0, 1] of one response (see ``score_many``)."""
    return score_many([question], [response], workers=1, limits=limits)[0]


def category_score(frame: pd.DataFrame) -> float:
    """LiveBench's category score: the mean over tasks of each task's mean ``score`` (columns task, score)."""
    missing = {"task", "score"} - set(frame.columns)
    if missing:
        raise ValueError(f"category_score: missing columns {sorted(missing)}")
    if frame.empty:
        raise ValueError("category_score: no scores")
    if frame["score"].isna().any():
        raise ValueError("category_score: some scores are missing (NaN)")
    return float(frame.groupby("task")["score"].mean().mean())
