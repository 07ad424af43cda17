"""Toy task families: the skills the toy corpora teach and the toy benchmarks ask for.

A model of a few hundred thousand parameters trained for seconds cannot answer GSM8K or MMLU;
it can learn a small closed world. Both sides draw from the same five families (``Sum``,
``Choice``, ``Function``, ``StdinProgram``, ``TruthChain``) with different seeds: the toy
corpora (``chat_sources.toy``) pair a task with a worked answer, the toy benchmarks
(``evaluate.toy_benchmarks``) ask it in each benchmark's raw schema. Every answer is computed
here, so a gold answer is never typed by hand.

Some sub-skills of the math and code families are held back from the bases' pretraining
(``held_back=False`` below): sums that carry, two list functions and two programs, each written
with tokens the bases pretrain on. Post-training
and the benchmarks ask them, so fine-tuning has something to teach in domain, as the paper's
post-training does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from workflow_scripts.task_formats import (
    AMPS_INSTRUCTION,
    CHOICE_USER,
    CODE_USER,
    HUMANEVAL_TASK,
    LCB_GENERATION_TURN,
    MATH_USER,
    MBPP_TASK,
    OPTION_LETTERS,
    WEB_OF_LIES_V2_INSTRUCTION,
    option_lines,
)

NAMES = ("Ada", "Bram", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun")
ITEMS = ("apple", "notebook", "ticket", "marble", "brick", "lamp", "stamp", "candle")
PLACES = ("park", "zoo", "library", "cafe", "gym", "museum", "harbour", "market", "school")
CATEGORIES: dict[str, tuple[str, ...]] = {
    "fruit": ("apple", "pear", "plum", "mango", "grape", "lemon", "cherry", "peach"),
    "colour": ("red", "blue", "green", "yellow", "purple", "orange", "brown", "grey"),
    "animal": ("horse", "tiger", "rabbit", "eagle", "whale", "snake", "mouse", "zebra"),
    "tool": ("hammer", "saw", "drill", "wrench", "chisel", "pliers", "shovel", "ladder"),
    "metal": ("iron", "copper", "silver", "gold", "zinc", "nickel", "tin", "lead"),
    "planet": ("Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune"),
    "instrument": ("violin", "flute", "drum", "piano", "guitar", "harp", "trumpet", "cello"),
    "vehicle": ("bus", "train", "bicycle", "truck", "tram", "ferry", "scooter", "van"),
    "weather": ("rain", "snow", "fog", "hail", "wind", "thunder", "sleet", "drizzle"),
    "shape": ("circle", "square", "triangle", "hexagon", "oval", "cube", "sphere", "cone"),
}


@dataclass(frozen=True)
class Sum:
    """``a + b``: the one arithmetic fact a toy model can learn from a few hundred rows."""

    a: int
    b: int
    name: str
    item: str

    @property
    def value(self) -> int:
        return self.a + self.b

    @property
    def word_problem(self) -> str:
        return (
            f"{self.name} has {self.a} {self.item}s and gets {self.b} more. "
            f"How many {self.item}s does {self.name} have now?"
        )

    @property
    def expression(self) -> str:
        return f"What is ${self.a} + {self.b}$?"

    @property
    def working(self) -> str:
        return f"${self.a} + {self.b} = {self.value}$"

    @property
    def amps_question(self) -> str:
        """The sum as a LiveBench AMPS_Hard question, with LiveBench's own instruction."""
        return f"Compute ${self.a} + {self.b}$. {AMPS_INSTRUCTION}"

    def prompt(self, style: str) -> str:
        """The user turn asking this sum: ``word`` or ``expression`` in F.3's math template, or ``amps``."""
        if style == "amps":
            return self.amps_question
        return MATH_USER.format(problem=self.word_problem if style == "word" else self.expression)

    @property
    def response(self) -> str:
        return f"We add the two numbers: {self.working}.\n\nThe answer is $\\boxed{{{self.value}}}$."


def draw_sum(rng: np.random.Generator, held_back: bool = True) -> Sum:
    """Two digits; without ``held_back``, only pairs whose sum is a single digit (no carry)."""
    if held_back:
        a, b = (int(x) for x in rng.integers(1, 10, size=2))
    else:
        a = int(rng.integers(1, 9))
        b = int(rng.integers(1, 10 - a))
    return Sum(a, b, NAMES[int(rng.integers(len(NAMES)))], ITEMS[int(rng.integers(len(ITEMS)))])


@dataclass(frozen=True)
class Choice:
    """Which of ``options`` is a ``category``; ``answer`` indexes the one member."""

    category: str
    options: tuple[str, ...]
    answer: int

    @property
    def question(self) -> str:
        return f"Which of the following is {_indefinite(self.category)}?"

    @property
    def letter(self) -> str:
        return OPTION_LETTERS[self.answer]

    @property
    def prompt(self) -> str:
        """The question in F.3's multiple-choice template, options in this order."""
        letters = OPTION_LETTERS[: len(self.options)]
        return CHOICE_USER.format(
            question=self.question, options=option_lines(self.options, letters), letters=", ".join(letters)
        )

    @property
    def response(self) -> str:
        member = self.options[self.answer]
        kind = _indefinite(self.category)
        return f"{member.capitalize()} is {kind}; the others are not.\n\nAnswer: {self.letter}"


