"""The deterministic corpus scorer of Appendix F.2.

``score = length term + domain term - penalty_weight x (number of hard penalties)``

No model is in the loop: every component is a capped count or a piecewise function of lengths
(in Unicode code points after stripping White_Space), computed for all rows at once with polars'
string kernels; ``score_frame`` collects them into ``c_*`` columns and the penalties into ``p_*``.
Patterns are written for Rust's ``regex`` engine and mean what Python's ``re`` with ``re.ASCII``
means, as in the per-row reference scorer (``tests/scoring_reference.py``) that checks them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.chat_sources import completions
from workflow_scripts.chat_sources.completions import Text, series
from workflow_scripts.chat_sources.readers import text_column
from workflow_scripts.data.config import build
from workflow_scripts.errors import UserInputError

# A complete fenced block: an opening and a closing ``` (lazy, so consecutive blocks count separately).
FENCED_BLOCK = r"(?s)```.*?```"
# What a structured line starts with: a markdown heading or comment (#), a bullet (- or *),
# a numbered item (1.) or "Step".
LINE_MARKER = r"[ \t]*(?:#+[ \t]|[-*][ \t]|[0-9]+\.[ \t]|Step(?-u:\b))"
STRUCTURE_LINE = rf"(?m)^{LINE_MARKER}"  # what structure_markers counts
WORD_BOUNDARY, NOT_WORD_BOUNDARY = r"(?-u:\b)", r"(?-u:\B)"  # ASCII, as re.ASCII
# Words for min_words are runs of anything but ASCII whitespace (space, tab, newline, form feed, CR).
SPACE, NON_SPACE = r"[ \t\n\f\r]", r"[^ \t\n\f\r]"
MAX_MIN_WORDS = 1000  # min_words.words: the bounded repetition compiles to that many copies
# The characters Rust's regex syntax treats as meta (regex_syntax::escape escapes exactly these).
REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~")
DOMAINS = ("math", "code", "general")  # general: shared components only (a probe-only pool)
PENALTIES = (
    "empty",
    "reasoning_tag",
    "missing_assistant",
    "punctuation_run",
    "degenerate_phrase",
    "too_long",
)


@dataclass(frozen=True)
class Band:
    """Accepted length band of one field, in characters, and the field's weight in the length term."""

    min_chars: int
    max_chars: int
    center_chars: int
    weight: float


@dataclass(frozen=True)
class LengthConfig:
    out_of_band_slope: float
    prompt: Band
    answer: Band


@dataclass(frozen=True)
class Capped:
    """``min(per_item x count, cap)``."""

    per_item: float
    cap: float


@dataclass(frozen=True)
class CappedTerms:
    """``min(per_item x occurrences of any term, cap)``."""

    per_item: float
    cap: float
    terms: tuple[str, ...]


@dataclass(frozen=True)
class NumericDensity:
    """``min(digit share / target, cap)``."""

    target: float
    cap: float


@dataclass(frozen=True)
class MinWords:
    words: int
    bonus: float


@dataclass(frozen=True)
class DomainConfig:
    code_fences: Capped
    code_keywords: CappedTerms
    latex: CappedTerms
    numeric_density: NumericDensity
    structure: Capped
    min_words: MinWords


@dataclass(frozen=True)
class PunctuationRun:
    characters: str
    min_run: int


@dataclass(frozen=True)
class ReasoningChannel:
    open_tag: str
    close_tag: str


@dataclass(frozen=True)
class PenaltyConfig:
    weight: float
    punctuation_run: PunctuationRun
    degenerate_phrases: tuple[str, ...]


@dataclass(frozen=True)
class ScoringConfig:
    """The ``scoring`` block of config.yaml, typed."""

    max_total_chars: int
    reasoning_channel: ReasoningChannel
    length: LengthConfig
    domain: DomainConfig
    penalties: PenaltyConfig

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "scoring") -> ScoringConfig:
        config = build(cls, data, where)
        for name in ("prompt", "answer"):
            band = getattr(config.length, name)
            if not 0 < band.min_chars < band.center_chars < band.max_chars:
                raise UserInputError(f"{where}.length.{name}: need 0 < min_chars < center_chars < max_chars")
        if not 1 <= config.domain.min_words.words <= MAX_MIN_WORDS:
            raise UserInputError(f"{where}.domain.min_words.words: must be between 1 and {MAX_MIN_WORDS}")
        return config


def char_length(text: Text) -> np.ndarray:
    """Length of each text in characters (code points); 0 for a missing text."""
    return series(text).str.len_chars().fill_null(0).to_numpy().astype(np.float64)


def count_matches(text: Text, pattern: str) -> np.ndarray:
    """Non-overlapping matches of ``pattern`` per text (0 for a missing text)."""
    return series(text).str.count_matches(pattern).fill_null(0).to_numpy().astype(np.float64)


