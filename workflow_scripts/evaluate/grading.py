"""Grade stored generations: one score in [0, 1] per (item, repeat), by the item's grader (F.3).

Grading reads only the items and the generations, never the model, so a score can
be recomputed (new grader, new timeout) without regenerating.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.evaluate.aggregate import avg_at_k
from workflow_scripts.evaluate.extraction import (
    extract_choice,
    extract_code,
    extract_math_answer,
    strip_reasoning,
)
from workflow_scripts.evaluate.sandbox import Job, Limits, Outcome, require_isolation, run_all

# ``task``: a LiveBench item's task (its category score averages over tasks); empty for other benchmarks.
SCORE_COLUMNS = ("benchmark", "item_id", "task", "repeat", "seed", "score", "extracted")
# Scores of a group of generations and what was extracted from each response.
Graded = tuple[list[float], list[str | None]]


def humaneval_program(item: Mapping[str, Any], code: str) -> str:
    """The solution followed by HumanEval's ``check`` on the entry point.

    A response that only gives the body (no ``def entry_point``) is completed
    from the item's signature prompt, as HumanEval's own harness does.
    """
    meta = json.loads(item["metadata"])
    entry = meta["entry_point"]
    if f"def {entry}" not in code:
        code = meta["prompt"] + code
    return f"{code}\n\n{meta['test']}\n\ncheck({entry})\n"


def mbpp_program(item: Mapping[str, Any], code: str) -> str:
    """The task's setup code and imports, the solution, then every assert of its test list."""
    meta = json.loads(item["metadata"])
    header = "\n".join([*meta.get("test_imports", []), meta.get("test_setup_code", "")]).strip()
    tests = "\n".join(meta["test_list"])
    return f"{header}\n\n{code}\n\n{tests}\n"


PROGRAMS = {"humaneval": humaneval_program, "mbpp": mbpp_program}
# Appended after a program's tests: echoes the token the grader fed on stdin, so only a run
# whose tests reached their end prints it. An exit before that (``sys.exit(0)``,
# ``raise SystemExit(0)``, ``os._exit(0)``, also from ``atexit``) ends with status 0 but
# without the token, which the program cannot know beforehand: it is random per run and
# arrives only on stdin, which the benchmarks' solutions never read (one that does consumes
# it and fails, the safe side). A solution written to attack the harness could still read
# stdin and print it; closing that needs the tests in a process apart from the solution.
COMPLETION_EPILOGUE = (
    "\nimport os as _rpb_os, sys as _rpb_sys\n"
    "_rpb_sys.stdout.flush()\n"
    '_rpb_os.write(1, b"\\n" + _rpb_os.read(0, 64) + b"\\n")\n'
)


def completion_job(program: str) -> tuple[Job, str]:
    """The program with the completion epilogue, fed a fresh token; the token a finished run prints."""
    token = secrets.token_hex(16)
    return Job(program + COMPLETION_EPILOGUE, stdin=token), token


def ran_to_completion(outcome: Outcome, token: str) -> bool:
    """A pass: exit 0 and the epilogue's token as the last line, so the tests ran to their end."""
    return outcome.status == "passed" and outcome.stdout.endswith(f"\n{token}\n")


def livebench_question(item: Mapping[str, Any]) -> dict[str, Any]:
    """The raw LiveBench row an item was normalised from (LiveBench's scorers read that schema)."""
    return {
        **json.loads(item["metadata"]),
        "question_id": item["item_id"],
        "turns": [item["prompt"]],
        "ground_truth": item["answer"],
    }


def _grade_math(rows: pd.DataFrame, math_timeout_s: float) -> Graded:
    from workflow_scripts.evaluate.math_equivalence import MathChecker

    extracted = [extract_math_answer(strip_reasoning(text)) for text in rows["response"]]
    with MathChecker(timeout_s=math_timeout_s) as checker:
        verdicts = checker.check_many(list(zip(rows["answer"], extracted, strict=True)))
    return [float(v.correct) for v in verdicts], extracted


def _grade_choice(rows: pd.DataFrame) -> Graded:
    extracted = [
        extract_choice(strip_reasoning(text), len(choices))
        for text, choices in zip(rows["response"], rows["choices"], strict=True)
    ]
    scores = [float(e is not None and e == gold) for e, gold in zip(extracted, rows["answer"], strict=True)]
    return scores, extracted


def _grade_code(rows: pd.DataFrame, limits: Limits, workers: int, allow_unisolated: bool) -> Graded:
    """Run each distinct extracted program once in the sandbox; a response without code scores 0."""
    extracted = [extract_code(strip_reasoning(text)) for text in rows["response"]]
    programs: list[str | None] = [
        None if code is None else PROGRAMS[item["grader"]](item, code)
        for code, (_, item) in zip(extracted, rows.iterrows(), strict=True)
    ]
    distinct = sorted({p for p in programs if p is not None})
    isolation = require_isolation(allow_unisolated) if distinct else None
    runs = [completion_job(source) for source in distinct]
    outcomes = run_all([job for job, _ in runs], limits, workers, isolation=isolation)
    passed = {
        source: ran_to_completion(outcome, token)
        for source, outcome, (_, token) in zip(distinct, outcomes, runs, strict=True)
    }
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


def grade(
    items: pd.DataFrame,
    generations: pd.DataFrame,
    limits: Limits,
    workers: int,
    math_timeout_s: float,
    allow_unisolated: bool = False,
) -> pd.DataFrame:
    """Score every generation against its item; a generation without an item is an error naming it.

    Code runs only in an isolating sandbox unless ``allow_unisolated``
    (:func:`~workflow_scripts.evaluate.sandbox.require_isolation`).
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
    for grader, rows in merged.groupby("grader", sort=True):
        if grader == "math":
            values, found = _grade_math(rows, math_timeout_s)
        elif grader == "multiple_choice":
            values, found = _grade_choice(rows)
        elif grader in PROGRAMS:
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
