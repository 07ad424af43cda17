"""The claims table: verdict rules in both directions, fixture results that hold and fail, missing
cells, the paper's numbers as data, and the seeds the claims keep at toy scale."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, SCHEMA, load_config
from tests.dag import TOY, dry_run, printed_job
from tests.report_files import sandbox
from workflow_scripts import registry
from workflow_scripts.atomic import write_json
from workflow_scripts.cli import main as cli_main
from workflow_scripts.layout import metrics_path, summary_path
from workflow_scripts.registry import BASE, RegistryError, closure, validate_config
from workflow_scripts.report import claims
from workflow_scripts.report.claims import (
    CLAIMS,
    MISSING,
    NOT_REPRODUCED,
    REPRODUCED,
    Estimate,
    Rules,
    check_holds,
    claim_rows,
    claim_verdict,
    needed_cells,
    our_estimates,
    paper_estimates,
    standard_error,
)
from workflow_scripts.report.reference import load_reference
from workflow_scripts.report.routing_frames import RETENTION_KEYS
from workflow_scripts.report.table import ReportInputs

REFERENCE = ROOT / "reference" / "claims.csv"
RULES = Rules(nmi_points=0.02, accuracy_points=2.0, spread_factor=2.0)
SEEDS = (42, 43, 44)
SPREAD = {"nmi": 0.002, "overall9": 0.2, "id": 0.2, "ood": 0.2}


def _config(toy: bool) -> dict:
    """The shipped config as the Snakefile sees it: validated (defaults filled), then seeds capped."""
    config = load_config(toy=toy)
    validate_config(config, str(SCHEMA))
    registry.cap_seeds(config)
    return config


# ---------------------------------------------------------------- the verdict rules


@pytest.mark.parametrize(
    ("relation", "a", "b", "expected"),
    [
        ("above", 0.63, 0.58, True),
        ("above", 0.59, 0.58, False),  # 0.01 is inside the 0.02 tolerance
        ("above", 0.58, 0.63, False),
        ("below", 0.58, 0.63, True),
        ("below", 0.62, 0.63, False),
        ("below", 0.63, 0.58, False),
        ("close", 0.632, 0.631, True),
        ("close", 0.631, 0.650, True),  # exactly 0.019 apart
        ("close", 0.60, 0.631, False),
        ("close", 0.66, 0.631, False),
        ("at_least", 0.62, 0.631, True),  # within the tolerance below
        ("at_least", 0.70, 0.631, True),
        ("at_least", 0.60, 0.631, False),
    ],
)
def test_check_holds_in_both_directions(relation, a, b, expected):
    assert check_holds(relation, Estimate(a), Estimate(b), 0.02, 2.0) is expected


def test_an_ordering_inside_the_seed_noise_does_not_hold():
    clear_of_tolerance = (Estimate(0.65, 0.001, 3), Estimate(0.60, 0.001, 3))
    assert check_holds("above", *clear_of_tolerance, 0.02, 2.0) is True
    noisy = (Estimate(0.65, 0.05, 3), Estimate(0.60, 0.05, 3))  # SE 0.041: 2 SE = 0.082 > 0.05
    assert standard_error(*noisy) == pytest.approx(math.sqrt(2 * 0.05**2 / 3))
    assert check_holds("above", *noisy, 0.02, 2.0) is False
    assert check_holds("below", noisy[1], noisy[0], 0.02, 2.0) is False
    assert check_holds("above", *noisy, 0.02, 1.0) is True  # one SE (0.041) is cleared


def test_a_side_without_spread_adds_none():
    assert standard_error(Estimate(1.0, math.nan, 1), Estimate(2.0, 0.3, 3)) == pytest.approx(
        0.3 / math.sqrt(3)
    )
    assert standard_error(Estimate(1.0), Estimate(2.0)) == 0.0


def test_a_missing_side_is_neither_held_nor_failed():
    missing = Estimate(math.nan, math.nan, 0)
    for relation in ("above", "below", "close", "at_least"):
        assert check_holds(relation, missing, Estimate(0.5), 0.02, 2.0) is None
        assert check_holds(relation, Estimate(0.5), missing, 0.02, 2.0) is None
    with pytest.raises(ValueError, match="unknown relation"):
        check_holds("beyond", Estimate(0.5), Estimate(0.4), 0.02, 2.0)


@pytest.mark.parametrize(
    ("outcomes", "verdict"),
    [
        ([True, True], REPRODUCED),
        ([True, False], NOT_REPRODUCED),
        ([False, None], NOT_REPRODUCED),  # a failed check decides, whatever else is missing
        ([True, None], MISSING),
        ([None], MISSING),
    ],
)
def test_claim_verdict(outcomes, verdict):
    assert claim_verdict(outcomes) == verdict


def test_a_claim_needs_a_check():
    with pytest.raises(ValueError, match="at least one check"):
        claim_verdict([])


def test_rules_come_from_the_config_with_a_tolerance_per_metric(paper_config):
    rules = Rules.from_config(paper_config["claim_rules"])
    assert rules == RULES
    assert rules.tolerance("nmi") == 0.02
    assert {rules.tolerance(m) for m in ("overall9", "id", "ood")} == {2.0}
    with pytest.raises(ValueError, match="no tolerance"):
        rules.tolerance("tvd")


def test_a_misspelt_claim_rule_fails_naming_it(paper_config):
    paper_config["claim_rules"]["nmi_point"] = 0.02
    with pytest.raises(RegistryError, match=r"config key claim_rules.*nmi_point"):
        validate_config(paper_config, str(SCHEMA))


# ---------------------------------------------------------------- the paper's numbers, as data

PAPER_TABLES = {"table2", "table3", "table5", "table6", "table15"}


def test_every_paper_number_is_the_cell_of_its_paper_table():
    """reference/claims.csv repeats cells of reference/tableN.csv: the two must not drift apart."""
    reference = load_reference(REFERENCE)
    assert set(reference["table"]) == PAPER_TABLES
    for table_id, rows in reference.groupby("table"):
        source = load_reference(ROOT / "reference" / f"{table_id}.csv").set_index(
            ["corpus", "condition", "column"]
        )
        for _, row in rows.iterrows():
            cell = source.loc[(row["corpus"], row["condition"], row["column"])]
            assert cell["value"] == row["value"], (table_id, dict(row))
            assert cell["sd"] == row["sd"] or (math.isnan(cell["sd"]) and math.isnan(row["sd"])), dict(row)


def test_the_reference_holds_exactly_the_compared_quantities():
    paper = paper_estimates(load_reference(REFERENCE))
    expected = {(claim.claim_id, *key) for claim in CLAIMS for key in claim.keys()}
    assert set(paper) == expected


def test_the_paper_numbers_pass_every_claim_under_the_shipped_rules(paper_config):
    """The claims are the paper's and the tolerances are calibrated to it: its own numbers hold."""
    rules = Rules.from_config(paper_config["claim_rules"])
    paper = paper_estimates(load_reference(REFERENCE))
    rows = claim_rows(CLAIMS, {}, paper, rules)
    assert list(rows["paper_check"]) == ["holds"] * len(CLAIMS)
    assert list(rows["verdict"]) == [MISSING] * len(CLAIMS)  # no results of ours given
    assert rows["ours"].str.contains("missing").all()


