"""Scoring throughput in rows per second per core (issue 2): ``score_frame`` against a per-row loop.

    python benchmarks/bench_scoring.py [--rows 328000] [--loop-rows 20000] [--domain code] [--repeats 3]

The frame is synthetic: the toy generator's GLM ``main`` subset (code, general and math rows
with reasoning channels, answers of a few hundred to a few thousand characters, 10% bad rows of
every penalty kind, a few over 32,000 characters), written to parquet and read back with
``read_source``, so the scorer sees exactly what ``build_corpus`` gives it. The timed call is
``score_frame`` itself (final-completion cut, every component, every penalty, the output frame).

Single core: the process is pinned to one CPU, Arrow's CPU and IO pools get one thread, and the
BLAS/OpenMP thread variables are set to 1 before numpy loads, so the rate is rows/s per core.

The reference is a plain Python function scoring one row at a time (``str`` methods and the
``re`` module). It runs on the first ``--loop-rows`` rows only (it is slow); its numbers are
checked against ``score_frame`` on those rows (counts and flags exactly, floats to 1e-9) before
the ratio of the two rates is printed, so the ratio compares like with like.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from single_core import pin  # noqa: E402

from workflow_scripts.data import scoring, toy  # noqa: E402
from workflow_scripts.data.sources import read_source  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "config.yaml"
GOAL_ROWS_PER_S = 50_000
# RE2's \S (\s is [\t\n\f\r ], without \v); Python's ``re`` gets RE2's ASCII \b and \d from re.ASCII.
RE2_NON_SPACE = r"[^\t\n\f\r ]"


def single_core() -> str:
    """Pin this process to one CPU and give Arrow one thread; returns a line saying what was done."""
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    if hasattr(os, "sched_setaffinity"):
        cpu = pin()
        return f"pinned to CPU {cpu}; arrow cpu/io threads 1; OMP/OpenBLAS/MKL threads 1"
    return "arrow cpu/io threads 1; OMP/OpenBLAS/MKL threads 1 (no CPU pinning on this OS)"


def synthetic_source(rows: int, seed: int) -> pd.DataFrame:
    """Toy GLM ``main`` rows through parquet and ``read_source``, as the pipeline reads them."""
    table = toy.generate("glm_sharegpt", "main", rows=rows, seed=seed, bad_fraction=0.1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "raw.parquet"
        pq.write_table(table, path)
        return read_source(path, "glm_sharegpt")


# ---------------------------------------------------------------- the per-row reference


def consumed_count(pattern: re.Pattern[str], text: str) -> int:
    """Matches counted the way arrow's ``count_substring_regex`` does (RE2 ``FindAndConsume``).

    After each match the search restarts on the rest of the text as a new string, so ``^`` and
    ``\\b`` see a text start there; ``score_frame`` inherits that, so the reference does too.
    """
    count = 0
    while (match := pattern.search(text)) is not None:
        count += 1
        if not text:
            break
        text = text[max(match.end(), 1) :]  # an empty match moves on by one, as arrow does
    return count


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
        flags = re.ASCII
        self.fence = re.compile(scoring.FENCED_BLOCK, flags)
        self.keyword = re.compile(scoring.terms_pattern(dom.code_keywords.terms, word_boundaries=True), flags)
        self.latex = re.compile(scoring.terms_pattern(dom.latex.terms, word_boundaries=False), flags)
        self.structure = re.compile(scoring.STRUCTURE_LINE, flags)
        self.word = re.compile(rf"{RE2_NON_SPACE}+")
        self.phrase = re.compile("|".join(re.escape(p) for p in pen.degenerate_phrases), re.IGNORECASE)
        run = pen.punctuation_run
        self.runs = [char * run.min_run for char in dict.fromkeys(run.characters)]
        self.tags = (config.reasoning_channel.open_tag, config.reasoning_channel.close_tag)

    def __call__(self, prompt_raw: str, answer_raw: str, has_assistant: bool) -> dict[str, float | bool]:
        config, dom, length = self.config, self.config.domain, self.config.length
        prompt = prompt_raw.strip()
        answer = answer_raw.rsplit(self.tags[1], 1)[-1].strip()
        n_prompt, n_answer = len(prompt), len(answer)

        def capped(per_item: float, count: int, cap: float) -> float:
            return min(per_item * count, cap)

        code, math_domain = self.domain == "code", self.domain == "math"
        digits = sum(char in "0123456789" for char in answer)
        row: dict[str, float | bool] = {
            "c_length_prompt": length.prompt.weight * band(n_prompt, length.prompt, length.out_of_band_slope),
            "c_length_answer": length.answer.weight * band(n_answer, length.answer, length.out_of_band_slope),
            "c_code_fences": capped(
                dom.code_fences.per_item, consumed_count(self.fence, answer), dom.code_fences.cap
            )
            if code
            else 0.0,
            "c_code_keywords": capped(
                dom.code_keywords.per_item, consumed_count(self.keyword, answer), dom.code_keywords.cap
            )
            if code
            else 0.0,
            "c_latex": capped(dom.latex.per_item, consumed_count(self.latex, answer), dom.latex.cap)
            if math_domain
            else 0.0,
            "c_numeric_density": min(
                digits / max(n_answer, 1) / dom.numeric_density.target, dom.numeric_density.cap
            ),
            "c_structure": capped(
                dom.structure.per_item, consumed_count(self.structure, answer), dom.structure.cap
            ),
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


def median_time(repeats: int, function: Callable[[], object]) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=328_000, help="synthetic rows to score (default 328,000)")
    parser.add_argument("--loop-rows", type=int, default=20_000, help="rows for the per-row reference")
    parser.add_argument("--domain", choices=scoring.DOMAINS, default="code", help="corpus domain to score as")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (median is reported)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(single_core())
    config = scoring.ScoringConfig.from_dict(yaml.safe_load(CONFIG.read_text())["scoring"])
    source = synthetic_source(args.rows, args.seed)
    answer_chars = source["answer_raw"].str.len()
    print(
        f"frame: {len(source):,} rows (toy glm_sharegpt main: code/general/math, 10% bad rows), "
        f"raw answer chars median {answer_chars.median():,.0f}, mean {answer_chars.mean():,.0f}; "
        f"domain {args.domain}"
    )

    vector_s, scored = median_time(args.repeats, lambda: scoring.score_frame(source, args.domain, config))
    sample = source.iloc[: args.loop_rows]
    loop_s, reference = median_time(1, lambda: score_rows(sample, RowScorer(config, args.domain)))
    max_diff = check_same(scored.iloc[: len(sample)], reference)

    vector_rate, loop_rate = len(source) / vector_s, len(sample) / loop_s
    print(f"score_frame (vectorised): {vector_s:8.2f} s for {len(source):,} rows = ", end="")
    print(f"{vector_rate:10,.0f} rows/s/core")
    print(
        f"per-row Python reference: {loop_s:8.2f} s for {len(sample):,} rows = {loop_rate:10,.0f} rows/s/core"
    )
    print(f"same scores on the {len(sample):,} reference rows (largest float difference {max_diff:.1e})")
    print(f"ratio (vectorised / per-row): {vector_rate / loop_rate:.1f}x")
    verdict = "met" if vector_rate >= GOAL_ROWS_PER_S else "NOT met"
    print(f"goal {GOAL_ROWS_PER_S:,} rows/s/core: {verdict} ({vector_rate / GOAL_ROWS_PER_S:.0%} of goal)")


if __name__ == "__main__":
    main()
