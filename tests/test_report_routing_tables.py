"""Routing-side tables (1, 5, 6, 9, 10, 11, 13, 15) from synthetic result trees, against numpy.

File shapes come from the project's own stages: a tiny random probe goes through
``probe partition`` / ``probe retention`` and a tiny random prior through ``priors shuffle`` and
``prior_stats``; the paper-scale result trees copy those files' structure with known random values.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, load_config
from tests.report_files import anywhere, report_in_sandbox
from workflow_scripts.atomic import write_json
from workflow_scripts.cli import main as cli_main
from workflow_scripts.file_formats.routes import ProbeTokens, Routes, save_routes
from workflow_scripts.layout import metrics_path, partition_path, prior_file
from workflow_scripts.priors.stats import prior_stats
from workflow_scripts.registry import BASE, Evaluation, Probe, closure
from workflow_scripts.report import routing_tables
from workflow_scripts.report.reference import compare, load_reference
from workflow_scripts.report.render import render
from workflow_scripts.report.routing_frames import (
    ResultFileError,
    null_model_frame,
    prior_frame,
    retention_frame,
    span_frame,
    sweep_frame,
)
from workflow_scripts.report.table import ReportInputs

TINY_E, TINY_K, TINY_L, TINY_N = 8, 2, 2, 240
RETENTION_SUMMARY = {
    "nmi": "nmi",
    "modularity": "q",
    "modularity_base": "q_base",
    "delta_q": "delta_q",
    "tvd": "tvd",
    "jsd": "jsd",
    "topk_overlap": "topk_overlap",
}


def _routes(topk: np.ndarray, directory: Path) -> Path:
    """A routes file of (L, N, k) top-k ids over alternating Q/A tokens."""
    n = topk.shape[1]
    tokens = ProbeTokens(
        row_ids=np.repeat(np.arange(n // 20), 20).astype(np.int64),
        positions=np.tile(np.arange(20), n // 20).astype(np.int32),
        spans=(np.arange(n) % 3 != 0).astype(np.int8),
    )
    probs = np.full((topk.shape[0], n, TINY_E), 1.0 / TINY_E, dtype=np.float16)
    routes = Routes(topk.astype(np.int16), probs, np.arange(topk.shape[0], dtype=np.int64))
    path = directory / "routes.npz"
    save_routes(path, routes, tokens, {"format": "test"}, directory / "meta.json")
    return path


def _random_topk(rng: np.random.Generator) -> np.ndarray:
    """(L, N, k) sorted distinct experts, drawn with a skewed preference so communities exist."""
    weights = rng.dirichlet(np.full(TINY_E, 0.5), size=TINY_L)
    rows = [[np.sort(rng.choice(TINY_E, TINY_K, replace=False, p=w)) for _ in range(TINY_N)] for w in weights]
    return np.array(rows)


@pytest.fixture(scope="module")
def stage_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Real partition.json, metrics.json, prior_validation.json and stats.json of the project's stages."""
    config = load_config(toy=False)
    root = tmp_path_factory.mktemp("stages")
    rng = np.random.default_rng(0)
    (root / "base").mkdir()
    (root / "run").mkdir()
    base_routes = _routes(_random_topk(rng), root / "base")
    run_routes = _routes(_random_topk(rng), root / "run")
    settings = {key: config["probe"]["detector"][key] for key in ("name", "resolution", "seed", "tolerance")}
    detector = json.dumps(settings | {"rho": config["probe"]["edge_fraction"]})  # as rules/common.smk
    probe = json.dumps(config["probe"] | {"null_model": {"samples": 3, "seed": 0}})
    partition, metrics = root / "partition.json", root / "metrics.json"
    commands = [
        ["probe", "partition", "--routes", base_routes, "--detector", detector, "--out", partition],
        ["probe", "retention", "--routes", run_routes, "--base-routes", base_routes, "--partition", partition]
        + ["--detector", detector, "--probe", probe, "--out", metrics, "--layers", root / "layers.parquet"],
    ]
    prior = rng.dirichlet(np.full(TINY_E, 0.3), size=(24, 2, TINY_L)).astype(np.float32)
    np.save(root / "prior.npy", prior)
    validation = root / "prior_validation.json"
    commands.append(
        ["priors", "shuffle", "--prior", root / "prior.npy", "--partition", partition, "--top-k", TINY_K]
        + ["--seed", 0, "--validation-seeds", 0, 1, "--rhos", 0.1, 0.2, "--validation", validation]
        + ["--within", root / "within.npy", "--global", root / "global.npy"]
    )
    for command in commands:
        assert cli_main([str(part) for part in command]) == 0, command
    write_json(root / "stats.json", prior_stats(prior))
    names = {
        "partition": partition,
        "metrics": metrics,
        "validation": validation,
        "stats": root / "stats.json",
    }
    return {name: json.loads(path.read_text()) for name, path in names.items()}


