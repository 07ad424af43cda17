"""Performance tables from synthetic evaluation summaries, checked cell by cell against numpy.

A results tree holds a summary.json (the evaluation contract) with known random
repeat scores for every evaluation the tables' closures name, and a
metrics.json for Table 12's probes. Expected values are recomputed here from
the repeat scores alone: avg@5, the F.4 suites with their ID/OOD split, and
mean / sample sd across seeds or repeats as each caption states (F.5).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, load_config
from tests.report_files import anywhere, report_in_sandbox
from workflow_scripts.atomic import write_json
from workflow_scripts.layout import metrics_path, summary_path
from workflow_scripts.registry import BASE, Evaluation, closure
from workflow_scripts.report.frames import aggregate_frame, performance_frame, repeat_frame
from workflow_scripts.report.performance_tables import TABLES
from workflow_scripts.report.reference import compare, load_reference
from workflow_scripts.report.render import render
from workflow_scripts.report.routing_frames import RETENTION_KEYS
from workflow_scripts.report.table import ReportInputs

CONFIG = load_config(toy=False)
NINE = ["gsm8k", "math500", "livebench_math", "humaneval", "mbpp", "livebench_coding"]
NINE += ["mmlu_pro", "gpqa_diamond", "livebench_reasoning"]
TWELVE = [*NINE, "mmlu", "mmlu_stem", "gpqa"]
IN_DOMAIN = {
    "math20k": ["gsm8k", "math500", "livebench_math"],
    "openr1math": ["gsm8k", "math500", "livebench_math"],
    "coding20k": ["humaneval", "mbpp", "livebench_coding"],
}
REPEATS = 5


def _summary(evaluation: Evaluation, repeats: dict[str, np.ndarray]) -> dict:
    return {
        "model": evaluation.model,
        "corpus": evaluation.corpus,
        "condition": evaluation.condition,
        "seed": evaluation.seed,
        "repeats": REPEATS,
        "benchmarks": {
            name: {
                "score": float(scores.mean()),
                "repeat_scores": scores.tolist(),
                "repeat_sd": float(scores.std(ddof=1)),
                "items": 100,
            }
            for name, scores in repeats.items()
        },
    }


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """(results root, repeat scores per evaluation, NMI per trained probe) for every table's closure."""
    results = tmp_path_factory.mktemp("results")
    rng = np.random.default_rng(7)
    repeats: dict[Evaluation, dict[str, np.ndarray]] = {}
    nmi: dict[tuple, float] = {}
    for table_id in TABLES:
        table_closure = closure(CONFIG, table_id)
        for evaluation in sorted(table_closure.evaluations, key=str):
            if evaluation not in repeats:
                repeats[evaluation] = {name: rng.uniform(0, 100, REPEATS).round(4) for name in TWELVE}
                write_json(summary_path(results, evaluation), _summary(evaluation, repeats[evaluation]))
        for probe in sorted(table_closure.probes, key=str):
            if probe.condition == BASE:
                continue
            summary = {key: float(rng.uniform(0.3, 0.7)) for key in RETENTION_KEYS.values()}
            nmi[(probe.model, probe.corpus, probe.condition, probe.seed)] = summary[RETENTION_KEYS["nmi"]]
            write_json(metrics_path(results, probe), {"summary": summary, "null_model": {}, "sweep": []})
    return results, repeats, nmi


def _build(tree, table_id):
    return TABLES[table_id](ReportInputs.at(CONFIG, table_id, tree[0]))


# ---------------------------------------------------------------- independent expectations


def _avg(repeats: dict[str, np.ndarray], names) -> float:
    return float(np.mean([repeats[name].mean() for name in names]))


def _scores(repeats: dict[str, np.ndarray], corpus: str | None, suite: list[str]) -> dict[str, float]:
    """Suite mean, ID and OOD of one run, straight from its repeat scores."""
    result = {"mean": _avg(repeats, suite)}
    if corpus is not None:
        ids = IN_DOMAIN[corpus]
        result["id"] = _avg(repeats, ids)
        result["ood"] = _avg(repeats, [name for name in suite if name not in ids])
    return result


def _runs(tree, model, corpus, condition) -> list[dict[str, np.ndarray]]:
    found = [
        values
        for evaluation, values in tree[1].items()
        if (evaluation.model, evaluation.corpus, evaluation.condition) == (model, corpus, condition)
    ]
    assert found, (model, corpus, condition)
    return found


