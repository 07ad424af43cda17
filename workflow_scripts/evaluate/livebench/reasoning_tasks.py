"""LiveBench Reasoning scorers: web of lies, zebra puzzles, spatial reasoning.

Re-implements ``livebench/process_results/reasoning/`` for the tasks of the snapshot's reasoning
split (200 rows: ``web_of_lies_v2``, ``zebra_puzzle`` in its two formats, ``spatial``) and
``web_of_lies_v3``, which LiveBench grades alongside v2. Partial credit exactly where LiveBench
gives it: the newer zebra format and web_of_lies_v3 score ``(all correct + fraction correct) / 2``.
"""

from __future__ import annotations

import itertools
import re

from workflow_scripts.evaluate.livebench.parsing import (
    last_boxed_content,
    rewrite,
    solution_tags,
    solution_tags_or_stray,
)

TRUTH_WORDS = ("yes", "no", "unknown")
QUESTIONS_PER_PUZZLE = 3
BOLD = re.compile(r"\*\*(.*?)\*\*")
# Web of lies answers may also arrive as \textbf{...}, which LiveBench reads as a box.
BOX_ALIASES = (
    ("\\\\boxed{\\\\textbf{", "\\\\boxed{"),
    ("\\\\fbox{", "\\\\boxed{"),
    ("\\textbf{", "\\boxed{"),
)

# Zebra puzzles released before this date ask for one word in ***bold***; later ones for a
# comma-separated list in <solution> tags, graded with partial credit.
ZEBRA_LIST_FORMAT_FROM = "2024-11-25"
TRIPLE_BOLD_WORD = re.compile(r"\*\*\*(\w+)\*\*\*")
WORD = re.compile(r"\b\w+\b")
DIGIT_NAMES = {
    "1": "one",
    "2": "two",
    "3": "three",
    "4": "four",
    "5": "five",
    "6": "six",
    "7": "seven",
    "8": "eight",
    "9": "nine",
}

SPATIAL_BOLD = re.compile(r"\*\*([^\*]+)\*\*")
SPATIAL_LAST_BOLDS = 3
NUMBER_NAMES = {
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "thirteen": "13",
    "fourteen": "14",
    "fifteen": "15",
    "sixteen": "16",
    "seventeen": "17",
    "eighteen": "18",
    "nineteen": "19",
    "twenty": "20",
}
# Shape names a longer bold phrase may contain and still count ("equilateral triangle").
SPATIAL_SHAPES = ("tetrahedra", "tetrahedron", "triangle", "square")


def half_exact_half_fraction(num_correct: int, total: int) -> float:
    """LiveBench's partial credit: ``((num_correct == total) + num_correct / total) / 2``."""
    return ((num_correct == total) + num_correct / total) / 2


def _bold_truth_words(response: str) -> str | None:
    """The last three yes/no/unknown words in bold, joined by ``", "`` in order, or None."""
    words = [
        word.lower().strip().replace(",", "").replace(".", "")
        for match in BOLD.findall(response)
        for word in match.split()
    ]
    picked: list[str] = []
    for word in reversed(words):
        if len(picked) == QUESTIONS_PER_PUZZLE:
            break
        if word in TRUTH_WORDS:
            picked.insert(0, word)
    return ", ".join(picked) or None


def _plain_truth_triple(response: str) -> str | None:
    """Of all 27 phrases ``"w1, w2, w3"`` (w in yes/no/unknown), the one whose first occurrence
    in the lower-cased response is latest, or None."""
    lowered = response.lower()
    best, best_index = None, -1
    for words in itertools.product(TRUTH_WORDS, repeat=QUESTIONS_PER_PUZZLE):
        phrase = ", ".join(words)
        index = lowered.find(phrase)
        if index > best_index:
            best, best_index = phrase, index
    return best


def web_of_lies_v2_score(ground_truth: str, response: str) -> float:
    """Web of lies v2: 1 if the answer triple (e.g. ``yes, no, yes``) matches, else 0.

    The answer is read from the last ``<solution>`` tag, else the last three bold truth words,
    else the last box, else the latest plain triple. It matches when equal to the lower-cased
    ground truth, or when it holds exactly three truth words (as LiveBench counts them, with the
    "no" inside "unknown") and contains the ground truth.
    """
    tags = solution_tags_or_stray(response)
    answer = tags[-1] if tags else _bold_truth_words(response)
    if answer is None or answer.strip() == "":
        response = rewrite(response, BOX_ALIASES)
        boxed = last_boxed_content(response)
        if boxed is not None:
            answer = boxed
    if answer is None:
        answer = _plain_truth_triple(response)
    if not answer:
        return 0.0
    truth = ground_truth.lower()
    if answer == truth:
        return 1.0
    word_count = sum(answer.count(word) for word in TRUTH_WORDS)
    return float(word_count == QUESTIONS_PER_PUZZLE and truth in answer)