@dataclass
class World:
    """A paper-scale results tree for every routing table, and the values written into it."""

    results: Path
    config: dict[str, Any]
    metrics: dict[Probe, dict[str, Any]] = field(default_factory=dict)
    summaries: dict[Evaluation, dict[str, Any]] = field(default_factory=dict)
    partitions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    validations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    stats: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def inputs(self, table_id: str, config: dict[str, Any] | None = None) -> ReportInputs:
        return ReportInputs.at(config or self.config, table_id, self.results)


def _metrics(template: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    data = copy.deepcopy(template)
    data["summary"] = {key: float(rng.uniform(0.05, 0.95)) for key in template["summary"]}
    data["null_model"] = {key: float(rng.uniform(0.0, 1.0)) for key in template["null_model"]}
    for entry in data["sweep"]:
        entry["nmi"] = float(rng.uniform(0.3, 0.9))
    return data


def _summary(config: dict[str, Any], evaluation: Evaluation, rng: np.random.Generator) -> dict[str, Any]:
    benchmarks = {}
    for name, spec in config["benchmarks"].items():
        repeats = rng.uniform(5.0, 80.0, size=5)
        benchmarks[name] = {
            "score": float(repeats.mean()),
            "repeat_scores": repeats.tolist(),
            "repeat_sd": float(repeats.std(ddof=1)),
            "items": spec["rows"],
        }
    run = {key: getattr(evaluation, key) for key in ("model", "corpus", "condition", "seed")}
    return {**run, "repeats": 5, "benchmarks": benchmarks}


def _partition(template: dict[str, Any], model: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    data = copy.deepcopy(template)
    layers, experts = model["moe_layers"], model["experts"]
    data["labels"] = rng.integers(0, 4, size=(layers, experts)).tolist()
    data["modularity"] = rng.uniform(0.1, 0.4, size=layers).tolist()
    for span in ("Q", "A"):
        p_topk = rng.dirichlet(np.full(experts, 0.4), size=layers) * model["top_k"]
        prob = p_topk / p_topk.sum(axis=1, keepdims=True)  # (L, E): Table 11 takes exp(H)/E per layer
        fraction = float(np.mean(np.exp(-np.sum(prob * np.log(prob), axis=1))) / experts)
        data["spans"][span] = {
            "p_topk": p_topk.tolist(),
            "effective_expert_fraction": fraction,
            "tokens": 1500 if span == "Q" else 3500,
        }
    return data


def _validation(template: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    data = copy.deepcopy(template)
    for scope in ("within", "global"):
        overlap = float(rng.uniform(0.05, 0.6))
        strength = data["strength"][scope]
        strength.update(prior_topk_overlap=overlap, topk_change_rate=1.0 - overlap)
        strength.update(
            abs_delta_bias_p90=float(rng.uniform(0.3, 1.6)), clamp_upper_fraction=float(rng.uniform(0, 0.03))
        )
        check = data["community_check"][scope]
        check.update(mean=float(rng.uniform(0.5, 1.0)), min=float(rng.uniform(0.3, 0.5)))
    return data


def _write(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return data


def build_world(
    results: Path, config: dict[str, Any], stage: dict[str, dict[str, Any]], seed: int = 1
) -> World:
    """Write every file the routing tables' closures read, with random values."""
    rng = np.random.default_rng(seed)
    world = World(results, config)
    probes, evaluations, validations = set(), set(), set()
    for table_id in routing_tables.TABLES:
        needed = closure(config, table_id)
        probes |= needed.probes
        evaluations |= needed.evaluations
        validations |= needed.prior_validations
    for probe in sorted(probes, key=str):
        if probe.condition == BASE:
            partition = _partition(stage["partition"], config["models"][probe.model], rng)
            pair = (probe.model, probe.corpus)
            world.partitions[pair] = _write(partition_path(results, *pair), partition)
        else:
            world.metrics[probe] = _write(metrics_path(results, probe), _metrics(stage["metrics"], rng))
    for evaluation in sorted(evaluations, key=str):
        path = results / "evals" / evaluation.model / evaluation.corpus / evaluation.condition
        summary = _summary(config, evaluation, rng)
        world.summaries[evaluation] = _write(path / f"s{evaluation.seed}" / "summary.json", summary)
    for pair in sorted(validations):
        validation = _validation(stage["validation"], rng)
        world.validations[pair] = _write(prior_file(results, *pair, "prior_validation.json"), validation)
        stats = stage["stats"] | {"bias_sd": float(rng.uniform(0.4, 0.8))}
        world.stats[pair] = _write(prior_file(results, *pair, "stats.json"), stats)
    return world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, stage_outputs: dict[str, dict[str, Any]]) -> World:
    return build_world(tmp_path_factory.mktemp("results"), load_config(toy=False), stage_outputs)


# ------------------------------------------------------------------ expectations, straight from the files


def _stats(values: list[float]) -> tuple[float, float, int]:
    array = np.asarray(values, dtype=float)
    sd = float(np.std(array, ddof=1)) if array.size > 1 else float("nan")
    return float(np.mean(array)), sd, int(array.size)


def _routing_values(
    world: World, table_id: str, corpus: str, condition: str, key: tuple[str, ...]
) -> list[float]:
    probes = closure(world.config, table_id).probes
    chosen = [p for p in probes if (p.corpus, p.condition) == (corpus, condition) and p.seed is not None]
    chosen.sort(key=lambda p: p.seed)
    assert chosen, (table_id, corpus, condition)
    values = []
    for probe in chosen:
        value: Any = world.metrics[probe]
        for part in key:
            value = value[part]
        values.append(value)
    return values


def _performance_values(world: World, table_id: str, corpus: str, condition: str, column: str) -> list[float]:
    benchmarks = world.config["benchmarks"]
    domain = world.config["corpora"][corpus]["domain"]
    suite = [name for name, spec in benchmarks.items() if spec["overall9"]]
    members = {
        "overall9": suite,
        "id": [name for name in suite if benchmarks[name]["family"] == domain],
        "ood": [name for name in suite if benchmarks[name]["family"] != domain],
    }[column]
    evaluations = closure(world.config, table_id).evaluations
    chosen = sorted(e.seed for e in evaluations if (e.corpus, e.condition) == (corpus, condition))
    assert chosen, (table_id, corpus, condition)
    values = []
    for seed in chosen:
        summary = world.summaries[Evaluation("moonlight", corpus, condition, seed)]
        values.append(np.mean([summary["benchmarks"][name]["score"] for name in members]))
    return values


def _check_cell(row: pd.Series, column: str, values: list[float]) -> None:
    mean, sd, n = _stats(values)
    assert row[column] == pytest.approx(mean, rel=1e-12)
    assert row[f"{column}_n"] == n
    if n > 1:
        assert row[f"{column}_sd"] == pytest.approx(sd, rel=1e-9)
    else:
        assert np.isnan(row[f"{column}_sd"])


def _row_keys(table) -> list[tuple[str, ...]]:
    return [tuple(row) for row in table.rows[list(table.keys)].itertuples(index=False)]


def _grid(corpora: list[str], conditions: list[str]) -> list[tuple[str, str]]:
    return [(corpus, condition) for corpus in corpora for condition in conditions]


CORPORA = ["math20k", "coding20k"]


# ------------------------------------------------------------------ loaders


def test_loaders_read_real_stage_outputs(tmp_path: Path, stage_outputs: dict[str, dict[str, Any]]) -> None:
    probe = Probe("moonlight", "math20k", "rpb", 42)
    _write(metrics_path(tmp_path, probe), stage_outputs["metrics"])
    _write(partition_path(tmp_path, "moonlight", "math20k"), stage_outputs["partition"])
    _write(prior_file(tmp_path, "moonlight", "math20k", "prior_validation.json"), stage_outputs["validation"])
    _write(prior_file(tmp_path, "moonlight", "math20k", "stats.json"), stage_outputs["stats"])
    summary, null = stage_outputs["metrics"]["summary"], stage_outputs["metrics"]["null_model"]

    retention = retention_frame(anywhere(tmp_path), [probe, Probe("moonlight", "math20k", BASE, None)])
    assert len(retention) == 1
    row = retention.iloc[0]
    assert (row["model"], row["corpus"], row["condition"], row["seed"]) == ("moonlight", "math20k", "rpb", 42)
    for column, key in RETENTION_SUMMARY.items():
        assert row[column] == summary[key]
    assert null_model_frame(anywhere(tmp_path), [probe]).iloc[0]["q_margin"] == null["q_margin"]

    sweep = sweep_frame(anywhere(tmp_path), [probe])
    assert len(sweep) == len(stage_outputs["metrics"]["sweep"]) == 2 * 4 * 4
    assert set(sweep["detector"]) == {"louvain", "leiden"} and set(sweep["detector_seed"]) == {0, 1, 2, 42}

    spans = span_frame(anywhere(tmp_path), [Probe("moonlight", "math20k", BASE, None)])
    assert list(spans["span"]) == ["Q", "A"]
    assert spans.iloc[0]["p_topk"].shape == (TINY_L, TINY_E)
    assert spans.iloc[1]["tokens"] == stage_outputs["partition"]["spans"]["A"]["tokens"]

    priors = prior_frame(anywhere(tmp_path), [("moonlight", "math20k")])
    assert list(priors["prior"]) == ["shuffled_within", "shuffled_global"]
    strength = stage_outputs["validation"]["strength"]["global"]
    assert priors.iloc[1]["topk_change_rate"] == strength["topk_change_rate"]
    assert priors.iloc[0]["bias_sd"] == stage_outputs["stats"]["bias_sd"]


def test_loaders_name_the_file_and_key(tmp_path: Path, stage_outputs: dict[str, dict[str, Any]]) -> None:
    probe = Probe("moonlight", "math20k", "sft", 43)
    path = metrics_path(tmp_path, probe)
    with pytest.raises(ResultFileError, match=r"metrics\.json: result file is missing"):
        retention_frame(anywhere(tmp_path), [probe])

    broken = copy.deepcopy(stage_outputs["metrics"])
    del broken["summary"]["tvd"]
    _write(path, broken)
    with pytest.raises(ResultFileError, match=rf"{path}: missing key 'summary\.tvd'"):
        retention_frame(anywhere(tmp_path), [probe])

    path.write_text(
        json.dumps(stage_outputs["metrics"]).replace('"nmi_margin": ', '"nmi_margin": "x", "_": ')
    )
    with pytest.raises(ResultFileError, match=r"'null_model\.nmi_margin' is 'x', not a finite number"):
        null_model_frame(anywhere(tmp_path), [probe])

    broken = copy.deepcopy(stage_outputs["metrics"])
    del broken["sweep"][3]["rho"]
    _write(path, broken)
    with pytest.raises(ResultFileError, match=r"missing key 'rho'"):
        sweep_frame(anywhere(tmp_path), [probe])

    path.write_text("{not json")
    with pytest.raises(ResultFileError, match="not a readable JSON file"):
        retention_frame(anywhere(tmp_path), [probe])

    broken = copy.deepcopy(stage_outputs["partition"])
    broken["spans"]["A"]["p_topk"] = [[1.0, float("nan")]]
    _write(partition_path(tmp_path, "moonlight", "math20k"), broken)
    with pytest.raises(ResultFileError, match=r"spans\.A\.p_topk"):
        span_frame(anywhere(tmp_path), [Probe("moonlight", "math20k", BASE, None)])

    validation = copy.deepcopy(stage_outputs["validation"])
    del validation["community_check"]["global"]
    _write(prior_file(tmp_path, "moonlight", "math20k", "prior_validation.json"), validation)
    _write(prior_file(tmp_path, "moonlight", "math20k", "stats.json"), stage_outputs["stats"])
    with pytest.raises(ResultFileError, match=r"missing key 'community_check\.global'"):
        prior_frame(anywhere(tmp_path), [("moonlight", "math20k")])


# ------------------------------------------------------------------ tables


def test_table_registry() -> None:
    config = load_config(toy=False)
    assert set(routing_tables.TABLES) == {f"table{i}" for i in (1, 5, 6, 9, 10, 11, 13, 15)} | {"appendix_d2"}
    assert set(routing_tables.TABLES) <= set(config["tables"])


def test_table1_lists_the_conditions_by_family(world: World) -> None:
    table = routing_tables.table1(world.inputs("table1"))
    conditions = world.config["conditions"]
    listed = world.config["tables"]["table1"]["lists_conditions"]
    assert [key[1] for key in _row_keys(table)] == listed  # already grouped by family in the registry
    assert [key[0] for key in _row_keys(table)] == [conditions[name]["family"] for name in listed]
    assert table.columns == ("label", "role", "constrained_object", "token_conditioned_routing")
    for _, row in table.rows.iterrows():
        for column in table.columns:
            assert row[column] == conditions[row["condition"]][column]
            assert row[f"{column}_n"] == 0 and np.isnan(row[f"{column}_sd"])
    assert table.block == "family"


def test_table1_groups_families_together(world: World) -> None:
    config = copy.deepcopy(world.config)
    config["tables"]["table1"]["lists_conditions"] = ["sft", "rpb", "lbl", "within_soft", "router_l2"]
    table = routing_tables.table1(world.inputs("table1", config))
    assert [key[1] for key in _row_keys(table)] == ["sft", "lbl", "rpb", "router_l2", "within_soft"]


def test_table5_separates_probed_and_trained_seeds(world: World) -> None:
    table = routing_tables.table5(world.inputs("table5"))
    conditions = ["rpb", "within_soft", "within_hard", "global_hard"]
    assert _row_keys(table) == _grid(CORPORA, conditions)
    assert table.keys == ("corpus", "condition") and table.columns == ("nmi", "overall9")
    for _, row in table.rows.iterrows():
        corpus, condition = row["corpus"], row["condition"]
        _check_cell(row, "nmi", _routing_values(world, "table5", corpus, condition, ("summary", "nmi")))
        _check_cell(row, "overall9", _performance_values(world, "table5", corpus, condition, "overall9"))
        assert row["nmi_n"] == (3 if condition == "rpb" else 2) and row["overall9_n"] == 3
    assert table.notes == (
        "within-soft, within-hard, global-hard: routing columns over probed seeds s42/s43, "
        "performance columns over training seeds s42/s43/s44 (Appendix F.5).",
    )


def test_table6_single_seed(world: World) -> None:
    table = routing_tables.table6(world.inputs("table6"))
    conditions = ["sft", "sft_frozen_bias", "rpb_beta050", "rpb_beta075", "rpb", "rpb_hard"]
    assert _row_keys(table) == _grid(CORPORA, conditions)
    assert table.columns == ("nmi", "overall9") and table.notes == ()
    for _, row in table.rows.iterrows():
        corpus, condition = row["corpus"], row["condition"]
        _check_cell(row, "nmi", _routing_values(world, "table6", corpus, condition, ("summary", "nmi")))
        _check_cell(row, "overall9", _performance_values(world, "table6", corpus, condition, "overall9"))
        assert row["nmi_n"] == row["overall9_n"] == 1


def test_table15_routing_and_performance(world: World) -> None:
    table = routing_tables.table15(world.inputs("table15"))
    assert _row_keys(table) == _grid(CORPORA, ["sft", "lbl", "rpb", "router_l2"])
    assert table.columns == ("nmi", "tvd", "jsd", "topk_overlap", "id", "ood")
    assert table.bold == {"nmi": "max", "topk_overlap": "max", "id": "max", "ood": "max"}
    assert table.block == "corpus"
    for _, row in table.rows.iterrows():
        corpus, condition = row["corpus"], row["condition"]
        for column in ("nmi", "tvd", "jsd", "topk_overlap"):
            values = _routing_values(world, "table15", corpus, condition, ("summary", column))
            _check_cell(row, column, values)
            assert row[f"{column}_n"] == (1 if condition == "router_l2" else 3)
        for column in ("id", "ood"):
            _check_cell(row, column, _performance_values(world, "table15", corpus, condition, column))
            assert row[f"{column}_n"] == 3
    assert table.notes == (
        "Router-L2: routing columns over probed seeds s42, "
        "performance columns over training seeds s42/s43/s44 (Appendix F.5).",
    )


def test_table9_null_model_margins(world: World) -> None:
    table = routing_tables.table9(world.inputs("table9"))
    assert _row_keys(table) == _grid(CORPORA, ["sft", "lbl", "rpb", "rpb_hard"])
    assert table.columns == ("q_margin", "nmi_margin", "layers_beating_null_q")
    for _, row in table.rows.iterrows():
        for column in table.columns:
            values = _routing_values(world, "table9", row["corpus"], row["condition"], ("null_model", column))
            _check_cell(row, column, values)


def test_table10_edge_fraction_sweep(world: World) -> None:
    table = routing_tables.table10(world.inputs("table10"))
    assert _row_keys(table) == _grid(CORPORA, ["sft", "lbl", "rpb", "router_l2"])
    assert table.columns == ("nmi_rho005", "nmi_rho010", "nmi_rho015", "nmi_rho020")
    assert table.bold == {column: "max" for column in table.columns} and table.block == "corpus"
    leiden_gaps, seed_sds = [], []
    for probe, metrics in world.metrics.items():
        if probe not in closure(world.config, "table10").probes:
            continue
        sweep = {(e["detector"], e["rho"], e["seed"]): e["nmi"] for e in metrics["sweep"]}
        for rho in (0.05, 0.10, 0.15, 0.20):
            leiden_gaps.append(abs(sweep[("leiden", rho, 0)] - sweep[("louvain", rho, 0)]))
            seed_sds.append(np.std([sweep[("louvain", rho, s)] for s in (0, 1, 2, 42)], ddof=1))
    for _, row in table.rows.iterrows():
        (probe,) = [
            p
            for p in world.metrics
            if (p.corpus, p.condition, p.seed) == (row["corpus"], row["condition"], 42)
        ]
        sweep = {(e["detector"], e["rho"], e["seed"]): e["nmi"] for e in world.metrics[probe]["sweep"]}
        for rho, column in zip((0.05, 0.10, 0.15, 0.20), table.columns, strict=True):
            _check_cell(row, column, [sweep[("louvain", rho, 0)]])
    assert table.notes == (
        "leiden against louvain at matched parameters: largest |difference| "
        f"{max(leiden_gaps):.3f} over all cells.",
        "Detector-seed dispersion (sample sd of louvain community NMI over seeds 0/1/2/42): "
        f"mean {np.mean(seed_sds):.3f}, max {np.max(seed_sds):.3f} over all cells.",
    )


def test_sweep_robustness_against_numpy() -> None:
    rows = []
    nmis = {("louvain", 0): 0.50, ("louvain", 1): 0.56, ("louvain", 2): 0.47, ("leiden", 0): 0.53}
    for (detector, seed), nmi in nmis.items():
        rows.append(
            dict(
                model="m",
                corpus="c",
                condition="k",
                seed=42,
                detector=detector,
                rho=0.1,
                detector_seed=seed,
                nmi=nmi,
            )
        )
    robust = routing_tables.sweep_robustness(pd.DataFrame(rows), "louvain", 0)
    assert robust["other_max_abs_diff"] == pytest.approx(0.03)
    assert robust["seed_sd_mean"] == pytest.approx(np.std([0.50, 0.56, 0.47], ddof=1))
    alone = routing_tables.sweep_robustness(pd.DataFrame(rows[:3]), "louvain", 0)
    assert np.isnan(alone["other_max_abs_diff"])


def test_table11_span_structure(world: World) -> None:
    table = routing_tables.table11(world.inputs("table11"))
    assert _row_keys(table) == [
        ("moonlight", "Q"),
        ("moonlight", "A"),
        ("qwen3_30b", "Q"),
        ("qwen3_30b", "A"),
    ]
    assert table.columns == (
        "cos_math_code",
        "cos_math_general",
        "cos_code_general",
        "eff_frac_min",
        "eff_frac_max",
    )
    corpora = {"math": "math20k", "code": "coding20k", "general": "general"}
    for _, row in table.rows.iterrows():
        spans = {d: world.partitions[(row["model"], c)]["spans"][row["span"]] for d, c in corpora.items()}
        for a, b in (("math", "code"), ("math", "general"), ("code", "general")):
            ca = np.mean(spans[a]["p_topk"], axis=0)
            cb = np.mean(spans[b]["p_topk"], axis=0)
            cosine = ca @ cb / (np.linalg.norm(ca) * np.linalg.norm(cb))
            assert row[f"cos_{a}_{b}"] == pytest.approx(cosine, rel=1e-12)
        fractions = [span["effective_expert_fraction"] for span in spans.values()]
        assert (row["eff_frac_min"], row["eff_frac_max"]) == (min(fractions), max(fractions))
        assert all(row[f"{c}_n"] == 0 and np.isnan(row[f"{c}_sd"]) for c in table.columns)
    note = "averaged over layers; min and max over the math, code, general domains."
    assert any(note in line for line in table.notes)


def test_table11_needs_distinct_domains(world: World) -> None:
    config = copy.deepcopy(world.config)
    config["tables"]["table11"]["cells"][0]["corpora"] = ["math20k", "openr1math", "general"]
    with pytest.raises(ValueError, match="distinct domains"):
        routing_tables.table11(world.inputs("table11", config))


def test_appendix_d2_base_routing_against_numpy(world: World) -> None:
    table = routing_tables.appendix_d2(world.inputs("appendix_d2"))
    assert _row_keys(table) == [("moonlight",), ("deepseek_v2_lite",), ("qwen3_30b",)]
    for _, row in table.rows.iterrows():
        p = {}
        for domain, corpus in (("math", "math20k"), ("code", "coding20k")):
            spans = world.partitions[(row["model"], corpus)]["spans"].values()
            counts = sum(np.asarray(s["p_topk"]) * s["tokens"] for s in spans)  # (L, E) activations
            p[domain] = counts.sum(axis=0) / counts.sum()  # equal tokens per layer: layer mean = pooled
            per_layer = counts / counts.sum(axis=1, keepdims=True)
            perplexity = np.exp(-(per_layer * np.log(np.where(per_layer > 0, per_layer, 1))).sum(axis=1))
            assert row[f"eff_frac_{domain}"] == pytest.approx(np.mean(perplexity / counts.shape[1]), rel=1e-9)
        uniform = np.full_like(p["math"], 1.0 / p["math"].size)
        assert row["sharpness_math"] == pytest.approx(np.abs(p["math"] - uniform).sum(), rel=1e-12)
        assert row["sharpness_code"] == pytest.approx(np.abs(p["code"] - uniform).sum(), rel=1e-12)
        assert row["cross_domain"] == pytest.approx(np.abs(p["math"] - p["code"]).sum(), rel=1e-12)


def test_appendix_d2_needs_a_math_and_a_code_corpus(world: World) -> None:
    config = copy.deepcopy(world.config)
    config["tables"]["appendix_d2"]["cells"][0]["corpora"] = ["math20k", "openr1math"]
    with pytest.raises(ValueError, match="one math and one code corpus"):
        routing_tables.appendix_d2(world.inputs("appendix_d2", config))


def test_table13_prior_side_strength(world: World) -> None:
    table = routing_tables.table13(world.inputs("table13"))
    assert _row_keys(table) == _grid(CORPORA, ["shuffled_within", "shuffled_global"])
    assert table.columns == (
        "prior_topk_overlap",
        "topk_change_rate",
        "abs_delta_bias_p90",
        "clamp_upper_fraction",
        "bias_sd",
        "community_nmi",
        "community_nmi_min",
    )
    for _, row in table.rows.iterrows():
        validation = world.validations[("moonlight", row["corpus"])]
        scope = row["prior"].removeprefix("shuffled_")
        strength = validation["strength"][scope]
        for column in table.columns[:4]:
            assert row[column] == strength[column]
        assert row["topk_change_rate"] == pytest.approx(1.0 - row["prior_topk_overlap"])
        assert row["bias_sd"] == world.stats[("moonlight", row["corpus"])]["bias_sd"]
        assert row["community_nmi"] == validation["community_check"][scope]["mean"]
        assert row["community_nmi_min"] == validation["community_check"][scope]["min"]
        assert all(row[f"{c}_n"] == 0 for c in table.columns)


def test_a_row_without_seeds_is_an_error(world: World) -> None:
    config = copy.deepcopy(world.config)
    del config["tables"]["table5"]["cells"][1]["probe_seeds"]
    with pytest.raises(
        ValueError,
        match=r"table5: no seed covers column 'nmi' of row \('moonlight', 'math20k', 'within_soft'\)",
    ):
        routing_tables.table5(world.inputs("table5", config))


def test_single_model_tables_refuse_two_models() -> None:
    rows = pd.DataFrame({"model": ["moonlight", "qwen3_30b"], "corpus": ["math20k"] * 2})
    with pytest.raises(ValueError, match="rows span models"):
        routing_tables.drop_model("table9", rows)


def test_toy_scale_builds_every_table(tmp_path: Path, stage_outputs: dict[str, dict[str, Any]]) -> None:
    config = load_config(toy=True)
    toy = build_world(tmp_path, config, stage_outputs, seed=2)
    for table_id, build in routing_tables.TABLES.items():
        table = build(toy.inputs(table_id))
        assert len(table.rows) > 0 and table.table_id == table_id


@pytest.mark.parametrize(
    "table_id", ["table5", "table6", "table9", "table10", "table11", "table13", "table15", "appendix_d2"]
)
def test_reference_matches_table_keys_and_columns(world: World, table_id: str) -> None:
    reference = load_reference(ROOT / "reference" / f"{table_id}.csv")
    table = routing_tables.TABLES[table_id](world.inputs(table_id))
    assert [name for name in reference.columns if name not in ("column", "value", "sd")] == list(table.keys)
    compared = compare(table, reference)
    assert not (compared["status"] == "missing").any(), compared[compared["status"] == "missing"]
    published = compared[compared["status"] == "matched"]
    assert len(published) == len(reference)
    assert published["delta"].notna().all()


def test_table1_has_no_reference() -> None:
    assert not (ROOT / "reference" / "table1.csv").exists()


@pytest.mark.parametrize("table_id", sorted(routing_tables.TABLES))
def test_table_builds_from_its_declared_inputs_alone(world: World, table_id: str, tmp_path: Path) -> None:
    csv = report_in_sandbox(world.config, table_id, world.results, tmp_path)
    table = routing_tables.TABLES[table_id](world.inputs(table_id))
    assert csv.read_text() == render(table, None, world.config["scale"])["csv"]