def _seed_stats(values: list[float]) -> tuple[float, float, int]:
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return float(np.mean(values)), sd, len(values)


def _row(table, **keys) -> pd.Series:
    match = np.ones(len(table.rows), dtype=bool)
    for key, value in keys.items():
        column = table.rows[key]
        match &= column.isna().to_numpy() if value is None else (column == value).to_numpy()
    assert match.sum() == 1, keys
    return table.rows[match].iloc[0]


def _assert_cell(row: pd.Series, column: str, mean: float, sd: float, n: int) -> None:
    assert row[column] == pytest.approx(mean, abs=1e-9), column
    if math.isnan(sd):
        assert math.isnan(row[f"{column}_sd"]), column
    else:
        assert row[f"{column}_sd"] == pytest.approx(sd, abs=1e-9), column
    assert row[f"{column}_n"] == n, column


# ---------------------------------------------------------------- every table against the paper's layout

EXPECTED_SHAPE = {
    "table2": (("corpus", "condition"), ("id", "ood"), 6),
    "table3": (("corpus", "condition"), ("overall9",), 12),
    "table4": (("model", "corpus", "condition"), ("overall9",), 11),
    "table7": (("corpus", "condition"), ("overall9",), 6),
    "table8": (("corpus", "model"), ("avg12",), 4),
    "table12": (("corpus", "condition"), ("id", "ood", "avg12", "nmi"), 10),
    "table14": (("corpus", "condition"), ("id", "ood", "id_ood_mean", "delta_rpb"), 8),
    "table16": (("corpus", "condition"), (*TWELVE, "avg12"), 7),
    "table17": (("corpus", "condition"), (*NINE, "overall9"), 7),
    "table18": (("corpus", "condition"), (*NINE, "overall9"), 8),
    "table19": (("corpus", "condition"), (*NINE, "overall9"), 8),
}


def test_every_performance_table_is_registered():
    assert set(TABLES) == set(EXPECTED_SHAPE)


@pytest.mark.parametrize("table_id", sorted(EXPECTED_SHAPE))
def test_table_has_the_papers_rows_and_columns(tree, table_id):
    """Same keys, columns and rows as the transcribed paper table: every published cell is matched."""
    keys, columns, count = EXPECTED_SHAPE[table_id]
    table = _build(tree, table_id)
    assert table.keys == keys and set(table.columns) == set(columns) and len(table.rows) == count
    assert not table.rows.duplicated(list(keys)).any()
    comparison = compare(table, load_reference(ROOT / "reference" / f"{table_id}.csv"))
    missing = comparison[comparison["status"] == "missing"]
    if table_id == "table12":  # the base partition against itself is not measured
        assert set(zip(missing.condition, missing.column, strict=True)) == {(BASE, "nmi")}
    else:
        assert missing.empty, missing
    unpublished = comparison[comparison["status"] == "unpublished"]
    if table_id == "table14":  # the paper prints "reference" for RPB's own difference
        assert set(zip(unpublished.condition, unpublished.column, strict=True)) == {("rpb", "delta_rpb")}
    else:
        assert unpublished.empty, unpublished


def test_row_order_follows_the_paper(tree):
    table3 = _build(tree, "table3")
    conditions = ["rpb", "router_l2", "kl_base", "logit_l2", "sft", "lbl"]
    assert list(table3.rows.condition) == conditions * 2
    assert list(table3.rows.corpus) == ["math20k"] * 6 + ["coding20k"] * 6
    table4 = _build(tree, "table4")
    assert list(table4.rows.model) == ["qwen3_30b"] * 8 + ["moonlight"] * 3
    assert list(_build(tree, "table14").rows.condition[:4]) == [
        "rpb",
        "rpb_hard",
        "within_hard",
        "global_hard",
    ]
    assert list(_build(tree, "table16").rows.condition) == [BASE] + ["sft", "lbl", "rpb"] * 2
    assert list(_build(tree, "table8").rows.model) == ["moonlight", "deepseek_v2_lite"] * 2


# ---------------------------------------------------------------- values against numpy


