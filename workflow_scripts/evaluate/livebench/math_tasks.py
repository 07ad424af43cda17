"""LiveBench Math scorers: competitions, olympiad proof rearrangement, AMPS_Hard.

Re-implements ``livebench/process_results/math/`` (math_competitions, olympiad, AMPS_Hard). The
snapshot's math split (368 rows) holds ``math_comp`` (AMC 12 / SMC letter answers and AIME
numbers), ``olympiad`` (IMO / USAMO proofs whose masked formulae must be put back in order) and
``AMPS_Hard`` (a boxed LaTeX expression checked by SymPy). AMPS_Hard is split in two steps so
that the SymPy check of a whole batch runs in one worker process with a timeout
(``math_equivalence.MathChecker``): ``amps_hard_prepare`` reads the answer and either decides at
once or returns an ``EquivalenceQuery`` that ``latex_equivalent`` resolves.

Two departures from LiveBench, both in the AMPS_Hard check: LaTeX is parsed with
latex2sympy2_extended (installed with math-verify) configured to read as SymPy's own parser does,
since SymPy's parser needs ``lark``, which is not installed; and there is no fallback to an LLM
judge (LiveBench asks an OpenAI model when SymPy finds no equivalence and an API key is set).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sympy
from latex2sympy2_extended import latex2sympy
from latex2sympy2_extended.latex2sympy2 import ConversionConfig

from workflow_scripts.evaluate.livebench.parsing import (
    UnparseableResponse,
    last_boxed_content,
    last_boxed_span,
    rewrite,
    solution_tags,
    unbox,
)

CHOICE_LETTERS = "ABCDE"
# AMC statements list options as "\textbf{(A) }value\qquad" (the last one ends at "$").
OPTION_VALUE = re.compile(r"\\textbf\{\(([A-E])\)\s?\}(.*?)(?:\\qquad|\$)")
# LiveBench accepts an option's value near the end of the response (this many characters plus its length).
OPTION_VALUE_SLACK = 20
# ... and an AIME answer anywhere in the last 50 characters.
AIME_TAIL = 50
# LiveBench prompts AMC answers as the letter repeated five times; four repeats suffice.
LETTER_REPEATS = 4
MISSING_OPTION = "FAILURE"
ANSWER_MARKER = "answer:"
BOXED_MARK = "\\boxed"
# Characters LiveBench strips from each comma-separated item of an "Answer:" line.
ANSWER_ITEM_CLUTTER = ("$", "{", "}", "\\", "boxed", "<", ">")
SUBSCRIPT_TWO = "₂"

# AMPS_Hard: rewrites of the response before reading it, then of the gold answer, in LiveBench's order.
AMPS_RESPONSE_REWRITES = (
    ("+C", ""),
    ("+ C", ""),
    ("+ c", ""),
    ("+c", ""),
    ("\\\\fbox{", "\\\\boxed{"),
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("\\left", ""),
    ("\\right", ""),
    ("\\bigl", ""),
    ("\\bigr", ""),
    ("\\Bigl", ""),
    ("\\Bigr", ""),
    ("\\,", ""),
    ("\\;", ""),
    ("\n", ""),
    ("\\cdot", "*"),
)
AMPS_GOLD_REWRITES = (("\\left", ""), ("\\right", ""), (" ^", "^"), ("\\ ", "*"))
# "a \quad \text{or} \quad b": LiveBench keeps the last alternative of a $...$ answer.
ALTERNATIVES = "\\quad \\text{or} \\quad"
# LiveBench waits up to 60 s for SymPy's simplification of gold minus answer.
AMPS_EQUIVALENCE_TIMEOUT_S = 60.0
# |gold - answer| below this after simplification also counts as equal.
NUMERIC_TOLERANCE = 0.001

# The final-answer normalisation of Lewkowycz et al. (2022, appendix D), which LiveBench applies.
FIRST_DOLLAR_SPAN = re.compile(r"(.*?)(\$)(.*?)(\$)(.*)")
TEXT_WRAPPERS = (
    re.compile(r"\\text\{(.*?)\}"),
    re.compile(r"\\textbf\{(.*?)\}"),
    re.compile(r"\\overline\{(.*?)\}"),
    re.compile(r"\\boxed\{(.*)\}"),
)
FRAC_SHORTHAND = re.compile(r"frac([^{])(.)")
SQRT_SHORTHAND = re.compile(r"sqrt([^{\[])")

# SymPy's LaTeX parser reads \log as the natural logarithm; latex2sympy reads it as base 10.
BARE_LOG = re.compile(r"\\log(?![A-Za-z_])")
# SymPy's LaTeX parser keeps symbol case and reads "2 \frac{1}{2}" as a product.
LATEX_CONVERSION = ConversionConfig(interpret_as_mixed_fractions=False, lowercase_symbols=False)


def _repeats_of(tag: str, answer: str) -> bool:
    """Whether ``tag`` is one character repeated (``"CCCCC"``) that equals ``answer`` ignoring case."""
    return len(set(tag)) == 1 and tag[0].lower() == answer.lower()


def option_value(question_text: str, letter: str) -> str:
    """The value printed after ``\\textbf{(letter) }`` in an AMC statement, or ``"FAILURE"``."""
    options = {found: value.strip() for found, value in OPTION_VALUE.findall(question_text)}
    value = options.get(letter) or MISSING_OPTION
    return value.strip().strip("$").strip("~")


def _last_line_names(response: str, letter: str) -> bool:
    """Whether the last line is the letter (bold allowed) or has it as its first parenthesis."""
    last_line = response.strip().split("\n")[-1]
    if last_line.strip().replace("*", "").lower() == letter.lower():
        return True
    if "(" in last_line and ")" in last_line:
        return last_line.split("(")[1].split(")")[0].lower() == letter.lower()
    return False


def math_contest_score(ground_truth: str, response: str, question_text: str) -> float:
    """AMC 12 / SMC (multiple choice, A-E): 1 if the response names the right option, else 0.

    Tried in LiveBench's order: the last ``<solution>`` tag holding the letter (repeated or not);
    the letter four times in a row anywhere; the last boxed letter; the option's value near the
    end of the response; the last line being the letter or having it in parentheses.
    """
    if not (isinstance(ground_truth, str) and len(ground_truth) == 1 and ground_truth in CHOICE_LETTERS):
        raise ValueError(f"an AMC/SMC ground truth must be one letter A-E, got {ground_truth!r}")
    tags = solution_tags(response)
    if tags and _repeats_of(tags[-1], ground_truth):
        return 1.0
    if ground_truth * LETTER_REPEATS in response:
        return 1.0
    response = response.replace("\\\\fbox{", "\\\\boxed{")
    boxed = last_boxed_content(response)
    if boxed is not None:
        letter = boxed.replace("\\text{", "").replace("}", "").replace("\\", "").lower()
        if letter == ground_truth.lower():
            return 1.0
    value = option_value(question_text, ground_truth)
    if value in response[-(OPTION_VALUE_SLACK + len(value)) :]:
        return 1.0
    return float(_last_line_names(response, ground_truth))


def aime_score(ground_truth: str, response: str) -> float:
    """AIME: 1 if the last ``<solution>`` tag is the answer's one character repeated, or the answer
    occurs in the last 50 characters; else 0."""
    tags = solution_tags(response)
    if tags and _repeats_of(tags[-1], ground_truth):
        return 1.0
    return float(ground_truth in response[-AIME_TAIL:])


def _first_digit_run(text: str) -> tuple[str, int]:
    """The first run of digits in ``text`` and how many characters are not in it."""
    start = 0
    while start < len(text) and not text[start].isdigit():
        start += 1
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    return text[start:end], len(text) - (end - start)


def _as_int(text: str) -> int | None:
    """``int(text)``, or None where Python's ``int`` rejects it."""
    try:
        return int(text)
    except ValueError:
        return None


