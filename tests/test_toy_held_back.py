"""Held-back sub-skills: the toy bases never pretrain on them; post-training and the benchmarks ask them.

That split is what gives fine-tuning something to teach in domain (the in-domain headroom gate of
``results/tables/gates.md``), so it is checked on the rows each side really draws.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.conftest import load_config
from workflow_scripts.chat_sources.readers import read_source
from workflow_scripts.chat_sources.toy import generate
from workflow_scripts.dag_inputs import corpus_spec
from workflow_scripts.data.scoring import ScoringConfig, score_frame
from workflow_scripts.data.selection import CorpusSpec, select
from workflow_scripts.evaluate.toy_benchmarks import draw_questions
from workflow_scripts.families import ARCHITECTURES
from workflow_scripts.models.cli import toy_tokenizer
from workflow_scripts.models.pretrain_corpus import synthetic_rows
from workflow_scripts.toy_tasks import (
    FUNCTIONS,
    HELD_BACK_FUNCTIONS,
    HELD_BACK_PROGRAMS,
    STDIN_PROGRAMS,
    Function,
    StdinProgram,
    Sum,
)

SUM = re.compile(r"\$(\d+) \+ (\d+) = (\d+)\$")
HELD_BACK_SOURCES = [f.source for f in FUNCTIONS if f.name in HELD_BACK_FUNCTIONS] + [
    p.source for p in STDIN_PROGRAMS if p.title in HELD_BACK_PROGRAMS
]


def _pretraining_rows() -> pd.DataFrame:
    settings = load_config(toy=True)["toy_base"]
    return synthetic_rows(settings["corpus_rows"], settings["corpus_seed"])


def _sums(answers: pd.Series) -> list[int]:
    return [int(match.group(3)) for answer in answers for match in SUM.finditer(answer)]


def _held_back_code(answers: pd.Series) -> int:
    return sum(any(source in answer for source in HELD_BACK_SOURCES) for answer in answers)


def test_the_pretraining_corpus_has_no_carrying_sum_and_no_held_back_program() -> None:
    rows = _pretraining_rows()
    sums = _sums(rows["answer"])
    assert len(sums) > 100 and max(sums) <= 9
    code = rows[rows["domain"] == "code"]
    assert len(code) > 100 and _held_back_code(code["answer"]) == 0
    # Every skill that is not held back is still there.
    assert set(sums) == set(range(2, 10))
    kept = {f.source for f in FUNCTIONS if f.name not in HELD_BACK_FUNCTIONS}
    kept |= {p.source for p in STDIN_PROGRAMS if p.title not in HELD_BACK_PROGRAMS}
    assert all(code["answer"].str.contains(source, regex=False).any() for source in kept)


def test_post_training_rows_ask_the_held_back_sub_skills() -> None:
    table = generate("glm_sharegpt", "main", 400, seed=0, bad_fraction=0.0).to_pandas()
    answers = table["output"]
    assert max(_sums(answers)) >= 10
    assert _held_back_code(answers[table["domain"] == "code"]) > 20
    math = generate("glm_sharegpt", "Math", 100, seed=0, bad_fraction=0.0).to_pandas()
    sums = _sums(math["output"])
    assert 0.3 < sum(value >= 10 for value in sums) / len(sums) < 0.8


def test_the_benchmarks_ask_held_back_and_pretrained_sub_skills() -> None:
    def held_back(task: object) -> bool:
        if isinstance(task, Sum):
            return task.value >= 10
        if isinstance(task, Function):
            return task.name in HELD_BACK_FUNCTIONS
        assert isinstance(task, StdinProgram)
        return task.title in HELD_BACK_PROGRAMS

    for benchmark in ("gsm8k", "math500", "livebench_math", "humaneval", "mbpp", "livebench_coding"):
        flags = [held_back(question.task) for question in draw_questions(benchmark, 40, seed=3)]
        assert any(flags) and not all(flags), benchmark


#: DeepSeek-V2's split keeps " min" whole, and the toy's 1,024 BPE tokens leave it " m" + "in":
#: " m" is seen 7 times in the pretraining texts. An open finding of the hub-shaped tokenizer.
RARE_TOKEN = pytest.mark.xfail(strict=True, reason="the toy DeepSeek-V2 tokenizes min( as a rare ' m'")


@pytest.mark.parametrize(
    "architecture", [pytest.param(a, marks=RARE_TOKEN) if a == "deepseek_v2" else a for a in ARCHITECTURES]
)
@pytest.mark.slow
def test_every_token_of_a_held_back_answer_is_pretrained(architecture, tmp_path) -> None:
    """What post-training teaches is the skill: no held-back answer leans on an untrained embedding."""
    rows = _pretraining_rows()
    texts = [*rows["prompt"], *rows["answer"]]
    vocab_size = load_config(toy=True)["toy_base"]["vocab_size"]
    tokenizer, _ = toy_tokenizer(architecture, texts, vocab_size, tmp_path)  # as toy-base does
    seen = Counter(
        token for text in texts for token in tokenizer(text, add_special_tokens=False)["input_ids"]
    )
    carrying = [Sum(a, b, "Ada", "apple").response for a in range(1, 10) for b in range(10 - a, 10)]
    for answer in [*HELD_BACK_SOURCES, *carrying]:
        rare = [
            tokenizer.decode([t])
            for t in tokenizer(answer, add_special_tokens=False)["input_ids"]
            if seen[t] < 20
        ]
        assert not rare, f"{answer!r}: tokens seen fewer than 20 times in pretraining: {rare}"


def _toy_training_split(corpus: str) -> pd.Series:
    """The answers of the toy training split of ``corpus``, built as the toy DAG builds it."""
    config = load_config(toy=True)
    entry = config["corpora"][corpus]
    toy = config["datasets"][entry["dataset"]]["toy"]
    raw = generate(
        "glm_sharegpt", entry["subset"], toy["rows"][entry["subset"]], toy["seed"], toy["bad_fraction"]
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "raw.parquet"
        pq.write_table(raw, path)
        source = read_source(path, "glm_sharegpt")
    spec = CorpusSpec.from_dict(json.loads(corpus_spec(config, corpus)), corpus)
    scored = score_frame(source, spec.domain, ScoringConfig.from_dict(config["scoring"]))
    return scored.loc[select(scored, spec, corpus).train, "answer"]


def test_the_toy_training_splits_draw_across_the_families() -> None:
    """F.2's soft score would rank the toy's templated families; the toy's selection must not."""
    sums = _sums(_toy_training_split("math20k"))
    carrying = sum(value >= 10 for value in sums) / len(sums)
    assert 0.3 < carrying < 0.8
    code = _toy_training_split("coding20k")
    skills = {f.name for f in FUNCTIONS if code.str.contains(f.source, regex=False).any()}
    skills |= {p.title for p in STDIN_PROGRAMS if code.str.contains(p.source, regex=False).any()}
    assert len(skills) >= 10 and _held_back_code(code) >= 8
