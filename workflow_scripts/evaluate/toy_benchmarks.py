"""Toy benchmarks: the toy task families (``toy_tasks``) asked in each benchmark's raw hub schema.

A toy model can never answer a real GSM8K or MMLU question, so at toy scale every benchmark
asks the five families the toy corpora teach (drawn with another seed), written as raw rows
of the real source schema so that ``items.normalise`` and the real graders of Appendix F.3
run unchanged. The bundled fixture of the same benchmark is the schema template: the rows
have exactly its columns, and the fields that carry no task (``COPIED``: LiveBench's release
dates, a subject, a domain) are copied from its first row of the asked kind. Every gold
answer and test output is computed by the family objects, never typed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd

from workflow_scripts.errors import UserInputError
from workflow_scripts.evaluate.fixtures import read_fixture
from workflow_scripts.evaluate.items import SCHEMAS
from workflow_scripts.task_formats import OPTION_LETTERS
from workflow_scripts.toy_tasks import (
    FUNCTIONS,
    STDIN_PROGRAMS,
    Choice,
    Function,
    StdinProgram,
    Sum,
    TruthChain,
    draw_choice,
    draw_function,
    draw_list,
    draw_program,
    draw_sum,
    draw_truth_chain,
)

Task = Sum | Choice | Function | StdinProgram | TruthChain
Row = dict[str, Any]

# Test inputs drawn per code question: HumanEval's check asserts all four (its docstring shows
# the first), MBPP's test list has three, as in MBPP; LiveBench coding shows two public cases
# in the statement and keeps four private ones.
HUMANEVAL_TESTS = 4
MBPP_TESTS = 3
LCB_PUBLIC_TESTS = 2
LCB_PRIVATE_TESTS = 4
# The LiveBench task each LiveBench benchmark's toy rows are written as (its scorer grades them).
LIVEBENCH_TASKS = {
    "livebench_math": "AMPS_Hard",
    "livebench_coding": "LCB_generation",
    "livebench_reasoning": "web_of_lies_v2",
}
# A subtask naming AMPS_Hard, so LiveBench's dispatcher (which prefers the subtask) picks its scorer.
AMPS_SUBTASK = "amps_hard_addition"
# Columns copied from the fixture's template row: fields that describe no task.
COPIED: dict[str, tuple[str, ...]] = {
    "gsm8k": (),
    "math500": (),
    "humaneval": (),
    "mbpp": (),
    "mmlu": ("subject",),
    "mmlu_stem": ("subject",),
    "mmlu_pro": ("category", "src"),
    "gpqa": ("Subdomain", "High-level domain"),
    "gpqa_diamond": ("Subdomain", "High-level domain"),
    "livebench_math": (
        "category", "livebench_release_date", "livebench_removal_date", "expressions", "hardness",
    ),
    "livebench_coding": (
        "category", "release_date", "citation", "livebench_release_date", "livebench_removal_date",
        "remainder", "solution", "partial_solution",
    ),
    "livebench_reasoning": ("category", "livebench_release_date", "livebench_removal_date", "level"),
}  # fmt: skip


@dataclass(frozen=True)
class Slot:
    """Where a question lands: its row index, its 64-hex key (LiveBench ids) and the template row."""

    index: int
    key: str
    template: Row


@dataclass(frozen=True)
class ToyQuestion:
    """One drawn question: the family object and, for code families, its test inputs (shown one first)."""

    task: Task
    inputs: tuple[tuple[int, ...], ...] = ()


def _code_inputs(rng: np.random.Generator, count: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(draw_list(rng)) for _ in range(count))


# How each benchmark draws one question from the generator.
DRAWS: dict[str, Callable[[np.random.Generator], ToyQuestion]] = {
    "gsm8k": lambda rng: ToyQuestion(draw_sum(rng)),
    "math500": lambda rng: ToyQuestion(draw_sum(rng)),
    "livebench_math": lambda rng: ToyQuestion(draw_sum(rng)),
    "humaneval": lambda rng: ToyQuestion(draw_function(rng), _code_inputs(rng, HUMANEVAL_TESTS)),
    "mbpp": lambda rng: ToyQuestion(draw_function(rng), _code_inputs(rng, MBPP_TESTS)),
    "livebench_coding": lambda rng: ToyQuestion(
        draw_program(rng), _code_inputs(rng, LCB_PUBLIC_TESTS + LCB_PRIVATE_TESTS)
    ),
    "mmlu": lambda rng: ToyQuestion(draw_choice(rng, 4)),
    "mmlu_stem": lambda rng: ToyQuestion(draw_choice(rng, 4)),
    "mmlu_pro": lambda rng: ToyQuestion(draw_choice(rng, 10)),
    "gpqa": lambda rng: ToyQuestion(draw_choice(rng, 4)),
    "gpqa_diamond": lambda rng: ToyQuestion(draw_choice(rng, 4)),
    "livebench_reasoning": lambda rng: ToyQuestion(draw_truth_chain(rng)),
}


def _generator(benchmark: str, seed: int) -> np.random.Generator:
    """The benchmark's own stream, seeded from (seed, sha256 of its id): benchmarks of one family differ."""
    digest = hashlib.sha256(f"toy-benchmark/{benchmark}".encode()).digest()[:8]
    return np.random.default_rng([seed, int.from_bytes(digest, "big")])