def _answered(numbers: list[int | None]) -> list[int | None] | None:
    """The list, or None when it is empty or holds no number at all."""
    return numbers if any(number is not None for number in numbers) else None


def _answer_line_numbers(response: str) -> list[int | None] | None:
    """The items of the last line containing ``answer:`` (or of the next line, if it is empty there)."""
    lines = response.lower().strip().split("\n")
    index = max(i for i, line in enumerate(lines) if ANSWER_MARKER in line)

    def cleaned(line: str) -> str:
        return line.replace(ANSWER_MARKER, "").replace("**", "").replace(".", "").strip()

    answer = cleaned(lines[index].split(ANSWER_MARKER)[1])
    if answer == "" and index < len(lines) - 1:
        answer = cleaned(lines[index + 1])
    numbers = []
    for item in answer.split(","):
        token = item.strip().split(" ")[-1]
        for clutter in ANSWER_ITEM_CLUTTER:
            token = token.replace(clutter, "")
        numbers.append(_as_int(token))
    return _answered(numbers)


def _boxed_numbers(response: str) -> list[int | None] | None:
    """The comma-separated items of the last boxed span (or of the whole response if none closes)."""
    span = last_boxed_span(response)
    text = response if span is None else unbox(span)
    text = text.replace("\\text{", "").replace("}", "").replace("\\", "")
    return _answered([_as_int(item.strip()) for item in text.strip().split(",")])


