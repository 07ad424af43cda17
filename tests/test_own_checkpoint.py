"""Evaluate your own checkpoint (issue 34 item 3): a checkpoint the registry does not know, named
under ``own_checkpoints``, gets its row in the layout of Tables 16-19 beside the paper's rows and its
routing retention against its base, through the workflow's own rules and with provenance.

The toy checkpoint is a copy of one the suite's toy run trained, put in a folder outside results/:
the workflow knows it only from the config key.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT
from tests.dag import TOY, copy_workdir, planned_jobs, project_cli, snakemake, snakemake_ok, with_overlay
from workflow_scripts import dag_inputs, layout, registry
from workflow_scripts.atomic import write_json
from workflow_scripts.cli import main as cli_main
from workflow_scripts.records import SNAKEMAKE_FLAG, path_digest
from workflow_scripts.report.inputs import declared_files
from workflow_scripts.report.own_checkpoints import AGGREGATES, KEYS, RETENTION, columns
from workflow_scripts.report.reference import load_reference
from workflow_scripts.report.routing_frames import RETENTION_KEYS

FOLDER = "my-checkpoints/soft"  # relative to the working directory, as a user may write it
OWN = {"own_checkpoints": {"mine": {"model": "moonlight", "corpus": "math20k", "path": FOLDER}}}
TARGET = str(layout.manifest_path(layout.RESULTS, registry.OWN_TABLE))
TRAINED = "results/checkpoints/moonlight/math20k/within_soft/s42"  # trained by the suite's toy run
SUMMARY = "results/evals/moonlight/own/mine/summary.json"
METRICS = "results/graphs/moonlight/math20k/own/mine/metrics.json"


def _load(tmp_path: Path, own: dict) -> dict:
    """The toy registry with ``own`` as a last config file."""
    overlay = tmp_path / "own.yaml"
    overlay.write_text(yaml.safe_dump({"own_checkpoints": own}))
    return registry.load_config([*registry.shipped_config_files(ROOT, toy=True), overlay])


def _cells(path: Path) -> pd.DataFrame:
    """A rendered table's long CSV, its key columns as text (an absent corpus as "")."""
    cells = pd.read_csv(path)
    cells[list(KEYS)] = cells[list(KEYS)].fillna("")
    return cells


def _written(value: float) -> object:
    """``value`` as the long CSV holds it (six decimals)."""
    return pytest.approx(value, abs=1e-6)


def _checkpoint(tmp_path: Path) -> Path:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    return tmp_path / "ckpt"


def test_no_own_checkpoint_adds_no_table(toy_config):
    assert registry.OWN_TABLE not in toy_config["tables"]
    assert "own_checkpoints" not in toy_config  # the recorded config of a default run is unchanged


def test_an_own_checkpoint_is_evaluated_and_probed_never_trained(tmp_path):
    config = _load(
        tmp_path, {"mine": {"model": "moonlight", "corpus": "math20k", "path": str(_checkpoint(tmp_path))}}
    )
    closure = registry.closure(config, registry.OWN_TABLE)
    assert closure.trainings == frozenset() and closure.priors == frozenset()
    assert closure.evaluations == {registry.Evaluation("moonlight", "math20k", "own/mine", None)}
    assert closure.probes == {
        registry.Probe("moonlight", "math20k", "own/mine", None),
        registry.Probe("moonlight", "math20k", registry.BASE, None),
    }
    assert config["tables"][registry.OWN_TABLE]["paper_rows"] == {
        "table16": "moonlight",
        "table18": "moonlight",
    }
    assert layout.summary_path("results", next(iter(closure.evaluations))) == Path(SUMMARY)


MOONLIGHT = {"model": "moonlight", "corpus": "math20k"}


@pytest.mark.parametrize(
    ("entry", "refusal"),
    [
        ({"model": "mixtral", "corpus": "math20k"}, r"mine\.model: unknown model 'mixtral'"),
        ({"model": "moonlight", "corpus": "wiki"}, r"mine\.corpus: unknown corpus 'wiki'"),
        ({**MOONLIGHT, "path": "nowhere"}, r"mine\.path: nowhere: no such folder"),
        ({**MOONLIGHT, "path": "."}, r"mine\.path: \.: a folder without config\.json"),
        ({"model": "moonlight"}, r"mine: 'corpus' is a required property"),
    ],
    ids=["unknown model", "unknown corpus", "missing path", "no config.json", "no corpus"],
)
def test_a_bad_entry_is_refused_naming_its_key(tmp_path, monkeypatch, entry, refusal):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(registry.RegistryError, match=rf"^config key own_checkpoints\.{refusal}"):
        _load(tmp_path, {"mine": {"path": str(_checkpoint(tmp_path)), **entry}})