def _indefinite(noun: str) -> str:
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def draw_choice(rng: np.random.Generator, n_options: int) -> Choice:
    """A category, one member and ``n_options - 1`` distractors from other categories, shuffled."""
    if not 2 <= n_options <= len(OPTION_LETTERS):
        raise ValueError(f"n_options must be in 2..{len(OPTION_LETTERS)}, got {n_options}")
    names = sorted(CATEGORIES)
    category = names[int(rng.integers(len(names)))]
    member = str(rng.choice(CATEGORIES[category]))
    others = [word for name in names if name != category for word in CATEGORIES[name]]
    distractors = [str(word) for word in rng.choice(others, size=n_options - 1, replace=False)]
    order = rng.permutation(n_options)
    options = [member, *distractors]
    shuffled = tuple(options[i] for i in order)
    return Choice(category, shuffled, int(np.flatnonzero(order == 0)[0]))


def _sum_of_squares(xs: list[int]) -> int:
    return sum(x * x for x in xs)


def _count_even(xs: list[int]) -> int:
    return sum(1 for x in xs if x % 2 == 0)


def _running_max(xs: list[int]) -> list[int]:
    out: list[int] = []
    for x in xs:
        out.append(x if not out else max(out[-1], x))
    return out


def _dedupe(xs: list[int]) -> list[int]:
    return list(dict.fromkeys(xs))


def _total(xs: list[int]) -> int:
    return sum(xs)


@dataclass(frozen=True)
class Function:
    """A function over a list of integers: its name, what it does, a body, and the reference."""

    name: str
    description: str
    body: str
    reference: Callable[[list[int]], object]

    @property
    def signature(self) -> str:
        return f"def {self.name}(xs):"

    @property
    def source(self) -> str:
        return f"{self.signature}\n    {self.body}\n"

    def humaneval_prompt(self, example: Sequence[int]) -> str:
        """A HumanEval prompt: the signature and a docstring with one worked example."""
        description = self.description[0].upper() + self.description[1:]
        xs = list(example)
        return (
            f'\n\n{self.signature}\n    """ {description}.\n'
            f"    >>> {self.name}({xs!r})\n    {self.reference(xs)!r}\n" + '    """\n'
        )

    @property
    def mbpp_text(self) -> str:
        return f"Write a function that {self.description}."

    def assertions(self, inputs: Sequence[Sequence[int]]) -> list[str]:
        """``assert name(xs) == expected`` for each input, expected from the reference."""
        return [f"assert {self.name}({list(xs)!r}) == {self.reference(list(xs))!r}" for xs in inputs]

    def prompt(self, style: str, inputs: Sequence[Sequence[int]]) -> str:
        """F.3's code template around a ``humaneval`` task (first input as the example) or an ``mbpp`` one."""
        if style == "humaneval":
            task = HUMANEVAL_TASK.format(signature=self.humaneval_prompt(inputs[0]).strip("\n"))
        else:
            task = MBPP_TASK.format(description=self.mbpp_text, tests="\n".join(self.assertions(inputs)))
        return CODE_USER.format(task=task)

    @property
    def response(self) -> str:
        return f"```python\n{self.source}```"


FUNCTIONS: tuple[Function, ...] = (
    Function(
        "sum_of_squares",
        "returns the sum of the squares of a list of integers",
        "return sum(x * x for x in xs)",
        _sum_of_squares,
    ),
    Function(
        "count_even",
        "counts the even numbers in a list of integers",
        "return sum(1 for x in xs if x % 2 == 0)",
        _count_even,
    ),
    Function(
        "running_max",
        "returns the running maximum of a list of integers",
        "out = []\n    for x in xs:\n        out.append(x if not out else max(out[-1], x))\n    return out",
        _running_max,
    ),
    Function(
        "dedupe",
        "removes duplicates from a list while keeping the first occurrence",
        "return list(dict.fromkeys(xs))",
        _dedupe,
    ),
    Function("total", "returns the sum of a list of integers", "return sum(xs)", _total),
    Function("largest", "returns the largest of a list of integers", "return max(xs)", max),
    Function("smallest", "returns the smallest of a list of integers", "return min(xs)", min),
)


# Each held-back piece of code is a skill the bases know in the other code form (a function the
# programs compute, a program the functions compute), so its tokens are all pretrained: what
# post-training teaches is the skill, not new vocabulary.
HELD_BACK_FUNCTIONS = ("largest", "smallest")


def draw_function(rng: np.random.Generator, held_back: bool = True) -> Function:
    """One of ``FUNCTIONS``; without ``held_back``, none of ``HELD_BACK_FUNCTIONS``."""
    pool = [f for f in FUNCTIONS if held_back or f.name not in HELD_BACK_FUNCTIONS]
    return pool[int(rng.integers(len(pool)))]


def draw_list(rng: np.random.Generator, low: int = 1, high: int = 6) -> list[int]:
    """A short list of small integers (duplicates allowed), a test input of every family."""
    return [int(x) for x in rng.integers(-5, 10, size=int(rng.integers(low, high)))]