def contains(text: Text, pattern: str) -> np.ndarray:
    """Whether each text holds a match of ``pattern`` (False for a missing text)."""
    return series(text).str.contains(pattern).fill_null(False).to_numpy()


def escape(literal: str) -> str:
    """``literal`` as a pattern that matches exactly it."""
    return "".join(f"\\{char}" if char in REGEX_META else char for char in literal)


def terms_pattern(terms: tuple[str, ...], word_boundaries: bool) -> str:
    """Literal alternation of ``terms``; with word boundaries, a term never matches inside a word.

    A term that starts (ends) with a word character gets an ASCII ``\\b`` there; one that starts
    (ends) with punctuation, like ``#include``, gets ``\\B``, which requires a non-word neighbour
    just the same.
    """
    parts = []
    for term in sorted(terms, key=len, reverse=True):  # longest first, so a prefix never shadows a term
        body = escape(term)
        if word_boundaries:
            left = WORD_BOUNDARY if re.match(r"\w", term[0], re.ASCII) else NOT_WORD_BOUNDARY
            right = WORD_BOUNDARY if re.match(r"\w", term[-1], re.ASCII) else NOT_WORD_BOUNDARY
            body = f"{left}{body}{right}"
        parts.append(body)
    return "(?:" + "|".join(parts) + ")"


def band_term(length: np.ndarray, band: Band, slope: float) -> np.ndarray:
    """Unweighted length score of one field.

    Inside ``[min, max]`` the score is linear in log-length: 1 at the centre, 0 at both edges.
    The bands span two orders of magnitude with the centre far from their midpoint (500 in
    40..4,000), so a scale linear in characters would treat 100 extra characters the same for a
    60-character and a 3,000-character prompt; on a log scale equal ratios cost equally, and both
    sides reach 0 exactly at their edge. Outside the band the score is ``-slope x d / edge``, with
    ``d`` the distance to the nearest edge, so it is continuous at the edges and grows in
    proportion to the relative distance (F.2: "penalized in proportion to their distance").
    """
    log_len = np.log(np.maximum(length, 1.0))
    lo, mid, hi = np.log(band.min_chars), np.log(band.center_chars), np.log(band.max_chars)
    rising = (log_len - lo) / (mid - lo)
    falling = (hi - log_len) / (hi - mid)
    inside = np.where(length <= band.center_chars, rising, falling)
    below = -slope * (band.min_chars - length) / band.min_chars
    above = -slope * (length - band.max_chars) / band.max_chars
    return np.where(length < band.min_chars, below, np.where(length > band.max_chars, above, inside))


def code_fences(answer: Text, config: Capped) -> np.ndarray:
    """Complete ``` fenced blocks in the answer, capped."""
    return np.minimum(config.per_item * count_matches(answer, FENCED_BLOCK), config.cap)


def code_keywords(answer: Text, config: CappedTerms) -> np.ndarray:
    """Whole-word code keyword occurrences anywhere in the answer (inside or outside fences), capped."""
    count = count_matches(answer, terms_pattern(config.terms, word_boundaries=True))
    return np.minimum(config.per_item * count, config.cap)


def latex_markup(answer: Text, config: CappedTerms) -> np.ndarray:
    """Occurrences of LaTeX markup (literal substrings, e.g. ``\\frac``, ``$``, ``^{``), capped."""
    count = count_matches(answer, terms_pattern(config.terms, word_boundaries=False))
    return np.minimum(config.per_item * count, config.cap)


def numeric_density(answer: Text, config: NumericDensity, length: np.ndarray | None = None) -> np.ndarray:
    """ASCII digit share of the answer's characters divided by the target share, capped (0 if empty).

    ``length``: the answer lengths when the caller has them already.
    """
    length = char_length(answer) if length is None else length
    share = count_matches(answer, r"[0-9]") / np.maximum(length, 1.0)
    return np.minimum(share / config.target, config.cap)


def structure_markers(answer: Text, config: Capped) -> np.ndarray:
    """Answer lines starting with ``#``, ``-``, ``*``, ``1.`` or ``Step`` (STRUCTURE_LINE), capped.

    Counted as the first line's marker plus the markers right after a newline: a match never
    ends in a newline, so that is STRUCTURE_LINE's count, and a literal newline lets the engine
    jump from line to line.

    Speed (benchmarks/bench_scoring.py): the engine's literal prefilters make most
    passes cost a fraction of a full scan; the one pattern anchored at line starts,
    the structure markers, is counted after a literal newline (see
    ``structure_markers``) because ``(?m)^`` disables them and measured 8x slower.
    """
    first = contains(answer, rf"\A{LINE_MARKER}")
    count = first + count_matches(answer, rf"\n{LINE_MARKER}")
    return np.minimum(config.per_item * count, config.cap)


def min_words(answer: Text, config: MinWords) -> np.ndarray:
    """``bonus`` when the answer has at least ``words`` words (runs of non-whitespace).

    A bounded repetition stops at the ``words``-th word instead of counting every word.
    """
    hits = contains(answer, rf"(?:{NON_SPACE}+{SPACE}+){{{config.words - 1}}}{NON_SPACE}")
    return np.where(hits, config.bonus, 0.0)


