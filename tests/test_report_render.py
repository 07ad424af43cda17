"""Rendering of a reproduced table (csv / md / tex) and its comparison with the paper's reference values."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.dag import ROOT
from workflow_scripts.report.reference import compare, load_reference, load_reference_notes, table_cells
from workflow_scripts.report.render import TOY_HEADER, render
from workflow_scripts.report.table import Table

NAN = math.nan


def _table(**overrides) -> Table:
    """Two corpus blocks; one single-seed cell among three-seed cells; an NMI column with 3 digits."""
    rows = pd.DataFrame(
        {
            "corpus": ["math20k", "math20k", "coding20k", "coding20k"],
            "condition": ["sft", "rpb", "sft", "rpb"],
            "overall9": [20.25, 28.2733, 33.3333, 39.5912],
            "overall9_sd": [0.29, 0.16, 0.77, NAN],
            "overall9_n": [3, 3, 3, 1],
            "nmi": [0.5751, 0.6312, 0.5880, 0.6290],
            "nmi_sd": [0.004, 0.003, 0.001, 0.001],
            "nmi_n": [3, 3, 3, 3],
        }
    )
    spec = dict(
        table_id="tableX",
        title="A small table",
        keys=("corpus", "condition"),
        columns=("overall9", "nmi"),
        rows=rows,
        labels={
            "corpus": "Dataset",
            "condition": "Method",
            "sft": "SFT",
            "rpb": "RPB",
            "overall9": "Overall@9",
        },
        bold={"overall9": "max", "nmi": "max"},
        block="corpus",
        notes=("Three training seeds.",),
        digits={"nmi": 3},
    )
    return Table(**{**spec, **overrides})


def _reference(tmp_path: Path, text: str | None = None) -> pd.DataFrame:
    path = tmp_path / "tableX.csv"
    path.write_text(
        text
        or (
            "corpus,condition,column,value,sd\n"
            "math20k,sft,overall9,20.25,0.29\n"
            "math20k,rpb,overall9,28.27,0.16\n"
            "math20k,rpb,nmi,0.631,\n"
            "coding20k,lbl,overall9,33.95,0.22\n"
        )
    )
    return load_reference(path)


def _md_table(md: str) -> pd.DataFrame:
    """The Markdown table parsed back with pandas (cells as text)."""
    lines = [line for line in md.splitlines() if line.startswith("|") and not line.startswith("|---")]
    frame = pd.read_csv(io.StringIO("\n".join(lines)), sep="|", dtype=str, skipinitialspace=True)
    frame = frame.drop(columns=[c for c in frame.columns if c.startswith("Unnamed")])
    frame.columns = [c.strip() for c in frame.columns]
    return frame.map(lambda text: text.strip() if isinstance(text, str) else "")


def test_csv_has_every_cell_beside_the_paper(tmp_path):
    texts = render(_table(), _reference(tmp_path), "paper")
    frame = pd.read_csv(io.StringIO(texts["csv"]))
    assert list(frame.columns) == [
        "corpus",
        "condition",
        "column",
        "value",
        "sd",
        "n",
        "paper",
        "paper_sd",
        "delta",
        "status",
    ]
    assert len(frame) == 4 * 2 + 1  # every reproduced cell, plus the paper-only LBL cell
    cell = (frame.corpus == "math20k") & (frame.condition == "rpb") & (frame.column == "overall9")
    rpb = frame[cell].iloc[0]
    assert rpb.value == pytest.approx(28.2733) and rpb.paper == pytest.approx(28.27)
    assert rpb.delta == pytest.approx(28.2733 - 28.27, abs=1e-6) and rpb.status == "matched"
    lbl = frame.iloc[-1]
    assert (lbl.corpus, lbl.condition, lbl.status) == ("coding20k", "lbl", "missing")
    assert math.isnan(lbl.value) and lbl.paper == pytest.approx(33.95)
    unpublished = frame[(frame.corpus == "coding20k") & (frame.condition == "rpb")]
    assert set(unpublished.status) == {"unpublished"}


def test_csv_without_reference_lists_the_table(tmp_path):
    frame = pd.read_csv(io.StringIO(render(_table(), None, "paper")["csv"]))
    assert len(frame) == 8 and set(frame.status) == {"unpublished"}
    np.testing.assert_allclose(frame.value, table_cells(_table())["value"], atol=1e-6)


def test_md_shows_mean_sd_marks_bold_paper_and_delta(tmp_path):
    md = render(_table(), _reference(tmp_path), "paper")["md"]
    assert TOY_HEADER not in md
    frame = _md_table(md)
    assert list(frame.columns[:4]) == ["Dataset", "Method", "Overall@9", "Overall@9: paper (Δ)"]
    by_row = {(row.Dataset, row.Method): row for row in frame.itertuples(index=False)}
    # Best Overall@9 per corpus block in bold; the single-seed coding20k RPB value carries a dagger.
    assert by_row[("math20k", "RPB")][2] == "**28.27** ± 0.16"
    assert by_row[("math20k", "SFT")][2] == "20.25 ± 0.29"
    assert by_row[("coding20k", "RPB")][2] == "**39.59**†"
    assert by_row[("math20k", "RPB")][3] == "28.27 ± 0.16 (Δ +0.00)"
    assert by_row[("math20k", "RPB")][5] == "0.631 (Δ +0.000)"
    assert by_row[("math20k", "RPB")][4] == "**0.631** ± 0.003"
    # The paper-only row is shown with no reproduced value.
    assert by_row[("coding20k", "lbl")][2] == "—"
    assert by_row[("coding20k", "lbl")][3] == "33.95 ± 0.22"
    assert "† single training seed" in md and "Three training seeds." in md
    assert "1 published value(s) have no reproduced counterpart" in md


def test_md_at_toy_scale_says_deltas_are_no_verdict(tmp_path):
    md = render(_table(), _reference(tmp_path), "toy")["md"]
    assert md.splitlines()[2] == f"> {TOY_HEADER}"
    assert "not a reproduction verdict" in md


def test_a_table_of_single_seeds_marks_every_cell(tmp_path):
    """At toy scale every cell is one seed: each still carries its dagger, and the note says so."""
    rows = _table().rows.assign(overall9_sd=NAN, overall9_n=1, nmi_sd=NAN, nmi_n=[1, 1, 1, 0])
    single = _table(rows=rows)
    md = render(single, None, "toy")["md"]
    frame = _md_table(md)
    assert list(frame["Overall@9"]) == ["20.25†", "**28.27**†", "33.33†", "**39.59**†"]
    assert frame["nmi"].iloc[3] == "**0.629**‡"  # the best of its block, with no training seed
    assert "† single training seed: every trained value of this table, so none has an sd." in md
    assert "‡ no training seed" in md
    tex = render(single, None, "toy")["tex"]
    assert r"$20.25^{\dagger}$" in tex and "every trained value of this table" in tex
    # Beside three-seed cells only the single-seed one is marked, as before.
    assert render(_table(), None, "paper")["md"].count("†") == 2  # the cell and its note


def test_tex_is_paper_layout():
    tex = render(_table(), None, "paper")["tex"]
    lines = tex.splitlines()
    assert r"\begin{tabular}{llrr}" in lines and r"\toprule" in lines and r"\bottomrule" in lines
    assert "Dataset & Method & Overall@9 & nmi \\\\" in lines
    assert r"math20k & SFT & $20.25_{\pm 0.29}$ & $0.575_{\pm 0.004}$ \\" in lines
    assert r" & RPB & $\mathbf{28.27}_{\pm 0.16}$ & $\mathbf{0.631}_{\pm 0.003}$ \\" in lines
    assert r" & RPB & $\mathbf{39.59}^{\dagger}$ & $\mathbf{0.629}_{\pm 0.001}$ \\" in lines
    # A rule between the two corpus blocks, none inside a block.
    body = lines[lines.index(r"\midrule") + 1 : lines.index(r"\bottomrule")]
    assert body.count(r"\midrule") == 1 and body.index(r"\midrule") == 2
    assert r"\bottomrule" not in lines[-1] and lines[-1].startswith("% ")
    assert "% " + TOY_HEADER in render(_table(), None, "toy")["tex"]


def test_tex_escapes_labels_and_keeps_math():
    table = _table(labels={"sft": "SFT_1 & 50%", "overall9": "$\\lambda$"})
    tex = render(table, None, "paper")["tex"]
    assert r"SFT\_1 \& 50\%" in tex and "$\\lambda$" in tex


def test_bold_ties_at_displayed_precision_and_lone_rows():
    rows = _table().rows.copy()
    rows.loc[1, "overall9"] = 20.2549  # shows as 20.25, tying math20k SFT
    tex = render(_table(rows=rows), None, "paper")["tex"]
    assert r"$\mathbf{20.25}_{\pm 0.29}$" in tex and r"$\mathbf{20.25}_{\pm 0.16}$" in tex
    lone = _table(rows=rows.iloc[:1])  # a one-row block has no best
    assert r"\mathbf" not in render(lone, None, "paper")["tex"]


def test_min_bold_and_no_block():
    tex = render(_table(bold={"overall9": "min"}, block=None), None, "paper")["tex"]
    assert tex.count(r"\mathbf") == 1 and r"$\mathbf{20.25}_{\pm 0.29}$" in tex
    assert tex.count(r"\midrule") == 1


def test_unseeded_cells_get_their_own_mark():
    rows = _table().rows.copy()
    rows.loc[0, "overall9_n"] = 0
    texts = render(_table(rows=rows), None, "paper")
    assert r"$\mathbf{20.25}_{\pm 0.29}^{\ddagger}$" not in texts["tex"]  # not best: 28.27 is
    assert r"$20.25_{\pm 0.29}^{\ddagger}$" in texts["tex"]
    assert "‡ no training seed" in texts["md"]


def test_render_is_deterministic(tmp_path):
    reference = _reference(tmp_path)
    assert render(_table(), reference, "toy") == render(_table(), reference, "toy")


def test_compare_rejects_foreign_keys_and_columns(tmp_path):
    wrong_keys = _reference(tmp_path, "model,condition,column,value,sd\nmoonlight,sft,overall9,1.0,\n")
    with pytest.raises(ValueError, match="key columns"):
        compare(_table(), wrong_keys)
    wrong_column = _reference(tmp_path, "corpus,condition,column,value,sd\nmath20k,sft,ood,1.0,\n")
    with pytest.raises(ValueError, match="'ood'"):
        compare(_table(), wrong_column)


def test_compare_matches_numeric_and_empty_keys(tmp_path):
    rows = pd.DataFrame(
        {"rho": [0.1, 0.2], "corpus": [None, "math20k"], "nmi": [0.5, 0.6], "nmi_sd": NAN, "nmi_n": 1}
    )
    table = Table("tableY", "rho", ("rho", "corpus"), ("nmi",), rows)
    reference = _reference(tmp_path, "rho,corpus,column,value,sd\n0.10,,nmi,0.4,\n0.2,math20k,nmi,0.6,\n")
    result = compare(table, reference)
    assert list(result.status) == ["matched", "matched"]
    np.testing.assert_allclose(result.delta, [0.1, 0.0], atol=1e-12)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("corpus,condition,column,value\nmath20k,sft,id,1\n", "missing columns"),
        ("column,value,sd\nid,1,\n", "no key columns"),
        ("corpus,column,value,sd\nmath20k,id,abc,\n", "row 2 value: 'abc' is not a number"),
        ("corpus,column,value,sd\nmath20k,id,,\n", "row 2 value: empty"),
        ("corpus,column,value,sd\nmath20k,id,1,x\n", "row 2 sd"),
        ("corpus,column,value,sd\nmath20k,id,1,\nmath20k,id,2,\n", "more than once"),
    ],
)
def test_load_reference_names_file_and_row(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        load_reference(path)
    assert str(path) in str(error.value)


def test_load_reference_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.csv"):
        load_reference(tmp_path / "nothere.csv")


def _published(table_id: str, condition: str) -> dict[tuple[str, str], float]:
    frame = load_reference(ROOT / f"reference/{table_id}.csv")
    rows = frame[frame["condition"] == condition]
    return {(row.corpus, row.column): row.value for row in rows.itertuples()}


def test_the_rpb_hard_notes_state_the_papers_own_discrepancy():
    table6, table14 = _published("table6", "rpb_hard"), _published("table14", "rpb_hard")
    for corpus in ("math20k", "coding20k"):
        from_table14 = (3 * table14[corpus, "id"] + 6 * table14[corpus, "ood"]) / 9  # F.4: 3 ID / 6 OOD
        printed = table6[corpus, "overall9"]
        assert abs(from_table14 - printed) > 1.0
        for table_id in ("table6", "table14"):
            (note,) = load_reference_notes(ROOT / f"reference/{table_id}.notes.md")
            assert f"{from_table14:.2f}" in note and f"{printed:.2f}" in note, (table_id, corpus)


def test_reference_notes_name_the_file_and_line_of_a_bad_note(tmp_path):
    path = tmp_path / "table6.notes.md"
    path.write_text("- fine\n\nnot an item\n")
    with pytest.raises(ValueError, match=r"table6.notes.md line 3: a note is one line starting with '- '"):
        load_reference_notes(path)