def _check_request(benchmark: str, rows: int, seed: int) -> None:
    if benchmark not in DRAWS:
        raise UserInputError(f"no toy benchmark '{benchmark}'; known: {sorted(DRAWS)}")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise UserInputError(f"{benchmark}: toy benchmark rows must be a positive integer, got {rows!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserInputError(f"{benchmark}: toy benchmark seed must be a non-negative integer, got {seed!r}")


def draw_questions(benchmark: str, rows: int, seed: int) -> list[ToyQuestion]:
    """The questions of ``benchmark``'s toy rows, in row order (a prefix does not depend on ``rows``)."""
    _check_request(benchmark, rows, seed)
    rng = _generator(benchmark, seed)
    return [DRAWS[benchmark](rng) for _ in range(rows)]


def _digest(benchmark: str, seed: int, index: int) -> str:
    """A LiveBench-style 64-hex id of one toy row."""
    return hashlib.sha256(f"rpb-toy/{benchmark}/{seed}/{index}".encode()).hexdigest()


def _outputs(function: Function | StdinProgram, inputs: Sequence[tuple[int, ...]]) -> list[Any]:
    return [function.reference(list(xs)) for xs in inputs]


def _gsm8k(question: ToyQuestion, at: Slot) -> Row:
    s = cast(Sum, question.task)
    working = f"{s.name} has {s.a} + {s.b} = <<{s.a}+{s.b}={s.value}>>{s.value} {s.item}s now."
    return {"question": s.word_problem, "answer": f"{working}\n#### {s.value}"}


def _math500(question: ToyQuestion, at: Slot) -> Row:
    s = cast(Sum, question.task)
    return {
        "problem": s.expression,
        "solution": f"We add the two numbers: {s.working}, so the sum is $\\boxed{{{s.value}}}$.",
        "answer": str(s.value),
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": f"test/prealgebra/toy-{at.index}.json",
    }


def _livebench_math(question: ToyQuestion, at: Slot) -> Row:
    s = cast(Sum, question.task)
    return {
        "question_id": at.key,
        "turns": [s.amps_question],
        "ground_truth": str(s.value),
        "task": LIVEBENCH_TASKS["livebench_math"],
        "subtask": AMPS_SUBTASK,
    }


def _humaneval(question: ToyQuestion, at: Slot) -> Row:
    f = cast(Function, question.task)
    outputs = _outputs(f, question.inputs)
    prompt = f.humaneval_prompt(question.inputs[0])
    asserts = "".join(
        f"    assert candidate({list(xs)!r}) == {out!r}\n"
        for xs, out in zip(question.inputs, outputs, strict=True)
    )
    return {
        "task_id": f"HumanEval/toy-{at.index}",
        "prompt": prompt,
        "canonical_solution": f"    {f.body}\n",
        "test": f"\n\nMETADATA = {{}}\n\n\ndef check(candidate):\n{asserts}",
        "entry_point": f.name,
    }


def _mbpp(question: ToyQuestion, at: Slot) -> Row:
    f = cast(Function, question.task)
    return {
        "task_id": at.index,
        "text": f.mbpp_text,
        "code": f.source.rstrip("\n"),
        "test_list": f.assertions(question.inputs),
        "test_setup_code": "",
        "challenge_test_list": [],
    }


def encode_private_cases(cases: Sequence[Mapping[str, str]]) -> str:
    """LiveCodeBench's encoding of private test cases: base64 of zlib of a pickle of the JSON string."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(list(cases)), protocol=4))).decode("ascii")


def _livebench_coding(question: ToyQuestion, at: Slot) -> Row:
    p = cast(StdinProgram, question.task)
    cases = [
        {"input": stdin, "output": stdout, "testtype": "stdin"}
        for stdin, stdout in map(p.case, question.inputs)
    ]
    public, private = cases[:LCB_PUBLIC_TESTS], cases[LCB_PUBLIC_TESTS:]
    content = p.content(question.inputs[:LCB_PUBLIC_TESTS])
    original = {
        **at.template["original_json"],
        "question_title": p.title,
        "question_content": content,
        "question_id": f"toy-{at.index}",
        "starter_code": "",
        "metadata": "{}",  # no func_name: a standard-input program
    }
    return {
        "question_id": at.key,
        "turns": [p.prompt(question.inputs[:LCB_PUBLIC_TESTS])],
        "question_title": p.title,
        "public_test_cases": json.dumps(public),
        "private_test_cases": encode_private_cases(private),
        "original_json": original,
        "task": LIVEBENCH_TASKS["livebench_coding"],
    }


def _mmlu(question: ToyQuestion, at: Slot) -> Row:
    c = cast(Choice, question.task)
    return {"question": c.question, "choices": list(c.options), "answer": c.answer}


def _mmlu_pro(question: ToyQuestion, at: Slot) -> Row:
    c = cast(Choice, question.task)
    return {
        "question_id": at.index,
        "question": c.question,
        "options": list(c.options),
        "answer": c.letter,
        "answer_index": c.answer,
        "cot_content": "",
    }


def _gpqa(question: ToyQuestion, at: Slot) -> Row:
    c = cast(Choice, question.task)
    correct = c.options[c.answer]
    incorrect = [option for position, option in enumerate(c.options) if position != c.answer]
    fields = {
        "Question": c.question,
        "Correct Answer": correct,
        **{f"Incorrect Answer {n}": option for n, option in enumerate(incorrect, start=1)},
    }
    return {
        **{f"Pre-Revision {name}": value for name, value in fields.items()},
        **fields,
        "Explanation": f"{correct[0].upper()}{correct[1:]} is the only {c.category} among the options.",
        "Record ID": f"rec{at.key[:14]}",
    }


def _livebench_reasoning(question: ToyQuestion, at: Slot) -> Row:
    t = cast(TruthChain, question.task)
    return {
        "question_id": at.key,
        "turns": [t.prompt],
        "ground_truth": t.answer,
        "task": LIVEBENCH_TASKS["livebench_reasoning"],
    }


# How each benchmark writes one question's task fields (the rest come from the template row).
WRITERS: dict[str, Callable[[ToyQuestion, Slot], Row]] = {
    "gsm8k": _gsm8k,
    "math500": _math500,
    "livebench_math": _livebench_math,
    "humaneval": _humaneval,
    "livebench_coding": _livebench_coding,
    "mbpp": _mbpp,
    "mmlu": _mmlu,
    "mmlu_stem": _mmlu,
    "mmlu_pro": _mmlu_pro,
    "gpqa": _gpqa,
    "gpqa_diamond": _gpqa,
    "livebench_reasoning": _livebench_reasoning,
}


def template_row(benchmark: str, fixture: pd.DataFrame) -> Row:
    """The fixture's first row of the asked kind: kept by the benchmark's filter, of its LiveBench task."""
    keep = SCHEMAS[benchmark].keep
    task = LIVEBENCH_TASKS.get(benchmark)
    for row in fixture.to_dict("records"):
        if (keep is None or keep(row)) and (task is None or row["task"] == task):
            return row
    raise UserInputError(f"{benchmark}: the bundled fixture has no row to use as the toy template")


def _row(benchmark: str, question: ToyQuestion, at: Slot, columns: list[str]) -> Row:
    fields = WRITERS[benchmark](question, at)
    unknown = sorted(set(fields) - set(columns))
    unset = sorted(set(columns) - set(fields) - set(COPIED[benchmark]))
    if unknown or unset:
        raise ValueError(
            f"{benchmark}: toy rows write {unknown}, outside the fixture's columns, and leave {unset} unset"
        )
    return {column: fields[column] if column in fields else at.template[column] for column in columns}


def toy_benchmark_rows(benchmark: str, rows: int, seed: int) -> pd.DataFrame:
    """``rows`` raw rows of ``benchmark`` in its hub schema, asking the toy task families.

    Deterministic in (benchmark, rows, seed); ids are distinct. The columns and their order are
    the bundled fixture's, so ``items.normalise`` reads the frame as it reads a hub download.
    """
    questions = draw_questions(benchmark, rows, seed)
    fixture = read_fixture(benchmark)
    columns = list(fixture.columns)
    template = template_row(benchmark, fixture)
    records = [
        _row(benchmark, question, Slot(index, _digest(benchmark, seed, index), template), columns)
        for index, question in enumerate(questions)
    ]
    return pd.DataFrame.from_records(records, columns=columns)


_CATEGORY = re.compile(r"Which of the following is an? (.+)\?")
_INTEGER = re.compile(r"-?\d+")


def toy_gold_response(item: Mapping[str, Any]) -> str:
    """The worked response the toy corpora teach for a toy benchmark item, rebuilt from the item.

    The family object's own ``response`` (never a typed copy): a sum from the first two integers
    of its question, a choice from its (shuffled) options and gold letter, a function or program
    by name or title, a truth chain whose answer is the item's. Teacher-forced likelihood scores
    this text at toy scale, where the shorter answer line alone would start off the distribution
    the toy models were trained on (they write the working first).
    """
    metadata = item["metadata"]
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    grader, answer, prompt = item["grader"], str(item["answer"]), str(item["prompt"])
    if grader == "math" or (grader == "livebench" and metadata.get("category") == "math"):
        a, b = (int(x) for x in _INTEGER.findall(prompt)[:2])
        task: Task = Sum(a, b, "", "")
        if str(task.value) != answer:
            raise ValueError(f"item {item['item_id']}: {a} + {b} is not its answer {answer}")
    elif grader == "multiple_choice":
        match = _CATEGORY.search(prompt)
        if match is None:
            raise ValueError(f"item {item['item_id']}: not a toy choice question")
        task = Choice(match.group(1), tuple(item["choices"]), OPTION_LETTERS.index(answer))
    elif grader in ("humaneval", "mbpp"):
        if grader == "humaneval":
            name = metadata["entry_point"]
        else:
            name = metadata["code"].split("(", 1)[0].removeprefix("def ")  # "def name(xs): ..."
        task = next(f for f in FUNCTIONS if f.name == name)
    elif grader == "livebench" and metadata.get("category") == "coding":
        task = next(p for p in STDIN_PROGRAMS if p.title == metadata["question_title"])
    elif grader == "livebench":
        truthful = [word == "yes" for word in answer.split(", ")]
        people, places = ("a", "b", "c"), ("x", "y", "z")
        claims = (truthful[1] != truthful[0], truthful[2] != truthful[1])
        task = TruthChain(people, places, truthful[0], claims)  # type: ignore[arg-type]
        if task.answer != answer:
            raise ValueError(f"item {item['item_id']}: {answer!r} is not a truth-chain answer")
    else:
        raise ValueError(f"item {item['item_id']}: no toy response for grader {grader!r}")
    return task.response