@pytest.mark.slow
def test_snakemake_refuses_a_missing_checkpoint_naming_the_key(tmp_path):
    (tmp_path / "own.yaml").write_text(
        yaml.safe_dump(
            {"own_checkpoints": {"mine": {**OWN["own_checkpoints"]["mine"], "path": str(tmp_path / "gone")}}}
        )
    )
    done = snakemake(
        ROOT, TARGET, "-n", *TOY, "--configfiles", "profiles/local/toy.yaml", str(tmp_path / "own.yaml")
    )
    assert done.returncode != 0
    assert f"own_checkpoints.mine.path: {tmp_path / 'gone'}: no such folder" in done.stdout + done.stderr


@pytest.fixture(scope="module")
def own_run(toy_run, tmp_path_factory) -> tuple[Path, list[str]]:
    """A copy of the toy run with a trained checkpoint copied out of results/ and configured as
    ``mine``, its target built: (working directory, the rules Snakemake planned)."""
    workdir = copy_workdir(toy_run, tmp_path_factory.mktemp("own") / "rpb-repro")
    shutil.copytree(workdir / TRAINED, workdir / FOLDER, ignore=shutil.ignore_patterns(SNAKEMAKE_FLAG))
    profile = with_overlay(workdir, OWN)
    rules = sorted(job.rule for job in planned_jobs(profile, TARGET, cwd=workdir))
    snakemake_ok(workdir, TARGET, *profile)
    return workdir, rules


@pytest.mark.slow
def test_only_the_own_checkpoints_jobs_run(own_run):
    _, rules = own_run
    assert rules == sorted(["generate", "score", "probe_routes", "retention", "table", "provenance_manifest"])


@pytest.mark.slow
def test_its_row_holds_every_benchmark_its_aggregates_and_retention(own_run, toy_config):
    workdir, _ = own_run
    cells = _cells(workdir / "results/tables/own_checkpoints.csv")
    own = cells[cells["condition"] == "own/mine"].set_index("column")
    config = toy_config  # the run's, less the own checkpoint (whose folder is relative to the run)
    assert sorted(own.index) == sorted(columns(config))
    assert (own["source"] == registry.OWN).all() and (own["corpus"] == "math20k").all()
    summary = json.loads((workdir / SUMMARY).read_text())
    for benchmark, entry in summary["benchmarks"].items():
        assert own.at[benchmark, "value"] == _written(entry["score"])
        assert own.at[benchmark, "sd"] == _written(entry["repeat_sd"])
    nine = [name for name, spec in config["benchmarks"].items() if spec["overall9"]]
    overall9 = sum(summary["benchmarks"][name]["score"] for name in nine) / len(nine)
    assert own.at["overall9", "value"] == _written(overall9)
    assert all(math.isfinite(own.at[column, "value"]) for column in AGGREGATES)
    metrics = json.loads((workdir / METRICS).read_text())["summary"]
    for column in RETENTION:
        assert own.at[column, "value"] == _written(metrics[RETENTION_KEYS[column]])
    assert (own["status"] == "unpublished").all()


@pytest.mark.slow
def test_the_papers_rows_stand_beside_it(own_run):
    workdir, _ = own_run
    cells = _cells(workdir / "results/tables/own_checkpoints.csv")
    paper = cells[cells["source"] != registry.OWN]
    assert set(paper["source"]) == {"table16", "table18"} and set(paper["model"]) == {"moonlight"}
    assert set(paper["corpus"]) == {"", "math20k"}  # the base rows and the checkpoint's corpus only
    assert (paper["status"] == "missing").all()
    published = pd.read_csv(ROOT / "reference/table18.csv", keep_default_na=False)
    row = published[(published["corpus"] == "math20k") & (published["condition"] == "rpb")].iloc[0]
    ours = paper[
        (paper["source"] == "table18") & (paper["condition"] == "rpb") & (paper["column"] == row["column"])
    ]
    assert ours["paper"].item() == _written(float(row["value"]))
    markdown = (workdir / "results/tables/own_checkpoints.md").read_text()
    assert "| Moonlight-16B-A3B | Own checkpoint | math20k | mine |" in markdown
    assert "| Moonlight-16B-A3B | Paper, Table 18 | math20k | RPB |" in markdown


@pytest.mark.slow
def test_the_audit_holds_and_names_an_edited_checkpoint_file(own_run):
    workdir, _ = own_run
    record = json.loads(
        (workdir / "results/evals/moonlight/own/mine/generations.provenance.json").read_text()
    )
    (listed,) = [d for d in record["inputs"].values() if isinstance(d, dict) and d.get("path") == FOLDER]
    assert listed["sha256"] == path_digest(workdir / FOLDER)["sha256"]
    done = project_cli(workdir, "provenance", "audit", registry.OWN_TABLE)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    config = workdir / FOLDER / "config.json"
    original = config.read_bytes()
    config.write_bytes(original + b"\n")
    try:
        done = project_cli(workdir, "provenance", "audit", registry.OWN_TABLE)
    finally:
        config.write_bytes(original)
    assert done.returncode == 2
    assert f"MISMATCH file {FOLDER}:" in done.stdout


