"""Every scorer component and every penalty, on crafted rows with hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tests.conftest import load_config
from tests.scoring_reference import RowScorer, check_same, score_rows
from workflow_scripts.data import scoring
from workflow_scripts.data.scoring import ScoringConfig
from workflow_scripts.errors import UserInputError


def config_block() -> dict:
    return load_config(toy=False)["scoring"]


@pytest.fixture(scope="module")
def config() -> ScoringConfig:
    return ScoringConfig.from_dict(config_block())


def text(*values: str) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(values, pa.string())])


def test_config_block_loads(config: ScoringConfig) -> None:
    assert config.length.answer.weight == 2.0 and config.length.prompt.weight == 1.0
    assert config.max_total_chars == 32000
    assert "\\boxed" in config.domain.latex.terms


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (
            lambda d: d["length"].update(promt=d["length"].pop("prompt")),
            "scoring.length: unknown key 'promt'",
        ),
        (lambda d: d["domain"].pop("latex"), "scoring.domain: missing key 'latex'"),
        (lambda d: d["penalties"].update(weight="heavy"), "scoring.penalties.weight"),
        (lambda d: d["length"]["prompt"].update(center_chars=5000), "scoring.length.prompt"),
    ],
)
def test_config_errors_name_the_key(mutate, needle: str) -> None:
    block = config_block()
    mutate(block)
    with pytest.raises(UserInputError, match=needle.replace(".", r"\.")):
        ScoringConfig.from_dict(block)


def test_band_term(config: ScoringConfig) -> None:
    band = config.length.prompt  # 40 .. 500 .. 4000
    lengths = np.array([500, 40, 4000, 200, 1000, 20, 8000, 0], dtype=float)
    expected = [
        1.0,
        0.0,
        0.0,
        math.log(200 / 40) / math.log(500 / 40),
        2 / 3,  # log(4000/1000) / log(4000/500) = log 4 / log 8
        -0.5,  # (40 - 20) / 40
        -1.0,  # (8000 - 4000) / 4000
        -1.0,  # (40 - 0) / 40
    ]
    np.testing.assert_allclose(scoring.band_term(lengths, band, 1.0), expected, atol=1e-12)
    np.testing.assert_allclose(scoring.band_term(np.array([20.0]), band, 2.0), [-1.0])


def test_code_fences(config: ScoringConfig) -> None:
    answers = text("```a```\n```b```", "```x``` ```y``` ```z``` ```w```", "```unclosed", "none")
    # 0.5 per complete block, capped at 1.5
    np.testing.assert_allclose(scoring.code_fences(answers, config.domain.code_fences), [1.0, 1.5, 0.0, 0.0])


def test_code_keywords_are_whole_words(config: ScoringConfig) -> None:
    answers = text(
        "def f():\n    return x  # defined", "#include <x>", "a#include", "printer reprint", "for if else"
    )
    expected = [0.1, 0.05, 0.0, 0.0, 0.15]
    np.testing.assert_allclose(scoring.code_keywords(answers, config.domain.code_keywords), expected)
    capped = text(" ".join(["def"] * 30))
    np.testing.assert_allclose(scoring.code_keywords(capped, config.domain.code_keywords), [1.0])


def test_latex_markup(config: ScoringConfig) -> None:
    answers = text(
        "\\frac{1}{2} + $x^{2}$",  # \frac, $, ^{, $ -> 4
        "\\(a_{i} \\cdot b\\) \\[ \\sqrt{2} \\times 3 \\]",  # \(, _{, \cdot, \[, \sqrt, \times -> 6
        "\\boxed{7}",
        "plain",
    )
    np.testing.assert_allclose(scoring.latex_markup(answers, config.domain.latex), [0.2, 0.3, 0.05, 0.0])
    np.testing.assert_allclose(scoring.latex_markup(text("$" * 100), config.domain.latex), [1.5])


def test_numeric_density(config: ScoringConfig) -> None:
    answers = text("ab12", "a" * 99 + "1", "", "no digits")
    # shares 0.5 (capped at 1), 0.01 / 0.05 = 0.2, empty -> 0, 0
    np.testing.assert_allclose(
        scoring.numeric_density(answers, config.domain.numeric_density), [1.0, 0.2, 0, 0]
    )


def test_structure_markers(config: ScoringConfig) -> None:
    answer = "# Title\n- item\n* item\n1. first\nStep 2: go\nplain\n-5 is negative\n#hashtag\n  - nested"
    # heading, dash, star, numbered, Step, nested dash -> 6 markers x 0.1
    np.testing.assert_allclose(scoring.structure_markers(text(answer), config.domain.structure), [0.6])
    many = text("\n".join(["- x"] * 20))
    np.testing.assert_allclose(scoring.structure_markers(many, config.domain.structure), [1.0])


def test_min_words(config: ScoringConfig) -> None:
    answers = text(" ".join(["w"] * 80), " ".join(["w"] * 79), "\n ".join(["word"] * 200) + "\t", "", "  ")
    np.testing.assert_allclose(scoring.min_words(answers, config.domain.min_words), [1.0, 0.0, 1.0, 0.0, 0.0])
    one = scoring.MinWords(words=1, bonus=0.5)
    np.testing.assert_allclose(scoring.min_words(text("x", " ", ""), one), [0.5, 0.0, 0.0])


def test_components_are_weighted_and_gated_by_domain(config: ScoringConfig) -> None:
    prompt, answer = text("p" * 500), text("```x``` $x$ " + "y" * 2488)  # answer at its centre, 2500 chars
    math_parts = scoring.components(prompt, answer, "math", config)
    code_parts = scoring.components(prompt, answer, "code", config)
    assert math_parts["c_length_prompt"][0] == pytest.approx(1.0)
    assert math_parts["c_length_answer"][0] == pytest.approx(2.0)  # answer weight 2
    assert math_parts["c_latex"][0] == pytest.approx(0.1)
    assert math_parts["c_code_fences"][0] == 0 and math_parts["c_code_keywords"][0] == 0
    assert code_parts["c_code_fences"][0] == pytest.approx(0.5) and code_parts["c_latex"][0] == 0
    general = scoring.components(prompt, answer, "general", config)
    assert (general[["c_code_fences", "c_code_keywords", "c_latex"]] == 0).all(axis=None)
    assert general["c_length_answer"][0] == pytest.approx(2.0)
    with pytest.raises(UserInputError, match="domain"):
        scoring.components(prompt, answer, "poetry", config)


def test_punctuation_pattern_has_one_branch_per_character() -> None:
    pattern = scoring.punctuation_run_pattern(scoring.PunctuationRun(characters="!?!", min_run=16))
    assert pattern == "!{16,}|\\?{16,}"


@pytest.mark.parametrize(
    ("prompt", "answer", "has_assistant", "kind"),
    [
        ("   ", "fine", True, "empty"),
        ("fine", "", True, "empty"),
        ("fine", "x <think> y", True, "reasoning_tag"),
        ("a </think> in the prompt", "fine", True, "reasoning_tag"),
        ("fine", "", False, "missing_assistant"),
        ("fine", "wow" + "!" * 16, True, "punctuation_run"),
        ("fine", "=" * 16, True, "punctuation_run"),
        ("huh" + "?" * 20, "fine", True, "punctuation_run"),
        ("fine", "Well, AS AN AI Language Model I think", True, "degenerate_phrase"),
        ("fine <|im_end|>", "fine", True, "degenerate_phrase"),
        ("p" * 16000, "a" * 16001, True, "too_long"),
    ],
)
def test_each_penalty(
    config: ScoringConfig, prompt: str, answer: str, has_assistant: bool, kind: str
) -> None:
    flags = scoring.penalties(text(prompt.strip()), text(answer), np.array([has_assistant]), config)
    assert flags[f"p_{kind}"].tolist() == [True]


def test_no_penalty_just_below_thresholds(config: ScoringConfig) -> None:
    flags = scoring.penalties(
        text("p" * 16000),
        text("a" * 15985 + "!" * 15),  # 32,000 chars in all is allowed; a run of 15 is short of 16
        np.array([True]),
        config,
    )
    assert not flags.to_numpy().any()
    mixed = scoring.penalties(text("fine"), text("!?" * 20), np.array([True]), config)
    assert not mixed["p_punctuation_run"].any()  # a run means one repeated character


def test_score_frame_sums_components_minus_penalties(config: ScoringConfig) -> None:
    source = pd.DataFrame(
        {
            "row_id": np.array([0, 1], dtype=np.int64),
            "source_id": ["a", "b"],
            "prompt_raw": ["  " + "p" * 500 + "\n", "q" * 500],
            "answer_raw": ["<think>hidden 123</think>\n" + "y" * 2500, "<think>unclosed " + "y" * 2500],
            "has_assistant": [True, True],
        }
    )
    scored = scoring.score_frame(source, "math", config)
    assert scored["prompt"].tolist()[0] == "p" * 500
    assert scored["answer"].tolist()[0] == "y" * 2500
    # row 0: length 1 + 2, no domain signal (no digits, LaTeX, markers, 1 word), no penalty
    assert scored["score"].tolist()[0] == pytest.approx(3.0)
    assert scored["n_penalties"].tolist() == [0, 1]
    assert scored["p_reasoning_tag"].tolist() == [False, True]
    parts = scored.filter(like="c_").sum(axis=1)
    np.testing.assert_allclose(scored["score"], parts - 100.0 * scored["n_penalties"])


# Every component and penalty against the plain-Python reference scorer, on rows built to sit on
# the edges of each pattern.
PIECES = [
    "```", "``", "`", "def", "if", "#include", "return", "printer", "\\frac", "$", "^{", "_{", "7", "42",
    "- ", "* ", "# ", "1. ", "Step", "Steps", "\n", "\n  ", "\t", " ", "é", "🙂", "\u00a0", "\u2003",
    "!" * 9, "?" * 8, "=" * 16, "As an AI ", "LANGUAGE model", "<|im_end|>", "word", "word ", "x y ",
]  # fmt: skip


def edge_rows(count: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)

    def piece_text(low: int, high: int) -> str:
        return "".join(rng.choice(PIECES, size=rng.integers(low, high)))

    def tag(text: str, probability: float) -> str:
        return text if rng.random() < probability else ""

    def answer() -> str:
        reasoning = tag(piece_text(0, 30) + tag("</think>", 0.2) + "</think>", 0.5)
        return tag("<think>", 0.3) + reasoning + piece_text(0, 400) + tag("<think>", 0.05)

    return pd.DataFrame(
        {
            "row_id": np.arange(count, dtype=np.int64),
            "source_id": [f"s{i}" for i in range(count)],
            "prompt_raw": [piece_text(0, 30) + tag("</think>", 0.03) for _ in range(count)],
            "answer_raw": [answer() for _ in range(count)],
            "has_assistant": rng.random(count) > 0.05,
        }
    )


@pytest.mark.slow
@pytest.mark.parametrize("domain", scoring.DOMAINS)
def test_score_frame_equals_the_python_reference(config: ScoringConfig, domain: str) -> None:
    source = edge_rows(1500, seed=len(domain))
    scored = scoring.score_frame(source, domain, config)
    reference = score_rows(source, RowScorer(config, domain))
    check_same(scored, reference)
    for column in ("c_structure", "c_numeric_density", "c_min_words", "p_punctuation_run", "p_reasoning_tag"):
        assert scored[column].nunique() > 1  # each edge is exercised both ways


def test_counts_follow_plain_regex_semantics(config: ScoringConfig) -> None:
    """Matches are non-overlapping and each sees its left neighbour: no restart at a match's end."""
    answers = text("- - x\n- y", "if#include def", "`````` ```")
    np.testing.assert_allclose(scoring.structure_markers(answers, scoring.Capped(1.0, 99)), [2, 0, 0])
    keywords = scoring.CappedTerms(1.0, 99, ("if", "def", "#include"))
    np.testing.assert_allclose(scoring.code_keywords(answers, keywords), [0, 2, 0])
    np.testing.assert_allclose(scoring.code_fences(answers, scoring.Capped(1.0, 99)), [0, 0, 1])


@pytest.mark.parametrize(
    "make",
    [
        lambda values: pa.chunked_array([pa.array(values[:3]), pa.array(values[3:])]),  # several chunks
        lambda values: pa.array(["pad"] + values, pa.string()).slice(1),  # a sliced array
        lambda values: pa.array(values, pa.large_string()),
    ],
)
def test_components_do_not_depend_on_the_arrow_layout(config: ScoringConfig, make) -> None:
    values = ["```a``` def 12", "- x\n# y", "", "\\frac $ $", "word " * 90, "!" * 20]
    expected = scoring.components(text(*values), text(*values), "code", config)
    got = scoring.components(make(values), make(values), "code", config)
    pd.testing.assert_frame_equal(got, expected)


def test_missing_texts_count_as_empty(config: ScoringConfig) -> None:
    answers = pa.array(["def x", None], pa.string())
    parts = scoring.components(answers, answers, "code", config)
    assert parts.loc[1, ["c_code_keywords", "c_numeric_density", "c_structure", "c_min_words"]].eq(0).all()
    flags = scoring.penalties(answers, answers, np.array([True, True]), config)
    assert flags["p_empty"].tolist() == [False, True]
