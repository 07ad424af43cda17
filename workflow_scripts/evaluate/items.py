"""Benchmark items: one schema for every benchmark, read from each source's raw hub schema.

Every benchmark of §4 ends up as the same columns (``ITEM_COLUMNS``), so prompt rendering,
generation and grading never see a source schema. Multiple-choice options are shuffled once,
reproducibly, and held fixed across conditions (Appendix F.3, ``shuffle_generator``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.errors import UserInputError
from workflow_scripts.task_formats import OPTION_LETTERS

# item_id: the source's stable id (HumanEval task_id, LiveBench question_id), else
#   "{benchmark}/{row}", row the position in the raw source (MMLU-STEM: in cais/mmlu all);
# template: math | multiple_choice | code | livebench; grader: math | multiple_choice | humaneval |
#   mbpp | livebench; prompt: the problem text the template needs; choices: the multiple-choice
#   options after the shuffle, else empty; answer: the gold answer (the option letter after the
#   shuffle; "" for code, whose gold is its tests); metadata: key-sorted JSON of what grading needs.
ITEM_COLUMNS = ("item_id", "benchmark", "template", "grader", "prompt", "choices", "answer", "metadata")

# The 19 STEM subjects of MMLU whose test rows make up MMLU-STEM (3,153 rows).
MMLU_STEM_SUBJECTS = frozenset(
    {
        "abstract_algebra",
        "anatomy",
        "astronomy",
        "college_biology",
        "college_chemistry",
        "college_computer_science",
        "college_mathematics",
        "college_physics",
        "computer_security",
        "conceptual_physics",
        "electrical_engineering",
        "elementary_mathematics",
        "high_school_biology",
        "high_school_chemistry",
        "high_school_computer_science",
        "high_school_mathematics",
        "high_school_physics",
        "high_school_statistics",
        "machine_learning",
    }
)


@dataclass(frozen=True)
class Parsed:
    """One raw row read into item fields, before the shared multiple-choice shuffle.

    ``options`` and ``correct`` (the correct option's index in source order) are set
    for multiple choice only; ``item_id`` only where the source has its own id.
    """

    prompt: str
    answer: str = ""
    options: tuple[str, ...] = ()
    correct: int | None = None
    item_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceSchema:
    """How one benchmark's raw rows become items: columns (name -> kind), parser, row filter."""

    template: str
    grader: str
    columns: Mapping[str, str]
    parse: Callable[[Mapping[str, Any]], Parsed]
    keep: Callable[[Mapping[str, Any]], bool] | None = None


def _copy(row: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The named fields a row has, for metadata; absent ones are left out."""
    return {name: row[name] for name in names if name in row}


def gsm8k_gold(solution: str) -> str:
    """The number after the final ``####`` of a GSM8K solution, commas removed (``1,250`` -> ``1250``)."""
    if "####" not in solution:
        raise ValueError("answer has no '#### N' final line")
    gold = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not gold:
        raise ValueError("answer has nothing after '####'")
    return gold


def _gsm8k(row: Mapping[str, Any]) -> Parsed:
    return Parsed(
        prompt=row["question"], answer=gsm8k_gold(row["answer"]), metadata={"solution": row["answer"]}
    )


def _math500(row: Mapping[str, Any]) -> Parsed:
    return Parsed(
        prompt=row["problem"],
        answer=row["answer"],
        metadata=_copy(row, ("solution", "subject", "level", "unique_id")),
    )


def _humaneval(row: Mapping[str, Any]) -> Parsed:
    return Parsed(
        prompt=row["prompt"],
        item_id=row["task_id"],
        metadata=_copy(row, ("prompt", "test", "entry_point", "canonical_solution")),
    )


def _mbpp(row: Mapping[str, Any]) -> Parsed:
    return Parsed(
        prompt=row["text"],
        metadata=_copy(row, ("task_id", "code", "test_list", "test_setup_code", "challenge_test_list")),
    )


def _check_correct(index: int, options: tuple[str, ...]) -> int:
    if not 0 <= index < len(options):
        raise ValueError(f"answer index {index} is outside the {len(options)} options")
    return index


def _options(values: Any, low: int, high: int) -> tuple[str, ...]:
    options = tuple(values)
    if not low <= len(options) <= high:
        raise ValueError(f"has {len(options)} options, expected {low} to {high}")
    return options


def _mmlu(row: Mapping[str, Any]) -> Parsed:
    options = _options(row["choices"], 2, len(OPTION_LETTERS))
    return Parsed(
        prompt=row["question"],
        options=options,
        correct=_check_correct(row["answer"], options),
        metadata={"subject": row["subject"]},
    )


def _mmlu_pro(row: Mapping[str, Any]) -> Parsed:
    options = _options(row["options"], 2, len(OPTION_LETTERS))
    correct = _check_correct(row["answer_index"], options)
    if row["answer"] != OPTION_LETTERS[correct]:
        raise ValueError(f"answer '{row['answer']}' disagrees with answer_index {correct}")
    return Parsed(
        prompt=row["question"],
        options=options,
        correct=correct,
        metadata=_copy(row, ("question_id", "category", "src")),
    )


GPQA_OPTION_COLUMNS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def _gpqa(row: Mapping[str, Any]) -> Parsed:
    # Source order puts the correct answer first; the shuffle decides where it lands.
    return Parsed(
        prompt=row["Question"].strip(),
        options=tuple(row[column].strip() for column in GPQA_OPTION_COLUMNS),
        correct=0,
        metadata=_copy(row, ("Record ID", "High-level domain", "Subdomain")),
    )


LIVEBENCH_ITEM_FIELDS = ("question_id", "turns", "ground_truth")


def _livebench(row: Mapping[str, Any]) -> Parsed:
    turns = list(row["turns"])
    if not turns:
        raise ValueError("turns is empty")
    # Coding questions carry no ground_truth: their gold is the test cases in the metadata.
    ground_truth = row.get("ground_truth")
    return Parsed(
        prompt=turns[0],
        answer=ground_truth if isinstance(ground_truth, str) else "",
        item_id=row["question_id"],
        metadata={key: value for key, value in row.items() if key not in LIVEBENCH_ITEM_FIELDS},
    )


def _is_mmlu_stem(row: Mapping[str, Any]) -> bool:
    return row["subject"] in MMLU_STEM_SUBJECTS


MMLU_COLUMNS = {"question": "str", "subject": "str", "choices": "str_list", "answer": "int"}
GPQA_COLUMNS = {"Question": "str", **{column: "str" for column in GPQA_OPTION_COLUMNS}}
LIVEBENCH_COLUMNS = {
    "question_id": "str",
    "category": "str",
    "task": "str",
    "turns": "str_list",
    "livebench_release_date": "date",
}

# Keyed by the benchmark id of the registry (config.yaml ``benchmarks``).
SCHEMAS: dict[str, SourceSchema] = {
    "gsm8k": SourceSchema("math", "math", {"question": "str", "answer": "str"}, _gsm8k),
    "math500": SourceSchema("math", "math", {"problem": "str", "answer": "str"}, _math500),
    "humaneval": SourceSchema(
        "code",
        "humaneval",
        {"task_id": "str", "prompt": "str", "test": "str", "entry_point": "str"},
        _humaneval,
    ),
    "mbpp": SourceSchema(
        "code",
        "mbpp",
        {
            "text": "str",
            "code": "str",
            "test_list": "str_list",
            "test_setup_code": "str",
            "challenge_test_list": "str_list",
        },
        _mbpp,
    ),
    "mmlu": SourceSchema("multiple_choice", "multiple_choice", MMLU_COLUMNS, _mmlu),
    "mmlu_stem": SourceSchema("multiple_choice", "multiple_choice", MMLU_COLUMNS, _mmlu, keep=_is_mmlu_stem),
    "mmlu_pro": SourceSchema(
        "multiple_choice",
        "multiple_choice",
        {"question": "str", "options": "str_list", "answer": "str", "answer_index": "int", "category": "str"},
        _mmlu_pro,
    ),
    "gpqa": SourceSchema("multiple_choice", "multiple_choice", GPQA_COLUMNS, _gpqa),
    "gpqa_diamond": SourceSchema("multiple_choice", "multiple_choice", GPQA_COLUMNS, _gpqa),
    "livebench_math": SourceSchema(
        "livebench", "livebench", {**LIVEBENCH_COLUMNS, "ground_truth": "str"}, _livebench
    ),
    "livebench_reasoning": SourceSchema(
        "livebench", "livebench", {**LIVEBENCH_COLUMNS, "ground_truth": "str"}, _livebench
    ),
    "livebench_coding": SourceSchema(
        "livebench",
        "livebench",
        {
            **LIVEBENCH_COLUMNS,
            "public_test_cases": "str",
            "private_test_cases": "str",
            "original_json": "mapping",
        },
        _livebench,
    ),
}

KIND_DESCRIPTIONS = {
    "str": "a string",
    "int": "an integer",
    "str_list": "a list of strings",
    "mapping": "a mapping (struct)",
    "date": "a date or date string",
}


def _has_kind(value: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if kind == "str_list":
        return isinstance(value, list | tuple | np.ndarray) and all(isinstance(v, str) for v in value)
    if kind == "mapping":
        return isinstance(value, Mapping)
    if kind == "date":
        return isinstance(value, str | dt.date) and value is not pd.NaT
    raise ValueError(f"unknown column kind '{kind}'")


def check_columns(benchmark: str, raw: pd.DataFrame, columns: Mapping[str, str]) -> None:
    """Fail naming the benchmark and column when a required column is missing or holds the wrong type."""
    missing = [name for name in columns if name not in raw.columns]
    if missing:
        raise UserInputError(
            f"{benchmark}: raw data lacks required column(s) {missing}; it has {list(raw.columns)}"
        )
    for name, kind in columns.items():
        for position, value in enumerate(raw[name]):
            if not _has_kind(value, kind):
                raise UserInputError(
                    f"{benchmark}: column '{name}' row {position} must be {KIND_DESCRIPTIONS[kind]}, "
                    f"found {type(value).__name__} {value!r:.60}"
                )


def shuffle_generator(benchmark: str, shuffle_seed: int) -> np.random.Generator:
    """The benchmark's option-shuffle generator, seeded from (seed, sha256 of the id).

    A stable digest rather than Python's salted ``hash()``, so every process and
    every condition draws the same permutations (Appendix F.3).

    Options are shuffled once per item ("shuffled once with seed 42 and held fixed across all
    conditions"); the item keeps the permutation (``metadata.permutation``: new position ``i``
    holds source option ``permutation[i]``) and ``metadata.source_answer``, the correct option's
    index in source order.
    """
    if isinstance(shuffle_seed, bool) or not isinstance(shuffle_seed, int) or shuffle_seed < 0:
        raise UserInputError(
            f"{benchmark}: shuffle seed must be a non-negative integer, got {shuffle_seed!r}"
        )
    digest = int.from_bytes(hashlib.sha256(benchmark.encode("utf-8")).digest()[:8], "big")
    return np.random.default_rng([shuffle_seed, digest])


def _plain(value: Any) -> Any:
    """``value`` in JSON types: arrays as lists, numpy scalars as Python, dates as ISO text, NaN as null."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [_plain(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _metadata_json(parsed: Parsed, permutation: list[int] | None) -> str:
    metadata = dict(parsed.metadata)
    if permutation is not None:
        metadata.update(permutation=permutation, source_answer=parsed.correct)
    return json.dumps(_plain(metadata), sort_keys=True, ensure_ascii=False)


def _item(
    benchmark: str,
    position: int,
    parsed: Parsed,
    schema: SourceSchema,
    generator: np.random.Generator,
) -> dict[str, Any]:
    """One item row; multiple-choice options are permuted with the benchmark's generator."""
    choices: list[str] = []
    answer = parsed.answer
    permutation = None
    if parsed.options:
        permutation = [int(index) for index in generator.permutation(len(parsed.options))]
        choices = [parsed.options[index] for index in permutation]
        answer = OPTION_LETTERS[permutation.index(parsed.correct)]
    return {
        "item_id": parsed.item_id if parsed.item_id is not None else f"{benchmark}/{position}",
        "benchmark": benchmark,
        "template": schema.template,
        "grader": schema.grader,
        "prompt": parsed.prompt,
        "choices": choices,
        "answer": answer,
        "metadata": _metadata_json(parsed, permutation),
    }


def item_count(benchmark: str, rows: Collection[Mapping[str, Any]]) -> int:
    """How many items ``normalise`` makes of a benchmark's raw ``rows``: those its filter keeps.

    MMLU-STEM's 3,153 are the STEM subjects' rows of ``cais/mmlu`` ``all``; every other
    benchmark keeps each row, and only a filtered one has its rows read (a ``datasets.Dataset``
    decodes every column of a row it yields). A download compares this with the registry's ``rows``.
    """
    if benchmark not in SCHEMAS:
        raise UserInputError(f"unknown benchmark '{benchmark}'; known: {sorted(SCHEMAS)}")
    keep = SCHEMAS[benchmark].keep
    return len(rows) if keep is None else sum(1 for row in rows if keep(row))


def normalise(benchmark: str, raw: pd.DataFrame, spec: Mapping[str, Any], shuffle_seed: int) -> pd.DataFrame:
    """Turn one benchmark's raw hub rows into items (``ITEM_COLUMNS``), in source order.

    ``spec`` is the benchmark's registry entry; its ``template`` must be the one the
    source schema is graded under. ``shuffle_seed`` is ``evaluation.choice_shuffle_seed``.
    """
    if benchmark not in SCHEMAS:
        raise UserInputError(f"unknown benchmark '{benchmark}'; known: {sorted(SCHEMAS)}")
    schema = SCHEMAS[benchmark]
    if spec.get("template") != schema.template:
        raise UserInputError(
            f"{benchmark}: registry template {spec.get('template')!r} does not match its source schema's "
            f"'{schema.template}'"
        )
    check_columns(benchmark, raw, schema.columns)
    generator = shuffle_generator(benchmark, shuffle_seed)
    items = []
    for position, row in enumerate(raw.to_dict("records")):
        if schema.keep is not None and not schema.keep(row):
            continue
        try:
            parsed = schema.parse(row)
        except ValueError as error:
            raise UserInputError(f"{benchmark}: row {position}: {error}") from error
        items.append(_item(benchmark, position, parsed, schema, generator))
    frame = pd.DataFrame(items, columns=list(ITEM_COLUMNS))
    duplicated = frame["item_id"][frame["item_id"].duplicated()].tolist()
    if duplicated:
        raise UserInputError(f"{benchmark}: duplicate item ids {duplicated[:5]}")
    return frame
