"""A reproduced table as text: machine CSV, readable Markdown with the paper beside, and paper-layout LaTeX.

All three come from one :class:`~workflow_scripts.report.table.Table`; the
output is a pure function of it, the reference and the scale (deterministic).
Seed-count marks flag cells whose mean covers fewer seeds than the table's
other cells (F.5: "rows that mix the two are marked") and every single-seed
cell, even where all are (toy scale); bold marks the best mean per block in
the columns ``Table.bold`` names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from workflow_scripts.report.reference import compare, empty_reference, key_text, table_cells
from workflow_scripts.report.table import Table

DEFAULT_DIGITS = 2
TOY_HEADER = (
    "Toy scale: the models and data are toy stand-ins for the paper's, so the deltas against the "
    "paper's values are not a reproduction verdict."
)
# Mark per seed count below the table's maximum: (markdown, LaTeX, meaning).
MARKS = {
    0: ("‡", r"\ddagger", "no training seed (base model or a seed-free quantity)"),
    1: ("†", r"\dagger", "single training seed"),
}
OTHER_MARK = ("§", r"\S", "fewer training seeds than the table's other cells (count in the CSV's n column)")
TEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
}


def _digits(table: Table, column: str) -> int:
    return table.digits.get(column, DEFAULT_DIGITS)


def fixed(value: float, digits: int, sign: bool = False) -> str:
    """``value`` at ``digits`` decimals (signed with ``sign``), never ``-0.0``; ``—`` for NaN."""
    if math.isnan(value):
        return "—"
    rounded = round(value, digits) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{rounded:+.{digits}f}" if sign else f"{rounded:.{digits}f}"


def _label(table: Table, value: str) -> str:
    return table.labels.get(value, value)


def _best(table: Table) -> set[tuple[int, str]]:
    """(row position, column) of the best mean per block, ties at the displayed precision included."""
    best: set[tuple[int, str]] = set()
    rows = table.rows.reset_index(drop=True)
    blocks = rows.groupby(table.block, sort=False, dropna=False) if table.block else [(None, rows)]
    for column, direction in table.bold.items():
        for _, group in blocks:
            shown = group[column].dropna().round(_digits(table, column))
            if len(shown) < 2:
                continue
            target = shown.max() if direction == "max" else shown.min()
            best |= {(position, column) for position in shown.index[shown == target]}
    return best


def _mark_of(n: int, most: int) -> tuple[str, str, str] | None:
    """The cell's seed-count mark: fewer seeds than the table's most, or a single seed wherever it is."""
    if n >= most and n != 1:
        return None
    return MARKS.get(n, OTHER_MARK)


def _most_seeds(table: Table) -> int:
    if table.rows.empty:
        return 0
    return int(max(table.rows[f"{column}_n"].max() for column in table.columns))


def _mark_notes(table: Table, cells: pd.DataFrame) -> list[str]:
    most = _most_seeds(table)
    used = {
        _mark_of(int(n), most)
        for n, value in zip(cells["n"], cells["value"], strict=True)
        if not math.isnan(value)
    }
    used.discard(None)
    most_text = f"up to {most} seeds" if most > 1 else "1 seed"
    return [
        f"{mark} {meaning}: every trained value of this table, so none has an sd."
        if most == 1 and mark == MARKS[1][0]
        else f"{mark} {meaning} (other cells: {most_text})."
        for mark, _, meaning in sorted(used)
    ]


def _comparison(table: Table, reference: pd.DataFrame | None) -> pd.DataFrame:
    return compare(table, empty_reference(table) if reference is None else reference)


def render_csv(comparison: pd.DataFrame) -> str:
    """Long CSV: keys, column, value, sd, n, paper, paper_sd, delta, status."""
    return comparison.to_csv(index=False, float_format="%.6f", lineterminator="\n")


def _row_frames(table: Table, comparison: pd.DataFrame) -> list[tuple[dict[str, str], dict[str, pd.Series]]]:
    """Rows for display: the table's rows, then rows the paper prints and the reproduction lacks."""
    groups: dict[tuple[str, ...], dict[str, pd.Series]] = {}
    for _, cell in comparison.iterrows():
        key = tuple(cell[k] for k in table.keys)
        groups.setdefault(key, {})[cell["column"]] = cell
    return [(dict(zip(table.keys, key, strict=True)), cells) for key, cells in groups.items()]


def _position(table: Table) -> dict[tuple[str, ...], int]:
    rows = table.rows.reset_index(drop=True)
    return {tuple(key_text(row[k]) for k in table.keys): index for index, row in rows.iterrows()}


def _reproduced(cell: pd.Series | None, digits: int, bold: bool, most: int) -> str:
    """``mean ± sd`` with the seed-count mark, the mean in bold where it is its block's best."""
    if cell is None or math.isnan(cell["value"]):
        return "—"
    mean = fixed(cell["value"], digits)
    text = f"**{mean}**" if bold else mean
    if not math.isnan(cell["sd"]):
        text += f" ± {fixed(cell['sd'], digits)}"
    mark = _mark_of(int(cell["n"]), most)
    return text + (mark[0] if mark else "")


def _published(cell: pd.Series | None, digits: int) -> str:
    """``paper ± sd (Δ delta)``, or — where the paper prints no value."""
    if cell is None or math.isnan(cell["paper"]):
        return "—"
    text = fixed(cell["paper"], digits)
    if not math.isnan(cell["paper_sd"]):
        text += f" ± {fixed(cell['paper_sd'], digits)}"
    if not math.isnan(cell["delta"]):
        text += f" (Δ {fixed(cell['delta'], digits, sign=True)})"
    return text