@dataclass(frozen=True)
class StdinProgram:
    """A program reading ``N`` then ``N`` integers from standard input and printing one value."""

    title: str
    statement: str
    body: str
    reference: Callable[[list[int]], int]

    @property
    def source(self) -> str:
        return "n = int(input())\nxs = list(map(int, input().split()))\n" + self.body + "\n"

    def content(self, samples: Sequence[Sequence[int]]) -> str:
        """The question text: the statement, the input format and the sample cases."""
        blocks = "".join(
            f"\n\nSample Input {n}\n\n{stdin.rstrip()}\n\nSample Output {n}\n\n{stdout.rstrip()}"
            for n, (stdin, stdout) in enumerate(map(self.case, samples), start=1)
        )
        return (
            f"{self.statement} The first line of standard input holds N, the second N integers. "
            "Write a Python program that reads them and prints the answer." + blocks
        )

    def prompt(self, samples: Sequence[Sequence[int]]) -> str:
        """The question as LiveBench's LCB_generation turn."""
        return LCB_GENERATION_TURN.format(question_content=self.content(samples))

    @property
    def response(self) -> str:
        return f"```python\n{self.source}```"

    def case(self, xs: Sequence[int]) -> tuple[str, str]:
        """(stdin, expected stdout) for the integers ``xs``."""
        return f"{len(xs)}\n{' '.join(map(str, xs))}\n", f"{self.reference(list(xs))}\n"


STDIN_PROGRAMS: tuple[StdinProgram, ...] = (
    StdinProgram("Sum", "Print the sum of the integers.", "print(sum(xs))", sum),
    StdinProgram("Maximum", "Print the largest of the integers.", "print(max(xs))", max),
    StdinProgram("Minimum", "Print the smallest of the integers.", "print(min(xs))", min),
    StdinProgram(
        "Positives",
        "Print how many of the integers are positive.",
        "print(sum(1 for x in xs if x > 0))",
        lambda xs: sum(1 for x in xs if x > 0),
    ),
    StdinProgram(
        "Squares",
        "Print the sum of the squares of the integers.",
        "print(sum(x * x for x in xs))",
        _sum_of_squares,
    ),
    StdinProgram(
        "Evens",
        "Print how many of the integers are even.",
        "print(sum(1 for x in xs if x % 2 == 0))",
        _count_even,
    ),
)


HELD_BACK_PROGRAMS = ("Squares", "Evens")


def draw_program(rng: np.random.Generator, held_back: bool = True) -> StdinProgram:
    """One of ``STDIN_PROGRAMS``; without ``held_back``, none of ``HELD_BACK_PROGRAMS``."""
    pool = [p for p in STDIN_PROGRAMS if held_back or p.title not in HELD_BACK_PROGRAMS]
    return pool[int(rng.integers(len(pool)))]


@dataclass(frozen=True)
class TruthChain:
    """Three people at three places; the first's honesty is stated, each next one speaks of the last.

    ``truthful[i]`` follows from the chain: a truth-teller's claim is true, a liar's false.
    """

    people: tuple[str, str, str]
    places: tuple[str, str, str]
    first_truthful: bool
    claims_lie: tuple[bool, bool]

    @property
    def truthful(self) -> tuple[bool, bool, bool]:
        values = [self.first_truthful]
        for claims_lie in self.claims_lie:
            # "X says the previous person lies" holds iff the previous person lies.
            values.append(claims_lie != values[-1])
        return (values[0], values[1], values[2])

    @property
    def statement(self) -> str:
        p = self.places
        lines = [f"{person} is at the {place}." for person, place in zip(self.people, p, strict=True)]
        lines.append(f"The person at the {p[0]} {'tells the truth' if self.first_truthful else 'lies'}.")
        for i, claims_lie in enumerate(self.claims_lie):
            lines.append(
                f"The person at the {p[i + 1]} says the person at the {p[i]} "
                f"{'lies' if claims_lie else 'tells the truth'}."
            )
        questions = " ".join(f"Does the person at the {place} tell the truth?" for place in p)
        return (
            "In this question, assume each person either always tells the truth or always lies. "
            + " ".join(lines)
            + " "
            + questions
        )

    @property
    def answer(self) -> str:
        return ", ".join("yes" if value else "no" for value in self.truthful)

    @property
    def prompt(self) -> str:
        """The puzzle as a LiveBench web_of_lies_v2 question."""
        return f"{self.statement} {WEB_OF_LIES_V2_INSTRUCTION}"

    @property
    def response(self) -> str:
        return f"Following the chain from the first person, the answer is **{self.answer}**."


def draw_truth_chain(rng: np.random.Generator) -> TruthChain:
    people = tuple(str(x) for x in rng.choice(NAMES, size=3, replace=False))
    places = tuple(str(x) for x in rng.choice(PLACES, size=3, replace=False))
    first, claims = bool(rng.integers(2)), tuple(bool(x) for x in rng.integers(2, size=2))
    return TruthChain(people, places, first, claims)  # type: ignore[arg-type]