def test_without_a_reference_the_paper_side_is_missing():
    rows = claim_rows(CLAIMS, {}, paper_estimates(None), RULES)
    assert set(rows["paper_check"]) == {MISSING}


# ---------------------------------------------------------------- fixture results in both directions


def _paper_means() -> dict[tuple[str, str, str, str], float]:
    """One value per (model, corpus, condition, metric): the paper's, first claim to print it wins."""
    means: dict[tuple[str, str, str, str], float] = {}
    for (_, *key), estimate in paper_estimates(load_reference(REFERENCE)).items():
        means.setdefault(tuple(key), estimate.mean)
    return means


def _seed_rows(means: dict[tuple[str, str, str, str], float]) -> pd.DataFrame:
    """Three seeds per quantity at mean -/0/+ its metric's spread: sample sd = that spread."""
    rows = [
        {
            "model": m,
            "corpus": c,
            "condition": k,
            "seed": seed,
            "metric": metric,
            "value": mean + step * SPREAD[metric],
        }
        for (m, c, k, metric), mean in means.items()
        for seed, step in zip(SEEDS, (-1, 0, 1), strict=True)
    ]
    return pd.DataFrame(rows)


def _failing_means() -> dict[tuple[str, str, str, str], float]:
    """The paper's means, edited so that one check of every claim fails on both corpora."""
    means = _paper_means()
    for corpus in ("math20k", "coding20k"):
        rpb = {metric: means[("moonlight", corpus, "rpb", metric)] for metric in ("nmi", "overall9", "id")}
        edits = {
            ("lbl", "overall9"): rpb["overall9"],  # LBL no longer below RPB
            ("sft", "nmi"): rpb["nmi"] + 0.01,  # SFT keeps more NMI than RPB
            ("sft", "id"): rpb["id"] + 10.0,  # SFT's ID above RPB's
            ("within_soft", "overall9"): rpb["overall9"] - 8.0,  # within-soft far from RPB
            ("within_hard", "overall9"): rpb["overall9"],  # within-hard loses nothing
            ("global_hard", "overall9"): rpb["overall9"] + 1.0,  # global-hard above within-hard
            ("router_l2", "nmi"): rpb["nmi"] - 0.1,  # Router-L2 loses NMI
            ("rpb_hard", "overall9"): rpb["overall9"] + 3.0,  # the hard prior costs nothing
        }
        means |= {("moonlight", corpus, condition, metric): v for (condition, metric), v in edits.items()}
    return means


