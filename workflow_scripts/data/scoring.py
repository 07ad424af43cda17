"""The deterministic corpus scorer of Appendix F.2.

``score = length term + domain term - penalty_weight x (number of hard penalties)``

No model is in the loop: every component is a capped count or a piecewise
function of lengths, computed for all rows at once with RE2 kernels of
pyarrow.compute. Each component is one function returning a float per row;
``score_frame`` collects them (weighted, so that they sum to the score) into
``c_*`` columns, and the penalties into boolean ``p_*`` columns. Lengths are
counted in characters (Unicode code points) after whitespace stripping.

Speed (benchmarks/bench_scoring.py): arrow's regex count calls RE2 once per match, so its cost
grows with the number of matches, not just the text. ``score_frame`` therefore computes the
lengths once, cuts the reasoning channel with a literal search instead of a regex replacement,
counts fenced blocks from backtick positions, and finds the rare text penalties with one pass
of their union before checking each on the rows it flags; each gives exactly the numbers of the
plain RE2 formulation. Counting digits or LaTeX terms from the bytes with numpy was tried and
measured no faster on this corpus, so those stay RE2 counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from workflow_scripts.cli import UserInputError
from workflow_scripts.data import completions
from workflow_scripts.data.config import build
from workflow_scripts.data.sources import text_column

Text = pa.Array | pa.ChunkedArray

# A complete fenced block: an opening and a closing ``` (lazy, so consecutive blocks count separately).
FENCED_BLOCK = r"(?s)```.*?```"
# Lines starting with a markdown heading or comment (#), a bullet (- or *), a numbered item (1.) or "Step".
STRUCTURE_LINE = r"(?m)^[ \t]*(?:#+[ \t]|[-*][ \t]|\d+\.[ \t]|Step\b)"
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
        if not 1 <= config.domain.min_words.words <= 1000:
            raise UserInputError(f"{where}.domain.min_words.words: must be between 1 and 1000")
        return config


def char_length(text: Text) -> np.ndarray:
    """Length of each text in characters (code points)."""
    return pc.fill_null(pc.utf8_length(text), 0).to_numpy(zero_copy_only=False).astype(np.float64)


def count_matches(text: Text, pattern: str, ignore_case: bool = False) -> np.ndarray:
    """Non-overlapping RE2 matches of ``pattern`` per text."""
    counts = pc.count_substring_regex(text, pattern, ignore_case=ignore_case)
    return pc.fill_null(counts, 0).to_numpy(zero_copy_only=False).astype(np.float64)


def _chunks(text: Text) -> list[pa.Array]:
    return text.chunks if isinstance(text, pa.ChunkedArray) else [text]


def _byte_view(chunk: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets rebased to 0, UTF-8 bytes) of a null-free ``string`` chunk, without copying.

    None for anything else (nulls, large or view strings), which callers hand to RE2 instead.
    """
    if chunk.type != pa.string() or chunk.null_count:
        return None
    offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32, count=len(chunk) + 1, offset=4 * chunk.offset)
    data = chunk.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    return offsets.astype(np.int64) - offsets[0], data[offsets[0] : offsets[-1]]


