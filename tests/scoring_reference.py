"""A plain-Python scorer of Appendix F.2, one row at a time: the reference ``score_frame`` is checked against.

Written the straightforward way (``str`` methods and the ``re`` module), independently of the
vectorised engine. Python's ``re`` with ``re.ASCII`` has the ASCII word boundaries and digits the
scorer's patterns spell out; words are runs of anything but ASCII whitespace.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from workflow_scripts.data import scoring

ASCII_SPACE = " \t\n\f\r"


def python_pattern(pattern: str) -> str:
    """A scorer pattern in ``re`` syntax: its ASCII word-boundary groups become ``\\b`` / ``\\B``."""
    return pattern.replace(scoring.WORD_BOUNDARY, r"\b").replace(scoring.NOT_WORD_BOUNDARY, r"\B")


def band(length: int, band: scoring.Band, slope: float) -> float:
    """The length term of one field, as ``scoring.band_term`` defines it."""
    if length < band.min_chars:
        return -slope * (band.min_chars - length) / band.min_chars
    if length > band.max_chars:
        return -slope * (length - band.max_chars) / band.max_chars
    lo, mid, hi = math.log(band.min_chars), math.log(band.center_chars), math.log(band.max_chars)
    if length <= band.center_chars:
        return (math.log(length) - lo) / (mid - lo)
    return (hi - math.log(length)) / (hi - mid)


class RowScorer:
    """Scores one row at a time with plain Python: the straightforward implementation of F.2."""

    def __init__(self, config: scoring.ScoringConfig, domain: str) -> None:
        self.config, self.domain = config, domain
        dom, pen = config.domain, config.penalties
        self.fence = re.compile(r"(?s)```.*?```")
        self.keyword = re.compile(
            python_pattern(scoring.terms_pattern(dom.code_keywords.terms, True)), re.ASCII
        )
        self.latex = re.compile("|".join(re.escape(term) for term in dom.latex.terms))
        self.structure = re.compile(
            r"^[ \t]*(?:#+[ \t]|[-*][ \t]|[0-9]+\.[ \t]|Step\b)", re.MULTILINE | re.ASCII
        )
        self.word = re.compile(f"[^{ASCII_SPACE}]+")
        self.phrase = re.compile("|".join(re.escape(p) for p in pen.degenerate_phrases), re.IGNORECASE)
        run = pen.punctuation_run
        self.runs = [char * run.min_run for char in dict.fromkeys(run.characters)]
        self.tags = (config.reasoning_channel.open_tag, config.reasoning_channel.close_tag)

    def __call__(self, prompt_raw: str, answer_raw: str, has_assistant: bool) -> dict[str, float | bool]:
        config, dom, length = self.config, self.config.domain, self.config.length
        prompt = prompt_raw.strip()
        answer = answer_raw.rsplit(self.tags[1], 1)[-1].strip()
        n_prompt, n_answer = len(prompt), len(answer)

        def capped(per_item: float, pattern: re.Pattern[str], cap: float) -> float:
            return min(per_item * len(pattern.findall(answer)), cap)

        code, math_domain = self.domain == "code", self.domain == "math"
        digits = sum(char in "0123456789" for char in answer)
        row: dict[str, float | bool] = {
            "c_length_prompt": length.prompt.weight * band(n_prompt, length.prompt, length.out_of_band_slope),
            "c_length_answer": length.answer.weight * band(n_answer, length.answer, length.out_of_band_slope),
            "c_code_fences": capped(dom.code_fences.per_item, self.fence, dom.code_fences.cap)
            if code
            else 0.0,
            "c_code_keywords": capped(dom.code_keywords.per_item, self.keyword, dom.code_keywords.cap)
            if code
            else 0.0,
            "c_latex": capped(dom.latex.per_item, self.latex, dom.latex.cap) if math_domain else 0.0,
            "c_numeric_density": min(
                digits / max(n_answer, 1) / dom.numeric_density.target, dom.numeric_density.cap
            ),
            "c_structure": capped(dom.structure.per_item, self.structure, dom.structure.cap),
            "c_min_words": dom.min_words.bonus
            if len(self.word.findall(answer)) >= dom.min_words.words
            else 0.0,
        }
        texts = (prompt, answer)
        row |= {
            "p_empty": n_prompt == 0 or n_answer == 0,
            "p_reasoning_tag": any(tag in text for tag in self.tags for text in texts),
            "p_missing_assistant": not has_assistant,
            "p_punctuation_run": any(run in text for run in self.runs for text in texts),
            "p_degenerate_phrase": any(self.phrase.search(text) for text in texts),
            "p_too_long": n_prompt + n_answer > config.max_total_chars,
        }
        n_penalties = sum(bool(row[f"p_{name}"]) for name in scoring.PENALTIES)
        score = 0.0
        for name, value in row.items():
            if name.startswith("c_"):
                score += float(value)
        row["score"] = score - config.penalties.weight * n_penalties
        row["n_penalties"] = n_penalties
        return row


def score_rows(source: pd.DataFrame, scorer: RowScorer) -> pd.DataFrame:
    """The reference applied row by row."""
    rows = zip(source["prompt_raw"], source["answer_raw"], source["has_assistant"], strict=True)
    return pd.DataFrame([scorer(prompt, answer, bool(flag)) for prompt, answer, flag in rows])


def check_same(vectorised: pd.DataFrame, per_row: pd.DataFrame) -> float:
    """Counts and flags must agree exactly, floats to 1e-9; returns the largest float difference."""
    flags = [f"p_{name}" for name in scoring.PENALTIES] + ["n_penalties"]
    pd.testing.assert_frame_equal(
        vectorised[flags].reset_index(drop=True), per_row[flags], check_dtype=False, check_exact=True
    )
    floats = [column for column in per_row if column.startswith("c_")] + ["score"]
    left, right = vectorised[floats].to_numpy(), per_row[floats].to_numpy(dtype=np.float64)
    np.testing.assert_allclose(left, right, rtol=0, atol=1e-9)
    return float(np.max(np.abs(left - right))) if left.size else 0.0
