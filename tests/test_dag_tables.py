"""Each table's closure at paper scale, checked on dry runs against what its caption states."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.conftest import load_config
from tests.dag import PAPER, dry_run, printed_job

pytestmark = pytest.mark.slow  # a Snakemake dry run per table

MOONLIGHT_SPLITS = ("math20k", "coding20k")


def _units(jobs, rule: str) -> set[tuple]:
    """(model, corpus, condition, seed) of every job of ``rule``; ``evaluated`` and ``run`` wildcards
    are unpacked."""
    units = set()
    for name, w in jobs:
        if name != rule:
            continue
        if rule == "train_megatron":
            units.add((w["model"], w["corpus"], w["condition"], int(w["seed"])))
        elif rule == "retention":  # run: {condition}/s{seed}
            condition, seed = w["run"].split("/s")
            units.add((w["model"], w["corpus"], condition, int(seed)))
        elif w["evaluated"] == "base":
            units.add((w["model"], None, "base", None))
        else:
            corpus, condition, seed = w["evaluated"].split("/")
            units.add((w["model"], corpus, condition, int(seed[1:])))
    return units


def _grid(model, corpora, conditions, seeds) -> set[tuple]:
    return {(model, c, k, s) for c in corpora for k in conditions for s in seeds}


@pytest.fixture(scope="module")
def closures() -> dict[str, list]:
    tables = ("table2", "table5", "table12", "table16", "table19")
    return {table: dry_run(PAPER, f"results/tables/{table}.md") for table in tables}


def test_table2_is_two_splits_by_three_methods_by_three_seeds_of_moonlight(closures):
    jobs = closures["table2"]
    expected = _grid("moonlight", MOONLIGHT_SPLITS, ("sft", "lbl", "rpb"), (42, 43, 44))
    assert len(expected) == 18
    assert _units(jobs, "train_megatron") == expected
    assert _units(jobs, "score") == expected
    assert not _units(jobs, "retention"), "Table 2 reports no routing metric"


def test_table5_probes_rpb_on_three_seeds_and_the_shuffles_on_two(closures):
    jobs = closures["table5"]
    shuffles = ("within_soft", "within_hard", "global_hard")
    trained = _grid("moonlight", MOONLIGHT_SPLITS, ("rpb", *shuffles), (42, 43, 44))
    assert _units(jobs, "train_megatron") == trained
    assert _units(jobs, "score") == trained
    probed = _grid("moonlight", MOONLIGHT_SPLITS, ("rpb",), (42, 43, 44))
    probed |= _grid("moonlight", MOONLIGHT_SPLITS, shuffles, (42, 43))
    assert _units(jobs, "retention") == probed


def test_table12_is_deepseek_v2_lite_at_one_seed_with_its_base(closures):
    jobs = closures["table12"]
    cells = _grid("deepseek_v2_lite", MOONLIGHT_SPLITS, ("sft", "lbl", "rpb", "rpb_hard"), (42,))
    assert _units(jobs, "train_megatron") == cells
    assert _units(jobs, "retention") == cells
    assert _units(jobs, "score") == cells | {("deepseek_v2_lite", None, "base", None)}


def test_table16_adds_the_base_row_to_the_main_interventions(closures):
    jobs = closures["table16"]
    cells = _grid("moonlight", MOONLIGHT_SPLITS, ("sft", "lbl", "rpb"), (42, 43, 44))
    assert _units(jobs, "score") == cells | {("moonlight", None, "base", None)}
    assert {w["benchmark"] for r, w in jobs if r == "benchmark_items"} == {
        "gsm8k", "math500", "livebench_math", "humaneval", "mbpp", "livebench_coding",
        "mmlu", "mmlu_stem", "mmlu_pro", "gpqa", "gpqa_diamond", "livebench_reasoning",
    }  # fmt: skip


def test_table19_coding_within_soft_is_seed_43(closures):
    jobs = closures["table19"]
    conditions = ("rpb", "within_soft", "within_hard", "global_hard")
    expected = _grid("deepseek_v2_lite", ("math20k",), conditions, (42,))
    expected |= _grid("deepseek_v2_lite", ("coding20k",), ("rpb", "within_hard", "global_hard"), (42,))
    expected |= {("deepseek_v2_lite", "coding20k", "within_soft", 43)}
    assert _units(jobs, "train_megatron") == expected
    assert _units(jobs, "score") == expected


@pytest.mark.parametrize(
    "table", [*(f"table{n}" for n in range(1, 20)), "appendix_d2", "claims", "diagnostic_prior_topk"]
)
def test_every_table_target_pulls_exactly_its_registry_closure(paper_config, table):
    """The jobs behind ``results/tables/<table>.md`` are the registry's cells for it, no more, no less."""
    from workflow_scripts.registry import BASE, closure

    jobs = dry_run(PAPER, f"results/tables/{table}.md")
    units = closure(paper_config, table)
    assert _units(jobs, "train_megatron") == {
        (t.model, t.corpus, t.condition, t.seed) for t in units.trainings
    }
    assert _units(jobs, "score") == {(e.model, e.corpus, e.condition, e.seed) for e in units.evaluations}
    trained_probes = {(p.model, p.corpus, p.condition, p.seed) for p in units.probes if p.condition != BASE}
    assert _units(jobs, "retention") == trained_probes
    base_probes = {(p.model, p.corpus) for p in units.probes if p.condition == BASE}
    assert {(w["model"], w["corpus"]) for r, w in jobs if r == "base_partition"} == base_probes


def test_report_jobs_get_exact_files_never_a_folder():
    """Report jobs list the result files they read as ``--inputs``: files, never a checkpoint folder."""
    _, figure = printed_job("results/figures/figure1.csv", "figure_data")
    assert "/routes.npz" in figure and "/layers.parquet" in figure and "results/checkpoints/" not in figure
    _, table = printed_job("results/tables/table2.md", "table")
    assert "/summary.json" in table and "results/checkpoints/" not in table and "routes.npz" not in table


def test_a_table_job_gets_only_the_registry_slice_it_reads():
    """Table 6's params: its own entry and the ids its cells name, so other keys do not rerun it."""
    _, command = printed_job("results/tables/table6.csv", "table")
    words = shlex.split(command.removeprefix("Shell command: "))
    sliced = json.loads(words[words.index("--config") + 1])
    assert set(sliced) == {
        "scale",
        "models",
        "corpora",
        "conditions",
        "benchmarks",
        "evaluation",
        "probe",
        "tables",
        "figures",
    }
    cells = load_config(toy=False)["tables"]["table6"]["cells"]
    assert set(sliced["conditions"]) == {c for cell in cells for c in cell["conditions"]}
    assert set(sliced["models"]) == {"moonlight"} and set(sliced["corpora"]) == {"math20k", "coding20k"}
    assert set(sliced["tables"]) == {"table6"} and sliced["figures"] == {}
    assert sliced["evaluation"] == {"repeats": 5}
    assert all(set(spec) == {"name", "family", "overall9"} for spec in sliced["benchmarks"].values())