def test_results_that_hold_every_claim_are_reproduced():
    ours = our_estimates(_seed_rows(_paper_means()))
    assert ours[("moonlight", "math20k", "rpb", "nmi")] == Estimate(
        pytest.approx(0.631), pytest.approx(0.002), 3
    )
    rows = claim_rows(CLAIMS, ours, paper_estimates(load_reference(REFERENCE)), RULES)
    assert list(rows["claim"]) == [claim.claim_id for claim in CLAIMS]
    assert list(rows["verdict"]) == [REPRODUCED] * len(CLAIMS)
    assert not rows["ours"].str.contains("✗|missing").any()


def test_results_that_fail_every_claim_are_not_reproduced():
    ours = our_estimates(_seed_rows(_failing_means()))
    rows = claim_rows(CLAIMS, ours, paper_estimates(load_reference(REFERENCE)), RULES)
    assert list(rows["verdict"]) == [NOT_REPRODUCED] * len(CLAIMS)
    assert list(rows["paper_check"]) == ["holds"] * len(CLAIMS)
    assert rows["ours"].str.contains("✗").all()


def test_a_missing_cell_shows_as_missing():
    seeds = _seed_rows(_paper_means())
    without_hard = seeds[seeds["condition"] != "rpb_hard"]
    rows = claim_rows(CLAIMS, our_estimates(without_hard), {}, RULES).set_index("claim")
    assert rows.at["rpb_hard_costs_accuracy", "verdict"] == MISSING
    assert (
        rows.at["rpb_hard_costs_accuracy", "ours"].count("missing") == 4
    )  # the value and the check, per corpus
    assert (rows.drop(index="rpb_hard_costs_accuracy")["verdict"] == REPRODUCED).all()


def test_a_missing_cell_beside_a_failed_check_is_not_reproduced():
    means = _paper_means()
    for corpus in ("math20k", "coding20k"):
        means[("moonlight", corpus, "within_hard", "overall9")] = means[
            ("moonlight", corpus, "rpb", "overall9")
        ]
    seeds = _seed_rows(means)
    seeds = seeds[~((seeds["condition"] == "within_hard") & (seeds["metric"] == "nmi"))]
    rows = claim_rows(CLAIMS, our_estimates(seeds), {}, RULES).set_index("claim")
    assert rows.at["within_hard_keeps_nmi_loses_accuracy", "verdict"] == NOT_REPRODUCED


def test_a_single_seed_shows_its_count():
    seeds = _seed_rows(_paper_means())
    seeds = seeds[(seeds["condition"] != "rpb_hard") | (seeds["seed"] == 42)]
    rows = claim_rows(CLAIMS, our_estimates(seeds), {}, RULES).set_index("claim")
    assert "(n=1)" in rows.at["rpb_hard_costs_accuracy", "ours"]
    assert "(n=" not in rows.at["lbl_below_rpb", "ours"]


# ---------------------------------------------------------------- the registry entry and its seeds


