"""Deterministic answer extraction from model responses (Appendix F.3 of the paper).

Math answers follow F.3's fixed order: the last ``\\boxed{}`` span found by a brace-balanced
scan, else a ``####``-delimited final answer, else the last number in the response. Multiple
choice reads the ``Answer: X`` line the prompt template asks for, and code reads the single
fenced python block the code template asks for. Reasoning channels are removed first with
``strip_reasoning``; every function here is pure and callers compose them.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator

THINK_CLOSE = "</think>"
THINK_OPEN = "<think>"
# \boxed or \fbox as a whole command name (not the prefix of a longer one such as \boxedx).
BOXED_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# The single-token form "\boxed 5": a run up to the next whitespace or math delimiter.
BOXED_TOKEN = re.compile(r"[ \t]+([^\s$]+)")
WHITESPACE = re.compile(r"\s*")
GSM8K_DELIMITER = "####"
# A comma between a digit and exactly three digits: a thousands separator ("1,234" but not "1,2").
THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# A signed number with optional thousands commas and decimals. The sign only counts where it cannot
# be a binary minus/plus (not after a word character or a closing bracket: "10-3" ends in "3").
NUMBER = re.compile(r"(?:(?<![\w)\]}])[-+])?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|(?<![\w.])\.\d+")
# "Answer: X" within one line, case-insensitive keyword, optional markdown bold and brackets around
# the letter; the letter must not start a word ("Answer: Based on ..." is not an answer).
CHOICE = re.compile(
    r"(?i:\banswer)[ \t]*\**[ \t]*:[ \t]*\**[ \t]*[(\[]?[ \t]*([A-Z])[ \t]*[)\]]?(?![A-Za-z0-9])"
)
# A fenced block: the opening fence with its info string, then lazily up to the next closing fence.
FENCE = re.compile(r"(?ms)^[ \t]*```[ \t]*([^\n`]*)\n(.*?)^[ \t]*```")
PYTHON_TAGS = frozenset({"python", "py", "python3"})


def strip_reasoning(text: str) -> str:
    """Remove reasoning channels so that only the final completion is graded.

    Closed ``<think>...</think>`` blocks are dropped; if a closing tag remains without its opening
    (chat templates that put ``<think>`` in the prompt), everything up to the last one is dropped;
    an opening tag left unclosed (a generation truncated while reasoning) drops the rest of the text,
    since no final answer was given. One pass with ``str.find`` (a lazy regex rescans to the end
    for every unclosed opening tag, which is quadratic).
    """
    kept = []
    position = 0
    while (opening := text.find(THINK_OPEN, position)) != -1:
        closing = text.find(THINK_CLOSE, opening + len(THINK_OPEN))
        if closing == -1:
            break
        kept.append(text[position:opening])
        position = closing + len(THINK_CLOSE)
    kept.append(text[position:])
    text = "".join(kept)
    if THINK_CLOSE in text:
        text = text.rsplit(THINK_CLOSE, 1)[1]
    if THINK_OPEN in text:
        text = text.split(THINK_OPEN, 1)[0]
    return text


def _unescaped_braces(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """Index and character of each ``{`` and ``}`` from ``start`` on that no backslash escapes."""
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char in "{}":
            yield i, char
        i += 1


def read_braced(text: str, start: int) -> tuple[str, int] | None:
    """Content of the brace group opening at ``text[start] == "{"`` and the index after its closing brace.

    A brace-balanced scan (F.3), so nested groups survive; a backslash escapes the next character, so
    ``\\{`` and ``\\}`` do not count. Returns None when the group is never closed.
    """
    if start >= len(text) or text[start] != "{":
        raise ValueError(f"read_braced: no '{{' at index {start}")
    depth = 0
    for i, char in _unescaped_braces(text, start):
        depth += 1 if char == "{" else -1
        if depth == 0:
            return text[start + 1 : i], i + 1
    return None


def closing_braces(text: str) -> dict[int, int]:
    """For each ``{`` that :func:`read_braced` would close, the index after its closing brace.

    One stack-based pass instead of one scan per opening brace (quadratic for a response of
    unclosed ``\\boxed{``). It agrees with :func:`read_braced` for every brace not preceded by a
    backslash: the scan from such a brace meets exactly the characters this pass does after it.
    """
    closes: dict[int, int] = {}
    open_braces: list[int] = []
    for i, char in _unescaped_braces(text):
        if char == "{":
            open_braces.append(i)
        elif open_braces:
            closes[open_braces.pop()] = i + 1
    return closes


def _boxed_content(text: str, after_command: int, closes: dict[int, int]) -> str | None:
    """The argument of a ``\\boxed``/``\\fbox`` command ending at ``after_command``, or None."""
    brace = WHITESPACE.match(text, after_command).end()
    if text[brace : brace + 1] == "{":
        end = closes.get(brace)
        content = text[brace + 1 : end - 1].strip() if end is not None else ""
    else:
        token = BOXED_TOKEN.match(text, after_command)
        content = token.group(1) if token else ""
    return content or None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``) in ``text`` (F.3).

    Occurrences are tried from the last one backwards; one whose braces never balance, or whose
    content is empty, is skipped. Linear in the length of ``text``.
    """
    matches = list(BOXED_COMMAND.finditer(text))
    if not matches:
        return None
    closes = closing_braces(text)
    for match in reversed(matches):
        content = _boxed_content(text, match.end(), closes)
        if content is not None:
            return content
    return None


def drop_thousands_commas(text: str) -> str:
    """Remove commas used as thousands separators (``1,234,567`` -> ``1234567``; ``1,2`` is kept)."""
    return THOUSANDS_COMMA.sub("", text)


def _after_delimiter(text: str) -> str | None:
    """The first line after the last ``####`` (GSM8K's final-answer marker), or None if absent or empty."""
    if GSM8K_DELIMITER not in text:
        return None
    line = text.rsplit(GSM8K_DELIMITER, 1)[1].split("\n", 1)[0].strip()
    return drop_thousands_commas(line) or None


def _last_number(text: str) -> str | None:
    """The last number in ``text``, without thousands commas or a leading ``+``, or None."""
    numbers = NUMBER.findall(text)
    if not numbers:
        return None
    return drop_thousands_commas(numbers[-1]).removeprefix("+")


def extract_math_answer(text: str) -> str | None:
    """The final answer of a math response, in the fixed order of Appendix F.3.

    The last boxed span (brace-balanced); failing that, the first line after the last ``####``;
    failing that, the last number in the response (``-1,234.5`` -> ``-1234.5``); else None.
    Thousands commas are removed from the last two forms.
    """
    for extractor in (last_boxed, _after_delimiter, _last_number):
        answer = extractor(text)
        if answer is not None:
            return answer
    return None


def extract_choice(text: str, n_options: int) -> str | None:
    """The option letter of a multiple-choice response (the F.3 template's ``Answer: X`` line).

    The last ``Answer: X`` in the response decides, tolerating a lower-case keyword, markdown bold
    (``**Answer:** B``, ``**Answer: B**``), brackets (``(B)``) and trailing punctuation. The letter
    must be upper case (the template asks for the option letter; a lower-case one is ambiguous with
    an English word, as in ``Answer: a bit of both``), and it must name one of the first
    ``n_options`` options (A..J for MMLU-Pro's ten); a last answer line outside that range gives
    None rather than falling back to an earlier line.
    """
    if not 1 <= n_options <= len(string.ascii_uppercase):
        raise ValueError(f"extract_choice: n_options must be in 1..26, got {n_options}")
    matches = CHOICE.findall(text)
    if not matches:
        return None
    letter = matches[-1]
    return letter if letter in string.ascii_uppercase[:n_options] else None


def extract_code(text: str) -> str | None:
    """The program of a code response (the F.3 template asks for a single fenced python block).

    Only closed fences count. The last block tagged ``python``/``py``/``python3`` (any case) wins;
    with none tagged, the last untagged block; blocks tagged with another language are ignored;
    with neither, None.
    """
    tagged: list[str] = []
    untagged: list[str] = []
    for info, body in FENCE.findall(text):
        words = info.split()
        tag = words[0].lower() if words else ""
        if tag in PYTHON_TAGS:
            tagged.append(body)
        elif not tag:
            untagged.append(body)
    blocks = tagged or untagged
    return blocks[-1] if blocks else None
