"""Response-reading helpers shared by LiveBench's scorers (``livebench/process_results/util.py``).

LiveBench locates boxed answers with its own scan, which differs from the brace-balanced
extraction of Appendix F.3 (``extraction.last_boxed``) in ways that change scores: a
``\\boxed `` token anywhere wins over every braced box, ``$`` signs are dropped from the span, and
a span that does not have the ``\\boxed{...}`` shape makes LiveBench's scorer raise, which its
dispatcher records as a score of 0. ``UnparseableResponse`` carries that outcome here.
"""

from __future__ import annotations

import re

BOXED = "\\boxed"
BOXED_TOKEN = "\\boxed "
BOXED_BRACE = "\\boxed{"
FBOX = "\\fbox"
# LiveBench reads answer tags within one line (no DOTALL), the last pair deciding.
SOLUTION_TAG = re.compile(r"<solution>(.*?)</solution>")
# A stray closing tag used as an opening one: "</solution>yes</solution>".
STRAY_SOLUTION_TAG = re.compile(r"</solution>(.*?)</solution>")


class UnparseableResponse(Exception):
    """A response on which LiveBench's parser fails; LiveBench scores such a response 0."""


def last_boxed_span(text: str) -> str | None:
    """The last ``\\boxed{...}`` (or ``\\fbox{...}``) span of ``text``, as LiveBench finds it.

    If ``\\boxed `` (with a space) occurs anywhere, the span is that token's text up to the next
    ``$``. Otherwise the scan starts at the last ``\\boxed`` (else the last ``\\fbox``) and ends
    at the first ``}`` that closes every brace opened since; ``$`` signs are removed and
    ``fbox`` becomes ``boxed``. None when there is no box or its braces never balance.
    """
    if BOXED_TOKEN in text:
        return BOXED_TOKEN + text.split(BOXED_TOKEN)[-1].split("$")[0]
    start = text.rfind(BOXED)
    if start < 0:
        start = text.rfind(FBOX)
        if start < 0:
            return None
    depth = 0
    for position in range(start, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[start : position + 1].replace("$", "").replace("fbox", "boxed")
    return None


def unbox(span: str) -> str:
    """The content of a span from ``last_boxed_span``; raises ``UnparseableResponse`` if malformed."""
    if BOXED_TOKEN in span:
        if not span.startswith(BOXED_TOKEN):
            raise UnparseableResponse(f"boxed span {span[:40]!r} does not start with '\\boxed '")
        return span[len(BOXED_TOKEN) :]
    if not (span.startswith(BOXED_BRACE) and span.endswith("}")):
        raise UnparseableResponse(f"boxed span {span[:40]!r} is not of the form \\boxed{{...}}")
    return span[len(BOXED_BRACE) : -1]


def last_boxed_content(text: str) -> str | None:
    """The content of the last boxed span of ``text`` (see ``last_boxed_span``), or None."""
    span = last_boxed_span(text)
    return None if span is None else unbox(span)


def rewrite(text: str, replacements: tuple[tuple[str, str], ...]) -> str:
    """Apply plain-text replacements in order (LiveBench's chains of ``str.replace``)."""
    for old, new in replacements:
        text = text.replace(old, new)
    return text


def solution_tags(text: str) -> list[str]:
    """The contents of every one-line ``<solution>...</solution>`` pair, in order."""
    return SOLUTION_TAG.findall(text)


def solution_tags_or_stray(text: str) -> list[str]:
    """``solution_tags``, or when there are none, the contents between stray closing-tag pairs."""
    return solution_tags(text) or STRAY_SOLUTION_TAG.findall(text)