@pytest.mark.parametrize(
    ("table_id", "model", "conditions", "columns"),
    [
        ("table2", "moonlight", ["sft", "lbl", "rpb"], ["id", "ood"]),
        ("table3", "moonlight", ["rpb", "router_l2", "kl_base", "logit_l2", "sft", "lbl"], ["mean"]),
        ("table7", "moonlight", ["router_l2_1e2", "router_l2_1e3", "router_l2"], ["mean"]),
    ],
)
def test_overall9_tables_are_seed_means_and_sds(tree, table_id, model, conditions, columns):
    table = _build(tree, table_id)
    for corpus in ("math20k", "coding20k"):
        for condition in conditions:
            seeds = [_scores(run, corpus, NINE) for run in _runs(tree, model, corpus, condition)]
            row = _row(table, corpus=corpus, condition=condition)
            for column in columns:
                name = "overall9" if column == "mean" else column
                _assert_cell(row, name, *_seed_stats([seed[column] for seed in seeds]))
    if table_id == "table7":
        assert _row(table, corpus="math20k", condition="router_l2_1e2")["overall9_n"] == 1
        assert _row(table, corpus="math20k", condition="router_l2")["overall9_n"] == 3


def test_table4_both_models(tree):
    table = _build(tree, "table4")
    cells = [
        ("qwen3_30b", c, k) for c in ("math20k", "coding20k") for k in ("rpb", "router_l2", "sft", "lbl")
    ]
    cells += [("moonlight", "openr1math", k) for k in ("rpb", "sft", "lbl")]
    for model, corpus, condition in cells:
        seeds = [_scores(run, corpus, NINE)["mean"] for run in _runs(tree, model, corpus, condition)]
        _assert_cell(
            _row(table, model=model, corpus=corpus, condition=condition), "overall9", *_seed_stats(seeds)
        )


def test_table8_is_the_twelve_benchmark_mean(tree):
    table = _build(tree, "table8")
    for model in ("moonlight", "deepseek_v2_lite"):
        for corpus in ("math20k", "coding20k"):
            (run,) = _runs(tree, model, corpus, "zloss")
            _assert_cell(_row(table, model=model, corpus=corpus), "avg12", _avg(run, TWELVE), math.nan, 1)


def test_table12_twelve_benchmark_split_with_base_rows_and_nmi(tree):
    table = _build(tree, "table12")
    (base,) = _runs(tree, "deepseek_v2_lite", None, BASE)
    for corpus in ("math20k", "coding20k"):
        expected = _scores(base, corpus, TWELVE)
        row = _row(table, corpus=corpus, condition=BASE)
        _assert_cell(row, "id", expected["id"], math.nan, 0)
        _assert_cell(row, "ood", expected["ood"], math.nan, 0)
        _assert_cell(row, "avg12", expected["mean"], math.nan, 0)
        assert math.isnan(row["nmi"]) and row["nmi_n"] == 0
        for condition in ("sft", "lbl", "rpb", "rpb_hard"):
            (run,) = _runs(tree, "deepseek_v2_lite", corpus, condition)
            expected = _scores(run, corpus, TWELVE)
            row = _row(table, corpus=corpus, condition=condition)
            for column, key in (("id", "id"), ("ood", "ood"), ("avg12", "mean")):
                _assert_cell(row, column, expected[key], math.nan, 1)
            _assert_cell(row, "nmi", tree[2][("deepseek_v2_lite", corpus, condition, 42)], math.nan, 1)
    # ID differs by block for the same base run; the twelve-benchmark mean does not.
    math_base, code_base = (_row(table, corpus=c, condition=BASE) for c in ("math20k", "coding20k"))
    assert math_base["id"] != code_base["id"] and math_base["avg12"] == code_base["avg12"]


def test_table14_hardness_decomposition(tree):
    table = _build(tree, "table14")
    for corpus in ("math20k", "coding20k"):
        means = {}
        for condition in ("rpb", "rpb_hard", "within_hard", "global_hard"):
            seeds = [_scores(run, corpus, NINE) for run in _runs(tree, "moonlight", corpus, condition)]
            row = _row(table, corpus=corpus, condition=condition)
            for column in ("id", "ood"):
                _assert_cell(row, column, *_seed_stats([seed[column] for seed in seeds]))
            halves = [(seed["id"] + seed["ood"]) / 2 for seed in seeds]
            _assert_cell(row, "id_ood_mean", *_seed_stats(halves))
            means[condition] = np.mean(halves)
        assert _row(table, corpus=corpus, condition="rpb_hard")["id_ood_mean_n"] == 1
        assert math.isnan(_row(table, corpus=corpus, condition="rpb")["delta_rpb"])
        for condition in ("rpb_hard", "within_hard", "global_hard"):
            delta = _row(table, corpus=corpus, condition=condition)["delta_rpb"]
            assert delta == pytest.approx(means[condition] - means["rpb"], abs=1e-9)