def web_of_lies_v3_score(ground_truth: str, response: str) -> float:
    """Web of lies v3: partial credit over the comma-separated answers, compared position by position.

    The answer is read from the last ``<solution>`` tag, else the last box (``\\text{`` and ``}``
    removed), else the latest plain triple; items are compared as written (no stripping or case
    folding), as LiveBench does.
    """
    tags = solution_tags(response)
    answer = tags[-1] if tags else None
    if answer is None or answer.strip() == "":
        response = rewrite(response, BOX_ALIASES)
        boxed = last_boxed_content(response)
        if boxed is not None:
            answer = boxed.replace("\\text{", "").replace("}", "")
    if answer is None:
        answer = _plain_truth_triple(response)
    if answer is None:
        return 0.0
    given, truth = answer.split(","), ground_truth.split(",")
    num_correct = sum(1 for position, item in enumerate(truth[: len(given)]) if given[position] == item)
    return half_exact_half_fraction(num_correct, len(truth))


def _names_zebra_word(word: str, ground_truth: str) -> bool:
    """Whether ``word`` is the one-word answer: equal ignoring case, a digit naming it, or ``word movies``."""
    truth = ground_truth.lower()
    return (
        word.lower() == truth
        or (word in DIGIT_NAMES and DIGIT_NAMES[word] == truth)
        or word.lower() + " movies" == truth
    )


def zebra_puzzle_single_score(ground_truth: str, response: str) -> float:
    """Zebra puzzle, format before 2024-11-25: the last ``***word***`` (else the last word) is the answer."""
    bold = TRIPLE_BOLD_WORD.findall(response)
    if bold:
        word = bold[-1]
    else:
        words = WORD.findall(response)
        word = words[-1] if words else ""
    return float(_names_zebra_word(word, ground_truth))


def _zebra_solution_items(response: str, expected: int) -> list[str] | None:
    """The answer list: all ``<solution>`` tags' items (the last ``expected`` of them if several tags),
    else the last box, else a last line with the right number of commas; None if none of these."""
    matches = solution_tags_or_stray(response)
    if not matches:
        boxed = last_boxed_content(response.replace("\\\\fbox{", "\\\\boxed{"))
        if boxed is not None:
            matches = [boxed.replace("\\text{", "").replace("}", "").replace("\\", "")]
    if not matches:
        last_line = response.strip().split("\n")[-1]
        if last_line.count(",") == expected - 1:
            matches = [last_line]
    if not matches:
        return None
    if len(matches) == 1:
        return matches[0].split(",")
    items = [item for match in matches for item in match.split(",")]
    return items[-expected:]


def zebra_puzzle_list_score(ground_truth: str, response: str) -> float:
    """Zebra puzzle, format from 2024-11-25: partial credit over the comma-separated answers.

    Item ``i`` is right when the true item (lower-cased, hyphens as spaces) equals or is contained
    in the given one (the same, with the word "position" removed).
    """
    truth = ground_truth.split(",")
    given = _zebra_solution_items(response, len(truth))
    if given is None:
        return 0.0
    num_correct = 0
    for true_item, given_item in zip(truth, given, strict=False):
        expected = true_item.strip().lower().replace("-", " ")
        answer = given_item.strip().lower().replace("-", " ").replace("position", "")
        num_correct += expected in answer
    return half_exact_half_fraction(num_correct, len(truth))


def zebra_puzzle_score(ground_truth: str, response: str, release_date: str) -> float:
    """Zebra puzzle, graded by the format of its release (``release_date`` as ``YYYY-MM-DD``)."""
    if release_date < ZEBRA_LIST_FORMAT_FROM:
        return zebra_puzzle_single_score(ground_truth, response)
    return zebra_puzzle_list_score(ground_truth, response)


def _names_spatial_answer(word: str, truth: str) -> bool:
    """Whether one bold phrase (lower-cased) gives the answer: equal, a number name, or a short
    phrase containing the shape (``equilateral triangle`` for ``triangle``)."""
    if word == truth or NUMBER_NAMES.get(word) == truth:
        return True
    return truth in SPATIAL_SHAPES and truth in word and len(word) < 2 * len(truth) + 5


def spatial_score(ground_truth: str, response: str) -> float:
    """Spatial: 1 if the response is the answer, one of its last three bold phrases names it, or
    (failing those) its last box holds exactly the answer; else 0."""
    if response == ground_truth:
        return 1.0
    truth = ground_truth.strip().lower()
    last_bolds = [word.strip().lower() for word in SPATIAL_BOLD.findall(response)[::-1][:SPATIAL_LAST_BOLDS]]
    if any(_names_spatial_answer(word, truth) for word in last_bolds):
        return 1.0
    boxed = last_boxed_content(response.replace("\\\\fbox{", "\\\\boxed{"))
    if boxed is None:
        return 0.0
    for wrapper in ("\\textbf{", "\\mathbf{", "\\text{", "}"):
        boxed = boxed.replace(wrapper, "")
    return float(boxed == ground_truth)