def seeds_of(condition: str) -> tuple[int, ...]:
    """The paper's training seeds of a claims cell: RPB-hard is single-seed in the paper (Table 6)."""
    return (42,) if condition == "rpb_hard" else SEEDS


def test_the_claims_cells_are_exactly_what_the_claims_compare(paper_config):
    result = closure(paper_config, "claims")
    needed = needed_cells(CLAIMS)
    evaluated = {(e.model, e.corpus, e.condition, e.seed) for e in result.evaluations}
    probed = {(p.model, p.corpus, p.condition, p.seed) for p in result.probes if p.condition != BASE}
    assert evaluated == {(*cell, seed) for cell in needed["eval"] for seed in seeds_of(cell[2])}
    assert probed == {(*cell, seed) for cell in needed["probe"] for seed in SEEDS}


def test_at_toy_scale_the_claims_keep_three_seeds_and_every_other_cell_one():
    config = _config(toy=True)
    assert config["seeds_per_cell"] == 1 and config["tables"]["claims"]["keep_seeds"] is True
    assert {t.seed for t in closure(config, "claims").trainings} == set(SEEDS)
    assert {p.seed for p in closure(config, "claims").probes if p.condition != BASE} == set(SEEDS)
    for output_id, entry in registry.outputs(config).items():
        if output_id != "claims":
            for cell in entry["cells"]:
                assert len(cell.get("eval_seeds", [])) <= 1 and len(cell.get("probe_seeds", [])) <= 1, (
                    output_id
                )
    assert {t.seed for t in closure(config, "table5").trainings} == {42}


def test_keep_seeds_is_what_exempts_the_claims_from_the_cap():
    config = load_config(toy=True)
    validate_config(config, str(SCHEMA))
    del config["tables"]["claims"]["keep_seeds"]
    registry.cap_seeds(config)
    assert {t.seed for t in closure(config, "claims").trainings} == {42}


def test_a_toy_dry_run_of_the_claims_trains_and_probes_three_seeds():
    jobs = dry_run(TOY, "results/tables/claims.md")
    trained = {(w["corpus"], w["condition"], w["seed"]) for rule, w in jobs if rule == "train_local"}
    probed = {(w["corpus"], w["condition"], w["seed"]) for rule, w in jobs if rule == "retention"}
    cells = needed_cells(CLAIMS)
    assert trained == {(c, k, str(s)) for _, c, k in cells["eval"] | cells["probe"] for s in seeds_of(k)}
    assert probed == {(c, k, str(s)) for _, c, k in cells["probe"] for s in SEEDS}


# ---------------------------------------------------------------- the table, from result files


def _scores(config: dict, corpus: str, overall9: float | None, in_domain: float | None) -> dict[str, float]:
    """Benchmark scores whose Overall@9 and ID come out as given (F.4: 3 ID and 6 OOD of the nine).

    In-domain benchmarks score ``in_domain``, the others the OOD that makes the suite mean
    ``overall9``; with only one of the two given, every benchmark scores it.
    """
    if overall9 is None or in_domain is None:
        value = in_domain if overall9 is None else overall9
        return dict.fromkeys(config["benchmarks"], value)
    domain = config["corpora"][corpus]["domain"]
    suite = [spec for spec in config["benchmarks"].values() if spec["overall9"]]
    ids = sum(spec["family"] == domain for spec in suite)
    out_of_domain = (len(suite) * overall9 - ids * in_domain) / (len(suite) - ids)
    return {
        name: in_domain if spec["family"] == domain else out_of_domain
        for name, spec in config["benchmarks"].items()
    }