def _repeat_suite_sd(run: dict[str, np.ndarray], suite: list[str]) -> float:
    per_repeat = np.mean([run[name] for name in suite], axis=0)  # (repeats,)
    return float(np.std(per_repeat, ddof=1))


def test_table16_seed_spread_and_base_repeat_spread(tree):
    table = _build(tree, "table16")
    (base,) = _runs(tree, "moonlight", None, BASE)
    row = _row(table, corpus=None, condition=BASE)
    for name in TWELVE:
        _assert_cell(row, name, base[name].mean(), base[name].std(ddof=1), 0)
    _assert_cell(row, "avg12", _avg(base, TWELVE), _repeat_suite_sd(base, TWELVE), 0)
    for corpus in ("math20k", "coding20k"):
        for condition in ("sft", "lbl", "rpb"):
            runs = _runs(tree, "moonlight", corpus, condition)
            row = _row(table, corpus=corpus, condition=condition)
            for name in TWELVE:
                _assert_cell(row, name, *_seed_stats([run[name].mean() for run in runs]))
            _assert_cell(row, "avg12", *_seed_stats([_avg(run, TWELVE) for run in runs]))
    assert table.bold == dict.fromkeys(table.columns, "max") and table.block == "corpus"


def test_table18_seed_spread(tree):
    table = _build(tree, "table18")
    for corpus in ("math20k", "coding20k"):
        for condition in ("rpb", "within_soft", "within_hard", "global_hard"):
            runs = _runs(tree, "moonlight", corpus, condition)
            assert len(runs) == 3
            row = _row(table, corpus=corpus, condition=condition)
            for name in NINE:
                _assert_cell(row, name, *_seed_stats([run[name].mean() for run in runs]))
            _assert_cell(row, "overall9", *_seed_stats([_avg(run, NINE) for run in runs]))


@pytest.mark.parametrize(
    ("table_id", "conditions"),
    [
        ("table17", [BASE, "sft", "lbl", "rpb"]),
        ("table19", ["rpb", "within_soft", "within_hard", "global_hard"]),
    ],
)
def test_single_seed_tables_spread_over_repeats(tree, table_id, conditions):
    table = _build(tree, table_id)
    for corpus in ("math20k", "coding20k"):
        for condition in conditions:
            (run,) = _runs(tree, "deepseek_v2_lite", None if condition == BASE else corpus, condition)
            row = _row(table, corpus=None if condition == BASE else corpus, condition=condition)
            n = 0 if condition == BASE else 1
            for name in NINE:
                _assert_cell(row, name, run[name].mean(), run[name].std(ddof=1), n)
            _assert_cell(row, "overall9", _avg(run, NINE), _repeat_suite_sd(run, NINE), n)
    if table_id == "table19":
        assert any("coding20k within_soft: s43" in note for note in table.notes)
        assert not table.bold
    else:  # Table 17 bolds the best per benchmark column, not the Avg
        assert table.bold == dict.fromkeys(table.columns[:-1], "max") and table.columns[-1] == "overall9"


# ---------------------------------------------------------------- frames and their errors


def test_frames_read_the_contract(tree):
    results, repeats, _ = tree
    evaluation = Evaluation("moonlight", "math20k", "rpb", 42)
    frame = performance_frame(anywhere(results), [evaluation])
    assert list(frame.columns) == ["model", "corpus", "condition", "seed", "benchmark", "score", "repeat_sd"]
    assert len(frame) == 12
    gsm = frame[frame.benchmark == "gsm8k"].iloc[0]
    assert gsm.score == pytest.approx(repeats[evaluation]["gsm8k"].mean())
    per_repeat = repeat_frame(anywhere(results), [evaluation])
    assert len(per_repeat) == 12 * REPEATS
    by_repeat = aggregate_frame(per_repeat, CONFIG, "overall9")
    assert len(by_repeat) == REPEATS
    aggregates = aggregate_frame(frame, CONFIG, "overall9")
    assert aggregates.loc[0, "overall9"] == pytest.approx(by_repeat["overall9"].mean())
    base = aggregate_frame(
        performance_frame(anywhere(results), [Evaluation("moonlight", None, BASE, None)]), CONFIG, "all12"
    )
    assert base.loc[0, "corpus"] is None and math.isnan(base.loc[0, "id"])


