"""Speed of the vectorised length term against a per-row Python loop, on toy rows.

    python benchmarks/bench_scoring.py [--rows 50000] [--repeats 3]

Prints wall times (best of ``repeats``) and their ratio; the two results are
checked to agree. Also prints the time of the whole scorer for scale.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workflow_scripts.data import scoring, toy  # noqa: E402
from workflow_scripts.data.completions import final_completion  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "config.yaml"


def naive_band(length: int, band: scoring.Band, slope: float) -> float:
    """The length term of one field for one row, in plain Python."""
    if length < band.min_chars:
        return -slope * (band.min_chars - length) / band.min_chars
    if length > band.max_chars:
        return -slope * (length - band.max_chars) / band.max_chars
    if length <= band.center_chars:
        return math.log(length / band.min_chars) / math.log(band.center_chars / band.min_chars)
    return math.log(band.max_chars / length) / math.log(band.max_chars / band.center_chars)


def naive_length_term(prompts: list[str], answers: list[str], config: scoring.LengthConfig) -> np.ndarray:
    out = []
    for prompt, answer in zip(prompts, answers, strict=True):
        out.append(
            config.prompt.weight * naive_band(len(prompt), config.prompt, config.out_of_band_slope)
            + config.answer.weight * naive_band(len(answer), config.answer, config.out_of_band_slope)
        )
    return np.array(out)


def vector_length_term(prompts, answers, config: scoring.LengthConfig) -> np.ndarray:
    slope = config.out_of_band_slope
    return config.prompt.weight * scoring.band_term(
        scoring.char_length(prompts), config.prompt, slope
    ) + config.answer.weight * scoring.band_term(scoring.char_length(answers), config.answer, slope)


def best_of(repeats: int, function: Callable[[], object]) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=50_000, help="toy rows to score")
    parser.add_argument("--repeats", type=int, default=3, help="timing repeats (best is reported)")
    args = parser.parse_args()

    config = scoring.ScoringConfig.from_dict(yaml.safe_load(CONFIG.read_text())["scoring"])
    table = toy.generate("glm_sharegpt", "main", rows=args.rows, seed=0, bad_fraction=0.1)
    prompts = table["input"]
    answers = final_completion(table["output"], config.reasoning_channel.close_tag)
    prompt_list, answer_list = prompts.to_pylist(), answers.to_pylist()

    vector_s, vector = best_of(args.repeats, lambda: vector_length_term(prompts, answers, config.length))
    naive_s, naive = best_of(args.repeats, lambda: naive_length_term(prompt_list, answer_list, config.length))
    # Empty fields are out of band either way; naive_band never takes a log of 0.
    np.testing.assert_allclose(vector, naive, rtol=1e-12, atol=1e-12)
    print(f"rows: {args.rows}")
    print(f"length term, vectorised: {vector_s * 1e3:9.2f} ms")
    print(f"length term, per-row loop: {naive_s * 1e3:7.2f} ms")
    print(f"speed-up (loop / vectorised): {naive_s / vector_s:.1f}x")

    answer_len = scoring.char_length(answers)
    band_s, _ = best_of(args.repeats, lambda: scoring.band_term(answer_len, config.length.answer, 1.0))
    loop_s, _ = best_of(
        args.repeats, lambda: [naive_band(int(n), config.length.answer, 1.0) for n in answer_len.tolist()]
    )
    print(f"band function alone on precomputed lengths: {loop_s / band_s:.1f}x (loop / vectorised)")

    full_s, _ = best_of(1, lambda: scoring.components(prompts, answers, "code", config))
    print(f"all components (code domain), vectorised: {full_s * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