def _last_line_numbers(response: str) -> list[int | None] | None:
    """The first digit run of each comma-separated item of the last line (items without digits skipped)."""
    last_line = response.strip().lower().split("\n")[-1]
    numbers = []
    for item in last_line.strip().split(","):
        digits, _ = _first_digit_run(item)
        if digits.strip():
            numbers.append(_as_int(digits.strip()))
    return _answered(numbers)


def _trailing_list_numbers(response: str) -> list[int]:
    """The numbers after the last ``answer:``, stopping after the first item with trailing clutter.

    A digit run Python cannot read as an integer (a superscript such as ``²``) makes LiveBench's
    scorer raise, that is, a score of 0; the subscript ``₂`` is skipped as LiveBench does.
    """
    items = [item.strip() for item in response.lower().split(ANSWER_MARKER)[-1].split(",")]
    numbers = []
    for position, item in enumerate(items):
        digits, removed = _first_digit_run(item)
        if digits not in ("", SUBSCRIPT_TWO):
            number = _as_int(digits)
            if number is None:
                raise UnparseableResponse(f"digit run {digits!r} is not an integer")
            numbers.append(number)
        if position > 0 and removed > 0:
            break
    return numbers


def proof_order(response: str) -> list[int | None]:
    """The expression ids a proof-rearrangement response gives, in order (None: an unreadable item).

    LiveBench's order: the last ``Answer:`` line; else the last boxed span (when ``\\boxed``
    occurs); else the last line; else the list after the last ``answer:``. A source counts only
    if it yields at least one number.
    """
    numbers = None
    if ANSWER_MARKER in response.lower():
        numbers = _answer_line_numbers(response)
    if numbers is None and BOXED_MARK in response:
        numbers = _boxed_numbers(response)
    if numbers is None:
        numbers = _last_line_numbers(response)
    if numbers is None:
        numbers = _trailing_list_numbers(response)
    return numbers


def edit_distance(first: list, second: list) -> int:
    """Levenshtein distance between two sequences (insertions, deletions, substitutions cost 1)."""
    previous = list(range(len(second) + 1))
    for i, item in enumerate(first, start=1):
        current = [i]
        for j, other in enumerate(second, start=1):
            substitution = previous[j - 1] + (item != other)
            current.append(min(previous[j] + 1, current[j - 1] + 1, substitution))
        previous = current
    return previous[-1]


def proof_rearrangement_score(ground_truth: str, response: str) -> float:
    """Olympiad (IMO / USAMO): ``1 - edit distance / max(length)`` between the given and true orders.

    Partial credit as LiveBench gives it (``edit_distance=True`` for imo/usamo): the Levenshtein
    distance between the response's id list and the ground truth's, over the longer list's length.
    """
    try:
        truth = [int(item) for item in ground_truth.split(",")]
    except ValueError as error:
        raise ValueError(
            f"an olympiad ground truth must be comma-separated integers, got {ground_truth!r}"
        ) from error
    given = proof_order(response)
    longest = max(len(given), len(truth))
    return 1.0 - edit_distance(given, truth) / longest if longest else 0.0