def punctuation_run_pattern(config: PunctuationRun) -> str:
    """``!{n,}|\\?{n,}|...``: one branch per character (no backreferences in the engine)."""
    return "|".join(f"{escape(char)}{{{config.min_run},}}" for char in dict.fromkeys(config.characters))


def _in_any(texts: tuple[Text, ...], pattern: str) -> np.ndarray:
    return np.logical_or.reduce([contains(text, pattern) for text in texts])


def penalties(
    prompt: Text,
    answer: Text,
    has_assistant: np.ndarray,
    config: ScoringConfig,
    lengths: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Hard penalties, one boolean column per kind (``p_<kind>``); prompt and answer are stripped texts.

    ``lengths``: (prompt, answer) character lengths when the caller has them already.
    """
    texts = (series(prompt), series(answer))
    prompt_len, answer_len = lengths if lengths is not None else (char_length(prompt), char_length(answer))
    tags = (config.reasoning_channel.open_tag, config.reasoning_channel.close_tag)
    phrases = terms_pattern(config.penalties.degenerate_phrases, word_boundaries=False)
    flags = {
        "empty": (prompt_len == 0) | (answer_len == 0),
        "reasoning_tag": np.logical_or.reduce([completions.has_reasoning_tag(text, tags) for text in texts]),
        "missing_assistant": ~np.asarray(has_assistant, dtype=bool),
        "punctuation_run": _in_any(texts, punctuation_run_pattern(config.penalties.punctuation_run)),
        "degenerate_phrase": _in_any(texts, f"(?i){phrases}"),
        "too_long": prompt_len + answer_len > config.max_total_chars,
    }
    return pd.DataFrame({f"p_{name}": np.asarray(flags[name], dtype=bool) for name in PENALTIES})


def components(
    prompt: Text,
    answer: Text,
    domain: str,
    config: ScoringConfig,
    lengths: tuple[np.ndarray, np.ndarray] | None = None,
) -> pd.DataFrame:
    """Weighted score components (``c_*``), summing to length term + domain term.

    Every corpus gets every column; a component that belongs to another domain (fences and
    keywords outside code, LaTeX outside math) is 0, so the files of all corpora share one schema.
    ``lengths``: (prompt, answer) character lengths when the caller has them already.
    """
    if domain not in DOMAINS:
        raise UserInputError(f"corpus domain '{domain}' is not one of {DOMAINS}")
    length, dom = config.length, config.domain
    answer = series(answer)
    prompt_len, answer_len = lengths if lengths is not None else (char_length(prompt), char_length(answer))
    zeros = np.zeros(len(answer))
    columns = {
        "c_length_prompt": length.prompt.weight
        * band_term(prompt_len, length.prompt, length.out_of_band_slope),
        "c_length_answer": length.answer.weight
        * band_term(answer_len, length.answer, length.out_of_band_slope),
        "c_code_fences": code_fences(answer, dom.code_fences) if domain == "code" else zeros,
        "c_code_keywords": code_keywords(answer, dom.code_keywords) if domain == "code" else zeros,
        "c_latex": latex_markup(answer, dom.latex) if domain == "math" else zeros,
        "c_numeric_density": numeric_density(answer, dom.numeric_density, answer_len),
        "c_structure": structure_markers(answer, dom.structure),
        "c_min_words": min_words(answer, dom.min_words),
    }
    return pd.DataFrame(columns)


def score_frame(source: pd.DataFrame, domain: str, config: ScoringConfig) -> pd.DataFrame:
    """Score a normalised source frame (see sources.py).

    Returns ``row_id``, ``source_id``, ``prompt`` (stripped), ``answer`` (stripped final
    completion), ``score``, the ``c_*`` components, the ``p_*`` penalties and ``n_penalties``.
    """
    prompt = series(text_column(source["prompt_raw"])).str.strip_chars()
    close_tag = config.reasoning_channel.close_tag
    answer = completions.final_completion(text_column(source["answer_raw"]), close_tag)
    lengths = (char_length(prompt), char_length(answer))
    parts = components(prompt, answer, domain, config, lengths)
    flags = penalties(prompt, answer, source["has_assistant"].to_numpy(), config, lengths)
    n_penalties = flags.sum(axis=1).to_numpy(dtype=np.int64)
    scored = pd.DataFrame(
        {
            "row_id": source["row_id"].to_numpy(dtype=np.int64),
            "source_id": source["source_id"].array,
            "prompt": pd.arrays.ArrowExtensionArray(prompt.to_arrow()),
            "answer": pd.arrays.ArrowExtensionArray(answer.to_arrow()),
            "score": parts.sum(axis=1).to_numpy() - config.penalties.weight * n_penalties,
        }
    )
    return pd.concat([scored, parts, flags], axis=1).assign(n_penalties=n_penalties)