REPEATS = 5


def _write_results(config: dict, results: Path, rng: np.random.Generator) -> dict[str, dict]:
    """Random repeat scores of every benchmark and retention summaries for each own checkpoint."""
    scores = {}
    for evaluation in registry.closure(config, registry.OWN_TABLE).evaluations:
        scores[evaluation.condition] = {name: rng.uniform(0, 100, REPEATS) for name in config["benchmarks"]}
        benchmarks = {
            name: {"score": s.mean(), "repeat_scores": s.tolist(), "repeat_sd": s.std(ddof=1), "items": 9}
            for name, s in scores[evaluation.condition].items()
        }
        identity = {key: getattr(evaluation, key) for key in ("model", "corpus", "condition", "seed")}
        summary = {**identity, "repeats": REPEATS, "benchmarks": benchmarks}
        write_json(layout.summary_path(results, evaluation), summary)
        probe = registry.Probe(evaluation.model, evaluation.corpus, evaluation.condition, None)
        retention = {key: float(rng.uniform(0, 1)) for key in RETENTION_KEYS.values()}
        write_json(layout.metrics_path(results, probe), {"summary": retention})
        scores[evaluation.condition]["retention"] = retention
        write_json(layout.partition_path(results, probe.model, probe.corpus), {})  # declared, not read
    return scores


def test_the_table_computes_each_row_from_its_files_and_sets_the_papers_rows_beside(tmp_path):
    checkpoint = str(_checkpoint(tmp_path))
    own = {
        "mine": {"model": "moonlight", "corpus": "math20k", "path": checkpoint},
        "theirs": {"model": "deepseek_v2_lite", "corpus": "coding20k", "path": checkpoint},
    }
    config = _load(tmp_path, own)
    results = tmp_path / "results"
    scores = _write_results(config, results, np.random.default_rng(3))
    out = {kind: tmp_path / f"own.{kind}" for kind in ("csv", "md", "tex")}
    inputs = dag_inputs.report_inputs(config, registry.OWN_TABLE, ROOT)
    declared = declared_files(config, registry.OWN_TABLE, results)
    argv = ["report", "table", "--id", registry.OWN_TABLE, "--results", str(results)]
    argv += [
        "--config",
        dag_inputs.report_config(config, registry.OWN_TABLE),
        "--inputs",
        *map(str, declared),
    ]
    argv += ["--paper-rows", *(str(ROOT / path) for path in inputs["paper_rows"])]
    argv += [f"--{kind}={path}" for kind, path in out.items()]
    assert cli_main(argv) == 0
    cells = _cells(out["csv"])

    nine = [name for name, spec in config["benchmarks"].items() if spec["overall9"]]
    for name, entry in own.items():
        run = scores[f"own/{name}"]
        row = cells[cells["condition"] == f"own/{name}"].set_index("column")
        domain = config["corpora"][entry["corpus"]]["domain"]
        in_domain = [b for b in nine if config["benchmarks"][b]["family"] == domain]
        out_domain = [b for b in nine if b not in in_domain]
        per_repeat = {
            "overall9": np.mean([run[b] for b in nine], axis=0),
            "id": np.mean([run[b] for b in in_domain], axis=0),
            "ood": np.mean([run[b] for b in out_domain], axis=0),
        }
        for column, values in per_repeat.items():
            assert row.at[column, "value"] == _written(values.mean())
            assert row.at[column, "sd"] == _written(values.std(ddof=1))
        for benchmark in config["benchmarks"]:
            assert row.at[benchmark, "value"] == _written(run[benchmark].mean())
        for column in RETENTION:
            assert row.at[column, "value"] == _written(run["retention"][RETENTION_KEYS[column]])
        assert (row["model"] == entry["model"]).all() and (row["n"] == 0).all()

    paper = cells[cells["source"] != registry.OWN]
    sources = paper.groupby("source")["model"].unique().map(list).to_dict()
    assert sources == {
        "table16": ["moonlight"],
        "table17": ["deepseek_v2_lite"],
        "table18": ["moonlight"],
        "table19": ["deepseek_v2_lite"],
    }
    corpora = paper.groupby("model")["corpus"].unique().map(set).to_dict()
    assert corpora == {"moonlight": {"", "math20k"}, "deepseek_v2_lite": {"", "coding20k"}}
    assert "avg12" not in set(paper["column"])  # Table 16's twelve-benchmark Avg is no column here
    table17 = load_reference(ROOT / "reference/table17.csv")
    base_gsm8k = table17[(table17["condition"] == "base") & (table17["column"] == "gsm8k")]["value"].item()
    shown = paper[
        (paper["source"] == "table17") & (paper["condition"] == "base") & (paper["column"] == "gsm8k")
    ]
    assert shown["paper"].item() == _written(base_gsm8k)
    markdown = out["md"].read_text()
    assert "| DeepSeek-V2-Lite | Paper, Table 17 |  | Base |" in markdown
