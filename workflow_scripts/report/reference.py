"""The paper's published numbers (``reference/{table_id}.csv``) and their comparison with a reproduced table.

A reference CSV has the table's key columns, then ``column``, ``value`` and
``sd`` (empty where the paper prints no spread): one row per number the paper
prints. Keys compare as text (an empty key is a row without that id, such as
the base model's corpus; numeric keys compare by value).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.report.table import Table

VALUE_COLUMNS = ("column", "value", "sd")
NOTE_MARK = "- "
COMPARE_COLUMNS = ("value", "sd", "n", "paper", "paper_sd", "delta", "status")


def key_text(value: Any) -> str:
    """A key value as text: missing -> "", numbers by value (``0.10`` and ``0.1`` agree), ids unchanged."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return format(number, "g") if math.isfinite(number) else text


def _parse(text: str, where: str, allow_empty: bool) -> float:
    if text.strip() == "":
        if allow_empty:
            return math.nan
        raise ValueError(f"{where}: empty")
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{where}: {text!r} is not finite")
    return number


def load_reference(path: Path) -> pd.DataFrame:
    """Read and check one reference CSV: key columns as text, ``value``/``sd`` as floats.

    Raises naming the file (and row) for a missing column, no key column, a
    non-numeric value or a repeated (keys, column) cell.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no reference table")
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [name for name in VALUE_COLUMNS if name not in raw.columns]
    if missing:
        raise ValueError(
            f"{path}: missing columns {missing} (need the table keys, then {list(VALUE_COLUMNS)})"
        )
    keys = [name for name in raw.columns if name not in VALUE_COLUMNS]
    if not keys:
        raise ValueError(f"{path}: no key columns before {list(VALUE_COLUMNS)}")
    frame = raw[keys].map(key_text)
    frame["column"] = raw["column"].str.strip()
    values, sds = [], []
    for index, row in raw.iterrows():
        where = f"{path} row {index + 2}"
        if frame.at[index, "column"] == "":
            raise ValueError(f"{where}: empty 'column'")
        values.append(_parse(row["value"], f"{where} value", allow_empty=False))
        sds.append(_parse(row["sd"], f"{where} sd", allow_empty=True))
    frame["value"] = pd.Series(values, index=raw.index, dtype=float)
    frame["sd"] = pd.Series(sds, index=raw.index, dtype=float)
    repeated = frame.duplicated([*keys, "column"], keep=False)
    if repeated.any():
        first = frame[repeated].iloc[0]
        raise ValueError(f"{path}: cell {dict(first[[*keys, 'column']])} appears more than once")
    frame.attrs["path"] = str(path)
    return frame


def table_cells(table: Table) -> pd.DataFrame:
    """The table as one row per cell: keys (as text), column, value, sd, n; in table order."""
    records = []
    for _, row in table.rows.iterrows():
        keys = {key: key_text(row[key]) for key in table.keys}
        for column in table.columns:
            records.append(
                {
                    **keys,
                    "column": column,
                    "value": float(row[column]),
                    "sd": float(row[f"{column}_sd"]),
                    "n": int(row[f"{column}_n"]),
                }
            )
    return pd.DataFrame(records, columns=[*table.keys, "column", "value", "sd", "n"])


def empty_reference(table: Table) -> pd.DataFrame:
    """A reference with no published cells, for tables the paper gives no numbers for."""
    return pd.DataFrame(
        {**{key: pd.Series(dtype=str) for key in (*table.keys, "column")}, **{"value": [], "sd": []}}
    )


def _status(value: float, paper: float) -> str:
    if math.isnan(paper):
        return "unpublished"
    return "missing" if math.isnan(value) else "matched"


def compare(table: Table, reference: pd.DataFrame) -> pd.DataFrame:
    """Every cell of ``table`` beside the paper's value and the delta (reproduction minus paper).

    Matched on the table's keys and column id. Paper cells the reproduction
    lacks stay in, after the table's own cells, with status ``missing``;
    reproduced cells the paper does not print have status ``unpublished``.
    """
    source = reference.attrs.get("path", "reference")
    ref_keys = [name for name in reference.columns if name not in VALUE_COLUMNS]
    if sorted(ref_keys) != sorted(table.keys):
        raise ValueError(
            f"{source}: key columns {ref_keys} differ from table {table.table_id}'s {list(table.keys)}"
        )
    unknown = sorted(set(reference["column"]) - set(table.columns))
    if unknown:
        raise ValueError(f"{source}: columns {unknown} are not columns of table {table.table_id}")
    on = [*table.keys, "column"]
    paper = reference[on + ["value", "sd"]].rename(columns={"value": "paper", "sd": "paper_sd"})
    paper = paper.assign(**{key: paper[key].map(key_text) for key in table.keys})
    cells = table_cells(table)
    merged = cells.merge(paper, on=on, how="outer", sort=False)
    # Outer merges do not keep left order: table cells first (table order), then paper-only cells.
    order = {tuple(row): index for index, row in enumerate(cells[on].itertuples(index=False))}
    paper_order = {tuple(row): index for index, row in enumerate(paper[on].itertuples(index=False))}
    merged["_rank"] = [
        (0, order[key]) if key in order else (1, paper_order[key])
        for key in merged[on].itertuples(index=False, name=None)
    ]
    merged = merged.sort_values("_rank", kind="stable").drop(columns="_rank")
    merged["n"] = merged["n"].fillna(0).astype(int)
    merged["delta"] = merged["value"] - merged["paper"]
    merged["status"] = [_status(v, p) for v, p in zip(merged["value"], merged["paper"], strict=True)]
    return merged[[*on, *COMPARE_COLUMNS]].reset_index(drop=True)


def load_reference_notes(path: Path) -> tuple[str, ...]:
    """The notes on a reference table (``reference/{table_id}.notes.md``): one ``- `` item per note.

    They say where the paper's own numbers cannot all be matched (e.g. two tables printing
    different values for one run), so the rendered table tells a reader comparing against it.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot be read ({error})") from error
    notes = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if not line.startswith(NOTE_MARK) or not line[len(NOTE_MARK) :].strip():
            raise ValueError(f"{path} line {number}: a note is one line starting with {NOTE_MARK!r}")
        notes.append(line[len(NOTE_MARK) :].strip())
    return tuple(notes)