def normalize_final_answer(answer: str) -> str:
    """The final-answer normalisation of Lewkowycz et al. (2022, appendix D), as LiveBench uses it.

    Keeps the part after the last ``=``, the first ``$...$`` span, the content of text/bold/overline
    wrappers and of a box; braces ``\\fracab`` and ``\\sqrta`` shorthands; drops ``$`` signs and
    the commas of a plain number (``100,000`` -> ``100000``).
    """
    answer = answer.split("=")[-1]
    answer = FIRST_DOLLAR_SPAN.sub(r"$\3$", answer)
    for wrapper in TEXT_WRAPPERS:
        answer = wrapper.sub(r"\1", answer)
    answer = FRAC_SHORTHAND.sub(r"frac{\1}{\2}", answer)
    answer = SQRT_SHORTHAND.sub(r"sqrt{\1}", answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer


def _last_dollar_math(response: str) -> str | None:
    """The last ``$...$`` (or ``$$...$$``) span, right of its last ``=`` or last "or" alternative."""
    if response.count("$") < 2:
        return None
    close = response.rfind("$")
    if response[close - 1] == "$":
        close -= 1
    math = response[response.rfind("$", 0, close) + 1 : close]
    if "=" in math:
        return math.split("=")[-1].strip()
    if ALTERNATIVES in math:
        return math.split(ALTERNATIVES)[-1].strip()
    return math


@dataclass(frozen=True)
class EquivalenceQuery:
    """An AMPS_Hard answer to be checked against the gold expression by ``latex_equivalent``."""

    gold: str
    answer: str


def amps_hard_prepare(ground_truth: str, response: str) -> float | EquivalenceQuery:
    """Read an AMPS_Hard response: a score when no SymPy check is needed, else the check to run.

    LiveBench's order: the last boxed span, else the last ``$...$`` span (both normalised and then
    compared symbolically); failing both, 1 only if the response ends with the gold text (a final
    period ignored). A constant of integration (``+C``) and sizing commands are dropped first.
    """
    if not ground_truth.strip():
        raise ValueError("an AMPS_Hard ground truth must be a non-empty LaTeX expression")
    response = rewrite(response, AMPS_RESPONSE_REWRITES)
    gold = rewrite(ground_truth, AMPS_GOLD_REWRITES)
    answer = last_boxed_content(response)
    if answer is None:
        answer = _last_dollar_math(response)
    if answer is not None:
        return EquivalenceQuery(gold, normalize_final_answer(answer))
    response = response.removesuffix(".")
    return float(response[-len(gold) :] == gold)


def _parse_latex(text: str) -> sympy.Basic | None:
    """SymPy's reading of a LaTeX expression (retried with doubled backslashes halved), or None."""
    for candidate in (text, text.replace("\\\\", "\\")):
        try:
            return latex2sympy(BARE_LOG.sub(r"\\ln", candidate), conversion_config=LATEX_CONVERSION)
        except Exception:
            continue
    return None


def latex_equivalent(gold: str, answer: str) -> bool:
    """Whether ``gold - answer`` simplifies to 0 (or to a number below 0.001 in absolute value).

    LiveBench's SymPy check; any parse or SymPy failure counts as not equivalent. Unbounded in
    time: run it through ``MathChecker`` (``AMPS_EQUIVALENCE_TIMEOUT_S``).
    """
    parsed_gold, parsed_answer = _parse_latex(gold), _parse_latex(answer)
    if parsed_gold is None or parsed_answer is None:
        return False
    try:
        difference = sympy.simplify(parsed_gold - parsed_answer)
        if difference == 0:
            return True
        return bool(sympy.Abs(difference) < NUMERIC_TOLERANCE)
    except Exception:
        return False