def _results_tree(root: Path, config: dict, failing: bool) -> Path:
    """Summaries and retention metrics of the claims closure at the paper's (or the failing) means."""
    means = _failing_means() if failing else _paper_means()
    step = {42: -1, 43: 0, 44: 1}
    result = closure(config, "claims")
    for e in result.evaluations:
        wanted = {m: means.get((e.model, e.corpus, e.condition, m)) for m in ("overall9", "id")}
        shifted = {m: None if v is None else v + step[e.seed] * SPREAD[m] for m, v in wanted.items()}
        scores = _scores(config, e.corpus, shifted["overall9"], shifted["id"])
        benchmarks = {
            name: {"score": score, "repeat_scores": [score] * 5, "repeat_sd": 0.0, "items": 3}
            for name, score in scores.items()
        }
        run = {key: getattr(e, key) for key in ("model", "corpus", "condition", "seed")}
        write_json(summary_path(root, e), {**run, "repeats": 5, "benchmarks": benchmarks})
    for probe in result.probes:
        if probe.condition == BASE:
            continue
        nmi = means[(probe.model, probe.corpus, probe.condition, "nmi")] + step[probe.seed] * SPREAD["nmi"]
        summary = dict.fromkeys(RETENTION_KEYS.values(), 0.5) | {"nmi": nmi}
        write_json(metrics_path(root, probe), {"summary": summary, "null_model": {}, "sweep": []})
    return root


def _rendered(config: dict, results: Path, tmp_path: Path) -> tuple[pd.DataFrame, str]:
    """``report table --id claims`` on a sandbox of its declared inputs, with the paper's reference."""
    root = tmp_path / "sandbox" / "results"
    declared = sandbox(config, "claims", results, root)
    out = tmp_path / "out"
    argv = ["report", "table", "--id", "claims", "--config", json.dumps(config), "--results", str(root)]
    argv += ["--inputs", *map(str, declared), "--reference", str(REFERENCE)]
    argv += ["--reference-notes", str(ROOT / "reference" / "claims.notes.md")]
    argv += [f"--{kind}={out / f'claims.{kind}'}" for kind in ("csv", "md", "tex")]
    assert cli_main(argv) == 0
    return pd.read_csv(out / "claims.csv"), (out / "claims.md").read_text()


def test_the_table_from_its_declared_files_reproduces_the_paper_means(tmp_path):
    config = _config(toy=True)
    table, md = _rendered(config, _results_tree(tmp_path / "results", config, failing=False), tmp_path)
    assert list(table["claim"]) == [claim.claim_id for claim in CLAIMS]
    assert list(table["verdict"]) == [REPRODUCED] * len(CLAIMS)
    assert list(table["paper_check"]) == ["holds"] * len(CLAIMS)
    assert "Toy scale" in md and "Rules on the paper's numbers" in md and "Table 6's 24.08" in md
    rows = table.set_index("claim")
    assert (
        "math20k: RPB 0.631 ± 0.002 vs SFT / NoAux 0.575 ± 0.002 (Δ +0.056 ✓)"
        in rows.at["rpb_nmi_above_sft_lbl", "ours"]
    )
    assert (
        "RPB 45.77 ± 0.20 vs SFT / NoAux 29.44 ± 0.20 (Δ +16.33 ✓)" in rows.at["rpb_id_at_least_sft", "ours"]
    )


def test_the_table_shows_failed_claims_as_not_reproduced(tmp_path):
    config = _config(toy=True)
    table, md = _rendered(config, _results_tree(tmp_path / "results", config, failing=True), tmp_path)
    assert list(table["verdict"]) == [NOT_REPRODUCED] * len(CLAIMS)
    assert list(table["paper_check"]) == ["holds"] * len(CLAIMS)
    assert md.count(f"| {NOT_REPRODUCED} |") == len(CLAIMS)


def test_the_table_function_matches_the_command(tmp_path):
    config = _config(toy=True)
    results = _results_tree(tmp_path / "results", config, failing=False)
    table = claims.claims_table(ReportInputs.at(config, "claims", results, load_reference(REFERENCE)))
    assert table.keys == ("claim",) and table.columns == claims.COLUMNS
    rendered, _ = _rendered(config, results, tmp_path)
    assert list(rendered["ours"]) == list(table.rows["ours"])


def test_the_report_job_gets_the_claim_rules_and_the_reference():
    _, command = printed_job("results/tables/claims.csv", "table")
    words = shlex.split(command.removeprefix("Shell command: "))
    sliced = json.loads(words[words.index("--config") + 1])
    assert sliced["claim_rules"] == load_config(toy=False)["claim_rules"]
    assert set(sliced["tables"]) == {"claims"} and sliced["tables"]["claims"]["keep_seeds"] is True
    assert words[words.index("--reference") + 1] == "reference/claims.csv"
    assert words[words.index("--reference-notes") + 1] == "reference/claims.notes.md"