def _fenced_blocks_from_bytes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Per-row FENCED_BLOCK count of one chunk, from the positions of its backticks (see below)."""
    ticks = np.flatnonzero(data == ord("`"))
    rows = np.searchsorted(offsets, ticks, side="right") - 1
    new_run = np.ones(ticks.size, dtype=bool)
    new_run[1:] = (np.diff(ticks) != 1) | (np.diff(rows) != 0)
    run_starts = np.flatnonzero(new_run)
    run_lengths = np.diff(np.append(run_starts, ticks.size))
    fences = np.bincount(rows[run_starts], weights=run_lengths // 3, minlength=len(offsets) - 1)
    return fences // 2


def count_fenced_blocks(text: Text) -> np.ndarray:
    """Matches of FENCED_BLOCK per text, without one RE2 call per block.

    The lazy ``(?s)```.*?``` `` pairs each ``` with the next one that does not overlap it, so a
    text holding ``k`` non-overlapping ``` (``r // 3`` in each run of ``r`` backticks) has
    ``k // 2`` blocks. Backticks are rare, so numpy only looks at their positions.
    """
    parts = []
    for chunk in _chunks(text):
        view = _byte_view(chunk)
        parts.append(count_matches(chunk, FENCED_BLOCK) if view is None else _fenced_blocks_from_bytes(*view))
    return np.concatenate(parts).astype(np.float64) if parts else np.zeros(0)


def terms_pattern(terms: tuple[str, ...], word_boundaries: bool) -> str:
    """Literal alternation of ``terms``; with word boundaries, a term never matches inside a word.

    A term that starts (ends) with a word character gets ``\\b`` there; one that starts (ends) with
    punctuation, like ``#include``, gets ``\\B``, which requires a non-word neighbour just the same.
    """
    parts = []
    for term in sorted(terms, key=len, reverse=True):  # longest first, so a prefix never shadows a term
        body = re.escape(term)
        if word_boundaries:
            left = r"\b" if re.match(r"\w", term[0]) else r"\B"
            right = r"\b" if re.match(r"\w", term[-1]) else r"\B"
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
    return np.minimum(config.per_item * count_fenced_blocks(answer), config.cap)


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
    """Answer lines starting with ``#``, ``-``, ``*``, ``1.`` or ``Step`` (STRUCTURE_LINE), capped."""
    return np.minimum(config.per_item * count_matches(answer, STRUCTURE_LINE), config.cap)


def min_words(answer: Text, config: MinWords) -> np.ndarray:
    """``bonus`` when the answer has at least ``words`` whitespace-separated words.

    A bounded repetition stops at the ``words``-th word instead of counting every word, which is
    some 30x faster on long answers; RE2 caps repetitions at 1,000, hence the limit on ``words``.
    """
    pattern = rf"(?:\S+\s+){{{config.words - 1}}}\S"
    hits = pc.fill_null(pc.match_substring_regex(answer, pattern), False).to_numpy(zero_copy_only=False)
    return np.where(hits, config.bonus, 0.0)


def punctuation_run_pattern(config: PunctuationRun) -> str:
    """``!{n,}|\\?{n,}|...``: RE2 has no backreferences, so each character gets its own branch."""
    return "|".join(f"{re.escape(char)}{{{config.min_run},}}" for char in dict.fromkeys(config.characters))


def _any_match(texts: tuple[Text, ...], pattern: str, ignore_case: bool = False) -> np.ndarray:
    hits = [
        pc.fill_null(pc.match_substring_regex(text, pattern, ignore_case=ignore_case), False)
        for text in texts
    ]
    return np.logical_or.reduce([hit.to_numpy(zero_copy_only=False) for hit in hits])


def _text_flags(texts: tuple[Text, ...], config: ScoringConfig) -> dict[str, np.ndarray]:
    """The penalties found by searching the texts: reasoning tag, punctuation run, degenerate phrase.

    Each RE2 pass over the whole corpus costs about the same however rare its pattern, and these
    three are rare: one pass of their union finds the few rows that may carry any of them, and
    the exact checks run on those rows only.
    """
    tags = (config.reasoning_channel.open_tag, config.reasoning_channel.close_tag)
    punctuation = punctuation_run_pattern(config.penalties.punctuation_run)
    phrases = terms_pattern(config.penalties.degenerate_phrases, word_boundaries=False)
    tag_pattern = "|".join(re.escape(tag) for tag in tags)  # as completions.has_reasoning_tag builds it
    maybe = np.flatnonzero(_any_match(texts, f"{tag_pattern}|(?:{punctuation})|(?i:{phrases})"))
    flags = {
        name: np.zeros(len(texts[0]), dtype=bool)
        for name in ("reasoning_tag", "punctuation_run", "degenerate_phrase")
    }
    if maybe.size:
        rows = pa.array(maybe)
        subset = tuple(text.take(rows) for text in texts)
        flags["reasoning_tag"][maybe] = np.logical_or.reduce(
            [completions.has_reasoning_tag(text, tags) for text in subset]
        )
        flags["punctuation_run"][maybe] = _any_match(subset, punctuation)
        flags["degenerate_phrase"][maybe] = _any_match(subset, phrases, ignore_case=True)
    return flags


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
    prompt_len, answer_len = lengths if lengths is not None else (char_length(prompt), char_length(answer))
    flags = {
        "empty": (prompt_len == 0) | (answer_len == 0),
        "missing_assistant": ~np.asarray(has_assistant, dtype=bool),
        "too_long": prompt_len + answer_len > config.max_total_chars,
        **_text_flags((prompt, answer), config),
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


def final_answers(answer_raw: pa.ChunkedArray, close_tag: str) -> pa.ChunkedArray:
    """``completions.final_completion``, with the cut made by a literal search from the right.

    The text after the last ``close_tag`` is the last piece of a split at its last occurrence,
    a literal search instead of a greedy regex replacement; with nulls or an empty tag this
    defers to ``final_completion`` itself.
    """
    if not close_tag or answer_raw.null_count:
        return completions.final_completion(answer_raw, close_tag)
    cut = []
    for chunk in answer_raw.chunks:
        pieces = pc.split_pattern(chunk, close_tag, max_splits=1, reverse=True)
        last = pc.subtract(pieces.offsets[1:], 1)  # every row has at least one piece
        cut.append(pc.utf8_trim_whitespace(pieces.values.take(last)))
    return pa.chunked_array(cut, type=answer_raw.type)


def score_frame(source: pd.DataFrame, domain: str, config: ScoringConfig) -> pd.DataFrame:
    """Score a normalised source frame (see sources.py).

    Returns ``row_id``, ``source_id``, ``prompt`` (stripped), ``answer`` (stripped final
    completion), ``score``, the ``c_*`` components, the ``p_*`` penalties and ``n_penalties``.
    """
    prompt = pc.utf8_trim_whitespace(text_column(source["prompt_raw"]))
    answer = final_answers(text_column(source["answer_raw"]), config.reasoning_channel.close_tag)
    lengths = (char_length(prompt), char_length(answer))
    parts = components(prompt, answer, domain, config, lengths)
    flags = penalties(prompt, answer, source["has_assistant"].to_numpy(), config, lengths)
    n_penalties = flags.sum(axis=1).to_numpy(dtype=np.int64)
    scored = pd.DataFrame(
        {
            "row_id": source["row_id"].to_numpy(dtype=np.int64),
            "source_id": source["source_id"].array,
            "prompt": pd.arrays.ArrowExtensionArray(prompt),
            "answer": pd.arrays.ArrowExtensionArray(answer),
            "score": parts.sum(axis=1).to_numpy() - config.penalties.weight * n_penalties,
        }
    )
    return pd.concat([scored, parts, flags], axis=1).assign(n_penalties=n_penalties)
