"""Readers that turn a raw source parquet into one normalised frame.

Every source format ends up as the same columns (``read_source``), so scoring and selection
never see a source schema; ``row_id`` keeps each row traceable to the snapshot. Rows whose text
is not clean (NUL bytes, invalid UTF-8) are dropped here, naming the file and row ids.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from workflow_scripts.errors import UserInputError

STRING = pd.ArrowDtype(pa.string())
SHOWN_ROW_IDS = 10  # dropped row ids printed per raw file


@dataclass(frozen=True)
class SourceFormat:
    """Where a format keeps its id and its chat turns, and how turns name their speaker."""

    id_column: str
    turns_column: str
    role_field: str
    text_field: str
    user_role: str
    assistant_role: str


FORMATS: dict[str, SourceFormat] = {
    # Jackrong/GLM-5.1-Reasoning-1M-Cleaned: ShareGPT turns {from: human|gpt, value}.
    "glm_sharegpt": SourceFormat("id", "conversations", "from", "value", "human", "gpt"),
    # open-r1/OpenR1-Math-220k: chat messages {role: user|assistant, content}.
    "openr1": SourceFormat("uuid", "messages", "role", "content", "user", "assistant"),
}


def _is_text(dtype: pa.DataType) -> bool:
    return pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_null(dtype)


def _check_schema(path: Path, schema: pa.Schema, spec: SourceFormat) -> None:
    """Fail with the file and column when the raw schema is not the one this format expects."""
    for column in (spec.id_column, spec.turns_column):
        if schema.get_field_index(column) < 0:
            raise UserInputError(f"{path}: missing required column '{column}'")
    id_type = schema.field(spec.id_column).type
    if not (_is_text(id_type) or pa.types.is_integer(id_type)):
        raise UserInputError(f"{path}: column '{spec.id_column}' must hold strings, found {id_type}")
    turns_type = schema.field(spec.turns_column).type
    expected = f"a list of structs {{{spec.role_field}, {spec.text_field}}} of strings"
    if not (pa.types.is_list(turns_type) or pa.types.is_large_list(turns_type)) or not pa.types.is_struct(
        turns_type.value_type
    ):
        raise UserInputError(f"{path}: column '{spec.turns_column}' must be {expected}, found {turns_type}")
    struct = turns_type.value_type
    for name in (spec.role_field, spec.text_field):
        index = struct.get_field_index(name)
        if index < 0 or not _is_text(struct.field(index).type):
            found = struct.field(index).type if index >= 0 else "no such field"
            raise UserInputError(
                f"{path}: column '{spec.turns_column}' field '{name}' must be a string ({found})"
            )


def _decodes(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _bad_values(values: pa.Array) -> np.ndarray:
    """Per string value: whether it holds a NUL byte or is not valid UTF-8 (nulls are fine)."""
    if pa.types.is_null(values.type):
        return np.zeros(len(values), dtype=bool)
    raw = values.view(pa.large_binary() if pa.types.is_large_string(values.type) else pa.binary())
    bad = pc.fill_null(pc.match_substring(raw, "\x00"), False).to_numpy(zero_copy_only=False)
    try:
        values.validate(full=True)  # fast path: the whole array is valid UTF-8
    except pa.ArrowInvalid:
        bad |= np.array([v is not None and not _decodes(v) for v in raw.to_pylist()], dtype=bool)
    return bad


def invalid_text_rows(batch: pa.RecordBatch, spec: SourceFormat) -> np.ndarray:
    """Per row of ``batch``: whether its id or any turn's role or text is not clean text.

    A row whose id or any turn's role or text holds a NUL byte or
    is not valid UTF-8 (undecodable bytes, an encoded lone surrogate) is dropped here,
    with the raw file and its row ids on stderr, rather than failing later with an
    Arrow error that names a downstream file.
    """
    turns = batch.column(spec.turns_column)
    flat = pc.list_flatten(turns)
    parents = pc.list_parent_indices(turns).to_numpy()
    bad = np.zeros(len(batch), dtype=bool)
    for name in (spec.role_field, spec.text_field):
        bad[parents[_bad_values(pc.struct_field(flat, name))]] = True
    ids = batch.column(spec.id_column)
    if _is_text(ids.type):
        bad |= _bad_values(ids)
    return bad


def _report_dropped(path: Path, row_ids: np.ndarray) -> None:
    shown = ", ".join(map(str, row_ids[:SHOWN_ROW_IDS])) + (", ..." if len(row_ids) > SHOWN_ROW_IDS else "")
    print(
        f"{path}: dropped {len(row_ids)} rows with NUL bytes or invalid UTF-8 in their text "
        f"(row ids {shown})",
        file=sys.stderr,
    )


def _first_turns(turns: pa.Array, spec: SourceFormat) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """First user turn and the first assistant turn after it, per row of one batch."""
    n_rows = len(turns)
    flat = pc.list_flatten(turns)
    parents = pc.list_parent_indices(turns).to_numpy()
    role = pc.fill_null(pc.cast(pc.struct_field(flat, spec.role_field), pa.string()), "")
    role = role.to_numpy(zero_copy_only=False)
    position = np.arange(len(flat), dtype=np.int64)

    # Parent indices are sorted, so np.unique's first index is the first matching turn of each row.
    user_at = np.full(n_rows, -1, dtype=np.int64)
    is_user = role == spec.user_role
    rows, first = np.unique(parents[is_user], return_index=True)
    user_at[rows] = position[is_user][first]

    # A row without a user turn takes its first assistant turn anywhere (its prompt is empty anyway).
    answer_at = np.full(n_rows, -1, dtype=np.int64)
    is_answer = (role == spec.assistant_role) & (position > user_at[parents])
    rows, first = np.unique(parents[is_answer], return_index=True)
    answer_at[rows] = position[is_answer][first]

    text = pc.fill_null(pc.cast(pc.struct_field(flat, spec.text_field), pa.string()), "")

    def pick(at: np.ndarray) -> pa.Array:
        return pc.fill_null(pc.take(text, pa.array(at, mask=at < 0)), "")

    return pick(user_at), pick(answer_at), answer_at >= 0


def text_column(series: pd.Series) -> pa.ChunkedArray:
    """The Arrow data behind a string column, as chunks (never combined, so never over 2 GiB)."""
    arrow = pa.array(series, type=pa.string())
    return arrow if isinstance(arrow, pa.ChunkedArray) else pa.chunked_array([arrow])


def read_source(path: str | Path, fmt: str) -> pd.DataFrame:
    """Read ``path`` in source format ``fmt`` into one normalised frame.

    Columns:

    - ``row_id`` (int64): position of the row in the source file; stable, so the
      selected rows can always be traced back to the snapshot.
    - ``source_id`` (str): the dataset's own row identifier (``id`` or ``uuid``).
    - ``prompt_raw`` (str): the first user turn, ``""`` when there is none.
    - ``answer_raw`` (str): the first assistant turn after that user turn, with its
      reasoning channel still in place; ``""`` when there is none.
    - ``has_assistant`` (bool): whether that assistant turn exists.

    Turns are picked with Arrow list kernels (flatten, parent indices, masks), one
    record batch at a time so that a string column larger than 2 GiB never has to
    be combined into a single array.
    """
    path = Path(path)
    if fmt not in FORMATS:
        raise UserInputError(f"{path}: unknown source format '{fmt}' (expected one of {sorted(FORMATS)})")
    spec = FORMATS[fmt]
    try:
        parquet = pq.ParquetFile(path)
        _check_schema(path, parquet.schema_arrow, spec)
        batches = list(parquet.iter_batches(columns=[spec.id_column, spec.turns_column]))
    except UserInputError:
        raise
    except (OSError, pa.ArrowException) as error:
        raise UserInputError(f"{path}: not a readable parquet file ({error})") from error

    parts = {"bad": [], "source_id": [], "prompt_raw": [], "answer_raw": [], "has_assistant": []}
    for batch in batches:
        bad = invalid_text_rows(batch, spec)
        parts["bad"].append(bad)
        clean = batch.filter(pa.array(~bad)) if bad.any() else batch
        prompt, answer, has_assistant = _first_turns(clean.column(spec.turns_column), spec)
        parts["source_id"].append(pc.fill_null(pc.cast(clean.column(spec.id_column), pa.string()), ""))
        parts["prompt_raw"].append(prompt)
        parts["answer_raw"].append(answer)
        parts["has_assistant"].append(has_assistant)
    bad = np.concatenate(parts["bad"]) if batches else np.zeros(0, dtype=bool)
    if bad.any():
        _report_dropped(path, np.flatnonzero(bad))
    frame = pd.DataFrame({"row_id": np.flatnonzero(~bad).astype(np.int64)})  # positions in the file
    for name in ("source_id", "prompt_raw", "answer_raw"):
        frame[name] = pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(parts[name], pa.string())))
    frame["has_assistant"] = np.concatenate(parts["has_assistant"]) if batches else np.zeros(0, dtype=bool)
    return frame