def _write(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


def _good(evaluation: Evaluation) -> dict:
    return _summary(evaluation, {name: np.arange(REPEATS, dtype=float) for name in TWELVE})


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda s: s.pop("benchmarks"), "missing key 'benchmarks'"),
        (lambda s: s.update(model="qwen3_30b"), "key 'model' is 'qwen3_30b'"),
        (lambda s: s.update(seed=43), "key 'seed' is 43"),
        (lambda s: s["benchmarks"]["mbpp"].pop("score"), "benchmarks.mbpp: missing key 'score'"),
        (lambda s: s["benchmarks"]["mbpp"].update(score="high"), "benchmarks.mbpp.score"),
        (lambda s: s["benchmarks"]["gsm8k"].update(repeat_scores=[1.0]), "gsm8k.repeat_scores"),
        (lambda s: s.update(repeats=0), "'repeats'"),
    ],
)
def test_malformed_summary_names_path_and_key(tmp_path, damage, message):
    evaluation = Evaluation("moonlight", "math20k", "rpb", 42)
    summary = _good(evaluation)
    damage(summary)
    _write(summary_path(tmp_path, evaluation), summary)
    with pytest.raises(ValueError, match=message) as error:
        performance_frame(anywhere(tmp_path), [evaluation])
    assert str(summary_path(tmp_path, evaluation)) in str(error.value)


def test_missing_and_unparsable_summaries(tmp_path):
    evaluation = Evaluation("moonlight", None, BASE, None)
    with pytest.raises(FileNotFoundError, match="evals/moonlight/base/summary.json"):
        performance_frame(anywhere(tmp_path), [evaluation])
    summary_path(tmp_path, evaluation).parent.mkdir(parents=True)
    summary_path(tmp_path, evaluation).write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        performance_frame(anywhere(tmp_path), [evaluation])


def test_a_table_names_the_benchmark_a_run_lacks(tmp_path):
    for evaluation in closure(CONFIG, "table18").evaluations:
        summary = _good(evaluation)
        if evaluation.condition == "within_hard":
            del summary["benchmarks"]["livebench_math"]
        _write(summary_path(tmp_path, evaluation), summary)
    with pytest.raises(ValueError, match="livebench_math"):
        TABLES["table18"](ReportInputs.at(CONFIG, "table18", tmp_path))


def test_a_condition_named_in_a_tables_cells_is_a_row_with_no_paper_value(tree):
    """Config alone adds a row: Router-L2 in Table 2's cells is laid out after the paper's rows,
    computed like them, and rendered with no published value beside it."""
    config = json.loads(json.dumps(CONFIG))
    config["tables"]["table2"]["cells"][0]["conditions"].append("router_l2")
    table = TABLES["table2"](ReportInputs.at(config, "table2", tree[0]))
    assert list(table.rows.condition) == ["sft", "lbl", "rpb", "router_l2"] * 2
    for corpus in ("math20k", "coding20k"):
        seeds = [_scores(run, corpus, NINE) for run in _runs(tree, "moonlight", corpus, "router_l2")]
        row = _row(table, corpus=corpus, condition="router_l2")
        for column in ("id", "ood"):
            _assert_cell(row, column, *_seed_stats([seed[column] for seed in seeds]))
    comparison = compare(table, load_reference(ROOT / "reference" / "table2.csv"))
    assert set(comparison[comparison.condition == "router_l2"].status) == {"unpublished"}
    assert set(comparison[comparison.condition != "router_l2"].status) == {"matched"}
    markdown = render(table, load_reference(ROOT / "reference" / "table2.csv"), CONFIG["scale"])["md"]
    assert "Router-L2" in markdown


def test_table8_refuses_a_second_condition_naming_both(tree):
    config = json.loads(json.dumps(CONFIG))
    config["tables"]["table8"]["cells"][0]["conditions"].append("sft")
    with pytest.raises(ValueError, match=r"table8: .*\['zloss', 'sft'\]"):
        TABLES["table8"](ReportInputs.at(config, "table8", tree[0]))


@pytest.mark.slow
@pytest.mark.parametrize("table_id", sorted(TABLES))
def test_table_builds_from_its_declared_inputs_alone(tree, table_id, tmp_path):
    csv = report_in_sandbox(CONFIG, table_id, tree[0], tmp_path)
    assert csv.read_text() == render(_build(tree, table_id), None, CONFIG["scale"])["csv"]
