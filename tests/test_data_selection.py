"""Selection: ranking, tie-breaking, source order, probe pool disjointness and determinism."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workflow_scripts.data.report import build_report
from workflow_scripts.data.scoring import PENALTIES
from workflow_scripts.data.selection import CorpusSpec, passes_filter, select, stable_hash
from workflow_scripts.errors import UserInputError

MASK64 = 2**64 - 1


def splitmix_reference(value: int, seed: int) -> int:
    """SplitMix64 finaliser on Python ints, as an independent reference."""
    x = (value + seed * 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def spec(**overrides) -> CorpusSpec:
    values = {
        "domain": "math",
        "filter": "none",
        "train_rows": 3,
        "probe_tokens": 10,
        "chars_per_token": 1.0,
        "probe_seed": 7,
    }
    return CorpusSpec.from_dict({**values, **overrides}, "toycorpus")


def scored_frame(
    scores: list[float],
    penalised: list[int] = (),
    answers: list[str] | None = None,
    prompts: list[str] | None = None,
) -> pd.DataFrame:
    n = len(scores)
    frame = pd.DataFrame(
        {
            "row_id": np.arange(n, dtype=np.int64),
            "prompt": prompts or [f"{i:02d}" for i in range(n)],  # distinct unless given
            "answer": answers or ["aaa"] * n,  # 5 characters per row with the prompt
            "score": np.array(scores, dtype=float),
            "n_penalties": np.isin(np.arange(n), penalised).astype(np.int64),
        }
    )
    for name in PENALTIES:
        frame[f"p_{name}"] = False
    frame["p_empty"] = frame["n_penalties"] > 0
    return frame


def test_stable_hash_matches_reference() -> None:
    ids = np.array([0, 1, 2, 12345, 2**40], dtype=np.int64)
    for seed in (0, 7, 2**63 + 5):
        assert stable_hash(ids, seed).tolist() == [splitmix_reference(int(i), seed) for i in ids]


def test_top_rows_with_ties_broken_by_row_id_in_source_order() -> None:
    #           row:  0    1    2    3    4    5    6
    frame = scored_frame([1.0, 5.0, 3.0, 5.0, 3.0, 9.0, 3.0], penalised=[5])
    selection = select(frame, spec(train_rows=4, probe_tokens=1), "toycorpus")
    # row 5 is penalised; 1 and 3 tie at 5.0; 2, 4, 6 tie at 3.0 and the lowest row_id (2) wins.
    assert np.flatnonzero(selection.train).tolist() == [1, 2, 3, 4]
    assert not (selection.train & selection.probe).any()
    assert not selection.probe[5] and not selection.train[5]


def test_probe_takes_hash_order_until_token_target() -> None:
    frame = scored_frame([float(i) for i in range(20)])
    selection = select(frame, spec(train_rows=5, probe_tokens=12), "toycorpus")
    assert np.flatnonzero(selection.train).tolist() == [15, 16, 17, 18, 19]
    # 5 tokens per row: 3 rows reach 12 tokens; they are the first 3 candidates in hash order.
    candidates = np.arange(15)
    expected = candidates[np.argsort(stable_hash(candidates, 7), kind="stable")][:3]
    assert sorted(np.flatnonzero(selection.probe).tolist()) == sorted(expected.tolist())
    assert selection.tokens[selection.probe].sum() == 15
    again = select(frame, spec(train_rows=5, probe_tokens=12), "toycorpus")
    assert (again.probe == selection.probe).all() and (again.train == selection.train).all()
    other_seed = select(frame, spec(train_rows=5, probe_tokens=12, probe_seed=8), "toycorpus")
    assert (other_seed.train == selection.train).all()


def test_null_train_rows_takes_probe_first_then_the_rest() -> None:
    frame = scored_frame([1.0] * 10, penalised=[0])
    selection = select(frame, spec(train_rows=None, probe_tokens=6), "toycorpus")
    assert selection.probe.sum() == 2  # 2 x 5 tokens >= 6
    assert (selection.train | selection.probe).tolist() == [False] + [True] * 9
    assert not (selection.train & selection.probe).any()


def test_zero_train_rows_is_a_probe_only_pool() -> None:
    frame = scored_frame([1.0] * 10, penalised=[3])
    selection = select(frame, spec(train_rows=0, probe_tokens=12), "toycorpus")
    assert not selection.train.any() and selection.probe.sum() == 3 and not selection.probe[3]


def test_errors_name_the_corpus() -> None:
    with pytest.raises(UserInputError, match="corpus 'toycorpus'.*probe"):
        select(scored_frame([1.0, 2.0]), spec(train_rows=2), "toycorpus")
    with pytest.raises(UserInputError, match="corpus 'toycorpus'.*train_rows is 5"):
        select(scored_frame([1.0, 2.0]), spec(train_rows=5), "toycorpus")
    with pytest.raises(UserInputError, match="corpus 'toycorpus'.*filter"):
        spec(filter="has_code")
    with pytest.raises(UserInputError, match="corpus 'toycorpus': unknown key 'rows'"):
        CorpusSpec.from_dict({"rows": 1}, "toycorpus")


def test_fenced_code_filter_needs_a_complete_block_in_the_final_answer() -> None:
    answers = pd.Series(["see ```py\nx = 1\n```", "```unclosed", "no code", "inline `x`"])
    assert passes_filter(answers, "fenced_code").tolist() == [True, False, False, False]
    assert passes_filter(answers, "none").tolist() == [True] * 4
    assert passes_filter(answers, "no_fenced_code").tolist() == [False, True, True, True]


def test_report_counts() -> None:
    frame = scored_frame([float(i) for i in range(10)], penalised=[9])
    selection = select(frame, spec(train_rows=4, probe_tokens=5), "toycorpus")
    report = build_report(frame, selection, "toycorpus")
    assert report["rows_in"] == 10 and report["rows_eligible"] == 9
    assert report["rows_train"] == 4 and report["rows_probe"] == 1
    assert report["probe_tokens_estimated"] == 5.0
    assert report["penalty_counts"]["empty"] == 1 and report["rows_with_any_penalty"] == 1
    assert report["score_train"]["min"] == 5.0 and report["score_train"]["max"] == 8.0
    assert report["score_all"]["q0.5"] == 4.5 and report["score_all"]["mean"] == 4.5


@pytest.mark.parametrize("train_rows", [4, None], ids=["training first", "probe pool first"])
def test_a_prompt_on_one_side_keeps_its_other_rows_off_the_other(train_rows) -> None:
    """Rows of other ids with a training row's prompt (a second answer, a copy) are never probed."""
    prompts = ["p0", "p1", "p0", "p1", "p2", "p3", "p2", "p4", "p5", "p6"]  # rows 2, 3, 6 repeat a prompt
    frame = scored_frame([9.0, 8.0, 1.0, 1.0, 7.0, 6.0, 1.0, 1.0, 1.0, 1.0], prompts=prompts)
    probe_tokens = 100 if train_rows else 12  # every row not trained on / three rows first
    selection = select(frame, spec(train_rows=train_rows, probe_tokens=probe_tokens), "toycorpus")
    train, probe = set(frame["prompt"][selection.train]), set(frame["prompt"][selection.probe])
    assert selection.train.any() and selection.probe.any() and not train & probe
    assert not (selection.train | selection.probe)[selection.shared_prompt].any()
    on_either = selection.train | selection.probe | selection.shared_prompt
    assert on_either.all(), "every eligible row is on one side or withheld"
    # Training first takes rows 0, 1, 4, 5, so the probe pool never p0, p1, p2; the probe pool
    # first (seed 7) takes rows 0, 3, 6, so training never p0, p1, p2 either.
    withheld = [2, 3, 6] if train_rows else [1, 2, 4]
    assert np.flatnonzero(selection.shared_prompt).tolist() == withheld
    assert build_report(frame, selection, "toycorpus")["rows_withheld_shared_prompt"] == 3
