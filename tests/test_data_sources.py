"""Source readers and final-completion extraction on crafted rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workflow_scripts.chat_sources.completions import final_completion, has_reasoning_tag
from workflow_scripts.chat_sources.readers import read_source
from workflow_scripts.errors import UserInputError

SHAREGPT = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))
MESSAGES = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))


def turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"from": who, "value": text} for who, text in pairs]


def write(
    tmp_path: Path, table: pa.Table, name: str = "raw.parquet", row_group_size: int | None = None
) -> Path:
    path = tmp_path / name
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def glm_table() -> pa.Table:
    conversations = [
        turns(("human", "Q0"), ("gpt", "A0")),
        turns(("gpt", "stray"), ("human", "Q1"), ("gpt", "A1"), ("gpt", "A1b")),
        turns(("human", "Q2")),
        turns(("system", "S"), ("human", "Q3"), ("human", "Q3b"), ("gpt", "A3")),
        None,
        [],
        turns(("gpt", "only answer")),
    ]
    n = len(conversations)
    return pa.table(
        {
            "id": [f"g{i}" for i in range(n)],
            "conversations": pa.array(conversations, SHAREGPT),
            "input": [""] * n,
            "output": [""] * n,
            "domain": ["math"] * n,
            "meta": ["{}"] * n,
        }
    )


def test_glm_first_user_turn_and_first_assistant_turn_after_it(tmp_path: Path) -> None:
    frame = read_source(write(tmp_path, glm_table(), row_group_size=3), "glm_sharegpt")
    assert frame["row_id"].tolist() == list(range(7))
    assert frame["row_id"].dtype == np.int64
    assert frame["source_id"].tolist() == [f"g{i}" for i in range(7)]
    assert frame["prompt_raw"].tolist() == ["Q0", "Q1", "Q2", "Q3", "", "", ""]
    assert frame["answer_raw"].tolist() == ["A0", "A1", "", "A3", "", "", "only answer"]
    assert frame["has_assistant"].tolist() == [True, True, False, True, False, False, True]


def test_openr1_messages(tmp_path: Path) -> None:
    messages = [
        [{"role": "user", "content": "P0"}, {"role": "assistant", "content": "<think>r</think>S0"}],
        [{"role": "user", "content": "P1"}],
        [{"role": "assistant", "content": "before"}, {"role": "user", "content": "P2"}],
    ]
    table = pa.table(
        {
            "problem": ["P0", "P1", "P2"],
            "solution": ["", "", ""],
            "answer": ["", "", ""],
            "uuid": ["u0", "u1", "u2"],
            "messages": pa.array(messages, MESSAGES),
        }
    )
    frame = read_source(write(tmp_path, table), "openr1")
    assert frame["source_id"].tolist() == ["u0", "u1", "u2"]
    assert frame["prompt_raw"].tolist() == ["P0", "P1", "P2"]
    assert frame["answer_raw"].tolist() == ["<think>r</think>S0", "", ""]
    assert frame["has_assistant"].tolist() == [True, False, False]


@pytest.mark.parametrize(
    ("column", "values", "needle"),
    [
        ("conversations", None, "missing required column 'conversations'"),
        ("conversations", pa.array([["a", "b"]], pa.list_(pa.string())), "column 'conversations'"),
        (
            "conversations",
            pa.array(
                [[{"from": "human", "value": 1}]],
                pa.list_(pa.struct([("from", pa.string()), ("value", pa.int64())])),
            ),
            "column 'conversations' field 'value'",
        ),
        ("conversations", pa.array(["text"]), "column 'conversations'"),
        ("id", pa.array([1.5]), "column 'id'"),
    ],
)
def test_malformed_schema_names_file_and_column(tmp_path: Path, column: str, values, needle: str) -> None:
    table = pa.table(
        {"id": ["x"], "conversations": pa.array([turns(("human", "q"), ("gpt", "a"))], SHAREGPT)}
    )
    table = (
        table.drop_columns([column])
        if values is None
        else table.set_column(table.schema.get_field_index(column), column, values)
    )
    path = write(tmp_path, table)
    with pytest.raises(UserInputError) as caught:
        read_source(path, "glm_sharegpt")
    assert str(path) in str(caught.value) and needle in str(caught.value)


def test_corrupt_parquet(tmp_path: Path) -> None:
    path = tmp_path / "garbage.parquet"
    path.write_bytes(b"this is not a parquet file at all" * 10)
    with pytest.raises(UserInputError, match="garbage.parquet"):
        read_source(path, "glm_sharegpt")


def test_final_completion_rules() -> None:
    answers = pa.array(
        [
            "<think>a</think>\n final ",  # closed channel: text after it
            "<think>a</think>b</think> c",  # several closing tags: after the LAST one
            "no channel at all",  # neither tag: whole answer
            "<think>never closed",  # unclosed: kept, flagged
            "x</think> y <think>z",  # a tag after the cut: kept, flagged
            "<think>only reasoning</think>   ",  # nothing after the channel: empty
            "dropped opening</think>answer",  # closing tag only
        ]
    )
    final = final_completion(answers).to_list()
    assert final == ["final", "c", "no channel at all", "<think>never closed", "y <think>z", "", "answer"]
    flags = has_reasoning_tag(pa.chunked_array([final]), ("<think>", "</think>"))
    assert flags.tolist() == [False, False, False, True, True, False, False]


def unclean_glm(tmp_path: Path) -> Path:
    """Six rows as bytes on disk: a lone surrogate, an undecodable byte and NULs in text, role and id."""
    texts = [b"Q0", b"Q1 \xed\xa0\x80", b"Q2", b"Q3 \xff", b"Q4 \x00", b"Q5"]
    roles = [b"human", b"human", b"human", b"human", b"human", b"hu\x00man"]
    ids = [b"g0", b"g1", b"g2\x00", b"g3", b"g4", b"g5"]

    def strings(values: list[bytes]) -> pa.Array:  # Arrow's string type over raw bytes, as a writer left them
        return pa.array(values, pa.binary()).view(pa.string())

    flat = pa.StructArray.from_arrays(
        [strings([b for r in roles for b in (r, b"gpt")]), strings([b for t in texts for b in (t, b"A")])],
        names=["from", "value"],
    )
    conversations = pa.ListArray.from_arrays(pa.array(range(0, 13, 2), pa.int32()), flat)
    return write(tmp_path, pa.table({"id": strings(ids), "conversations": conversations}), row_group_size=4)


def test_rows_with_nul_or_invalid_utf8_are_dropped_naming_file_and_rows(tmp_path: Path, capsys) -> None:
    path = unclean_glm(tmp_path)
    frame = read_source(path, "glm_sharegpt")
    assert frame["row_id"].tolist() == [0]
    assert frame["prompt_raw"].tolist() == ["Q0"] and frame["source_id"].tolist() == ["g0"]
    frame.to_parquet(tmp_path / "clean.parquet")  # where the unclean rows used to fail
    err = capsys.readouterr().err
    assert f"{path}: dropped 5 rows" in err and "row ids 1, 2, 3, 4, 5" in err


def test_clean_rows_keep_their_row_ids_after_a_dropped_one(tmp_path: Path) -> None:
    table = glm_table()
    conversations = table.column("conversations").to_pylist()
    conversations[1] = turns(("human", "Q1\x00"), ("gpt", "A1"))
    path = write(tmp_path, table.set_column(1, "conversations", pa.array(conversations, SHAREGPT)))
    frame = read_source(path, "glm_sharegpt")
    assert frame["row_id"].tolist() == [0, 2, 3, 4, 5, 6]
    assert frame["prompt_raw"].tolist()[:3] == ["Q0", "Q2", "Q3"]