def _md_escape(text: str) -> str:
    return text.replace("|", r"\|")


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(_md_escape(text) for text in cells) + " |"


def render_md(table: Table, comparison: pd.DataFrame, scale: str, with_paper: bool) -> str:
    """Readable Markdown: mean ± sd with seed marks and bold, the paper's value and the delta beside."""
    most, best, positions = _most_seeds(table), _best(table), _position(table)
    header = [_label(table, key) for key in table.keys]
    for column in table.columns:
        name = _label(table, column)
        header += [name, f"{name}: paper (Δ)"] if with_paper else [name]
    lines = [f"## {table.table_id}: {table.title}", ""]
    if scale == "toy":
        lines += [f"> {TOY_HEADER}", ""]
    lines += [_md_row(header), "|" + "---|" * len(header)]
    for keys, cells in _row_frames(table, comparison):
        position = positions.get(tuple(keys.values()))
        out = [_label(table, keys[key]) for key in table.keys]
        for column in table.columns:
            digits, cell = _digits(table, column), cells.get(column)
            out.append(_reproduced(cell, digits, (position, column) in best, most))
            if with_paper:
                out.append(_published(cell, digits))
        lines.append(_md_row(out))
    notes = _mark_notes(table, comparison) + list(table.notes)
    missing = comparison[comparison["status"] == "missing"]
    if len(missing):
        notes.append(f"{len(missing)} published value(s) have no reproduced counterpart (—).")
    if with_paper:
        notes.append("Δ is the reproduced mean minus the paper's value.")
    if notes:
        lines += ["", "Notes:", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def _tex_text(text: str) -> str:
    """Escape LaTeX specials outside math; a label holding ``$...$`` is taken as written."""
    if "$" in text:
        return text
    return "".join(TEX_SPECIALS.get(char, char) for char in text)


def render_tex(table: Table, scale: str) -> str:
    """Booktabs tabular in the paper's layout: ``$m_{\\pm s}$`` cells, best per block bold, blocks ruled."""
    most, best = _most_seeds(table), _best(table)
    rows = table.rows.reset_index(drop=True)
    lines = [f"% {table.table_id}: {table.title}"]
    if scale == "toy":
        lines.append(f"% {TOY_HEADER}")
    lines += [
        r"\begin{tabular}{" + "l" * len(table.keys) + "r" * len(table.columns) + "}",
        r"\toprule",
        " & ".join(_tex_text(_label(table, name)) for name in (*table.keys, *table.columns)) + r" \\",
        r"\midrule",
    ]
    previous: str | None = None
    for position, row in rows.iterrows():
        keys = {key: key_text(row[key]) for key in table.keys}
        out = []
        for key in table.keys:
            block_repeat = key == table.block and keys[key] == previous
            out.append("" if block_repeat else _tex_text(_label(table, keys[key])))
        if table.block is not None:
            if previous is not None and keys[table.block] != previous:
                lines.append(r"\midrule")
            previous = keys[table.block]
        for column in table.columns:
            out.append(_tex_cell(table, row, column, (position, column) in best, most))
        lines.append(" & ".join(out) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [f"% {note}" for note in _mark_notes(table, table_cells(table)) + list(table.notes)]
    return "\n".join(lines) + "\n"


def _tex_cell(table: Table, row: Mapping, column: str, bold: bool, most: int) -> str:
    value, sd, n = row[column], row[f"{column}_sd"], row[f"{column}_n"]
    if pd.isna(value):
        return "--"
    digits = _digits(table, column)
    mean = fixed(float(value), digits)
    text = rf"\mathbf{{{mean}}}" if bold else mean
    if not pd.isna(sd):
        text += rf"_{{\pm {fixed(float(sd), digits)}}}"
    mark = _mark_of(int(n), most)
    if mark:
        text += rf"^{{{mark[1]}}}"
    return f"${text}$"


def _is_descriptive(table: Table) -> bool:
    """A table of text values (Table 1, from the registry): nothing to average, compare or bold."""
    return any(table.rows[column].map(lambda v: isinstance(v, str)).any() for column in table.columns)


def render_descriptive(table: Table) -> dict[str, str]:
    """``{"csv", "md", "tex"}`` of a text table: its keys and columns as written, labels applied."""
    names = [*table.keys, *table.columns]
    rows = [[_label(table, str(row[name])) for name in names] for _, row in table.rows.iterrows()]
    header = [_label(table, name) for name in names]
    md = [f"## {table.table_id}: {table.title}", "", _md_row(header), "|" + "---|" * len(header)]
    md += [_md_row(row) for row in rows]
    tex = [f"% {table.table_id}: {table.title}", r"\begin{tabular}{" + "l" * len(names) + "}", r"\toprule"]
    tex += [" & ".join(_tex_text(text) for text in header) + r" \\", r"\midrule"]
    tex += [" & ".join(_tex_text(text) for text in row) + r" \\" for row in rows]
    tex += [r"\bottomrule", r"\end{tabular}"]
    return {
        "csv": table.rows[names].to_csv(index=False),
        "md": "\n".join(md + [""] + [f"- {note}" for note in table.notes]) + "\n",
        "tex": "\n".join(tex) + "\n",
    }


def render(table: Table, reference: pd.DataFrame | None, scale: str) -> dict[str, str]:
    """``{"csv", "md", "tex"}`` texts of ``table`` (with the paper's values where ``reference`` is given)."""
    if _is_descriptive(table):
        return render_descriptive(table)
    comparison = _comparison(table, reference)
    return {
        "csv": render_csv(comparison),
        "md": render_md(table, comparison, scale, with_paper=reference is not None),
        "tex": render_tex(table, scale),
    }
