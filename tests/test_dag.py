"""The DAG derived from the registry: dry runs at paper and toy scale."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import load_config
from tests.dag import PAPER, ROOT, TOY, PlannedJob, dry_run, planned_jobs, printed_job, wildcard_values
from workflow_scripts import dag_inputs, registry

pytestmark = pytest.mark.slow  # Snakemake dry runs of every shipped config


@pytest.fixture(scope="module")
def paper_plan():
    return planned_jobs(PAPER)


@pytest.fixture(scope="module")
def paper_all(paper_plan):
    return [(job.rule, job.wildcards) for job in paper_plan]


def _ancestor_outputs(jobs: list[PlannedJob], files: list[str]) -> set[str]:
    """Every file the jobs behind ``files`` write: what Snakemake has made before a job reading them runs."""
    producer = {output: job for job in jobs for output in job.outputs}
    made, pending = set(), list(files)
    while pending:
        job = producer.get(pending.pop())
        if job is not None and not made.issuperset(job.outputs):
            made.update(job.outputs)
            pending.extend(job.inputs)
    return made


@pytest.mark.parametrize("toy", [False, True], ids=["paper", "toy"])
def test_every_file_a_manifest_checksums_is_built_before_it(toy, request):
    """The manifest's Snakemake inputs are its output's files; the rest of what it checksums (the
    closure's stage files) must be written by their ancestors, or it could run before them."""
    jobs = planned_jobs(TOY) if toy else request.getfixturevalue("paper_plan")
    config = load_config(toy=toy)
    manifests = [job for job in jobs if job.rule == "provenance_manifest"]
    assert sorted(job.wildcards["output"] for job in manifests) == sorted(registry.outputs(config))
    for job in manifests:
        made = _ancestor_outputs(jobs, job.inputs)
        missing = sorted(set(dag_inputs.closure_inputs(config, job.wildcards["output"])) - made)
        assert not missing, f"{job.wildcards['output']}: {missing[:5]}"
    table1 = next(job for job in manifests if job.wildcards["output"] == "table1")
    assert not any("/checkpoints/" in path for path in _ancestor_outputs(jobs, table1.inputs))


def test_paper_scale_builds_every_data_target(paper_all):
    assert wildcard_values(paper_all, "build_corpus", "corpus") == [
        "coding20k",
        "general",
        "math20k",
        "openr1math",
    ]
    downloads = sorted((w["dataset"], w["subset"]) for r, w in paper_all if r == "download_dataset")
    assert downloads == [("glm51", "Math"), ("glm51", "main"), ("openr1", "default")]
    assert not [r for r, _ in paper_all if r == "generate_toy_dataset"]
    config = load_config(toy=False)
    assert wildcard_values(paper_all, "provenance_manifest", "output") == sorted(registry.outputs(config))


@pytest.mark.parametrize(
    ("target", "corpora"),
    [
        ("table5", ["coding20k", "math20k"]),
        ("table4", ["coding20k", "math20k", "openr1math"]),
        ("table11", ["coding20k", "general", "math20k"]),
        ("figure2", ["math20k"]),
        ("table1", []),
    ],
)
def test_single_table_pulls_only_its_corpora(target, corpora):
    jobs = dry_run(PAPER, f"results/provenance/{target}.json")
    assert wildcard_values(jobs, "build_corpus", "corpus") == corpora
    assert wildcard_values(jobs, "provenance_manifest", "output") == [target]
    expected_subsets = {
        ("openr1", "default") if c == "openr1math" else ("glm51", "Math" if c == "math20k" else "main")
        for c in corpora
    }
    assert {(w["dataset"], w["subset"]) for r, w in jobs if r == "download_dataset"} == expected_subsets


def test_toy_scale_generates_instead_of_downloading():
    jobs = dry_run(TOY)
    generated = sorted((w["dataset"], w["subset"]) for r, w in jobs if r == "generate_toy_dataset")
    assert generated == [("glm51", "Math"), ("glm51", "main"), ("openr1", "default")]
    assert not [r for r, _ in jobs if r == "download_dataset"]


def test_invalid_config_fails_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    cell = "{models: [moonlight], corpora: [math20k], conditions: [rbp], eval_seeds: [42]}"
    bad.write_text(f"tables:\n  table5:\n    cells:\n      - {cell}\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--dry-run",
            *TOY,
            "--configfiles",
            "profiles/local/toy.yaml",
            str(bad),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert (
        "config key tables.table5.cells[0].conditions: unknown condition 'rbp'" in done.stdout + done.stderr
    )


def trainings(jobs):
    return sorted(
        (w["model"], w["corpus"], w["condition"], int(w["seed"])) for r, w in jobs if r == "train_local"
    )


def test_toy_table2_trains_exactly_its_caption_at_one_seed_per_cell():
    jobs = dry_run(TOY, "results/provenance/table2.json")
    expected = sorted(
        ("moonlight", corpus, condition, 42)
        for corpus in ("math20k", "coding20k")
        for condition in ("sft", "lbl", "rpb")
    )
    assert trainings(jobs) == expected
    assert sorted((w["model"], w["corpus"]) for r, w in jobs if r == "prior") == [
        ("moonlight", "coding20k"),
        ("moonlight", "math20k"),
    ]
    assert wildcard_values(jobs, "toy_base_model", "model") == ["moonlight"]


def test_toy_table5_trains_probes_and_shuffles_its_cells():
    jobs = dry_run(TOY, "results/provenance/table5.json")
    assert {condition for _, _, condition, _ in trainings(jobs)} == {
        "rpb",
        "within_soft",
        "within_hard",
        "global_hard",
    }
    assert len(trainings(jobs)) == 2 * 4
    retained = sorted((w["corpus"], w["run"]) for r, w in jobs if r == "retention")
    expected = [
        (c, f"{k}/s42")
        for c in ("math20k", "coding20k")
        for k in ("rpb", "within_soft", "within_hard", "global_hard")
    ]
    assert retained == sorted(expected)
    assert sorted(w["corpus"] for r, w in jobs if r == "shuffled_priors") == ["coding20k", "math20k"]
    assert sorted(w["corpus"] for r, w in jobs if r == "base_partition") == ["coding20k", "math20k"]


def test_toy_table11_probes_the_bases_only():
    jobs = dry_run(TOY, "results/provenance/table11.json")
    assert trainings(jobs) == []
    assert not [r for r, _ in jobs if r == "prior"]
    probed = sorted((w["model"], w["corpus"], w["run"]) for r, w in jobs if r == "probe_routes")
    assert probed == [
        (m, c, "base") for m in ("moonlight", "qwen3_30b") for c in ("coding20k", "general", "math20k")
    ]


def test_paper_scale_all_trains_every_cell_on_megatron_with_the_allocation_of_the_config(paper_all):
    """``all`` at paper scale: every registry training is a Megatron job on the configured allocation."""
    config = load_config(toy=False)
    expected = set()
    for output in registry.outputs(config):
        expected |= {
            (t.model, t.corpus, t.condition, t.seed) for t in registry.closure(config, output).trainings
        }
    trained = {
        (w["model"], w["corpus"], w["condition"], int(w["seed"]))
        for r, w in paper_all
        if r == "train_megatron"
    }
    assert trained == expected and len(trained) == 119  # the claims' frozen-bias variants are toy-only
    exported = {
        (w["model"], w["corpus"], w["condition"], int(w["seed"]))
        for r, w in paper_all
        if r == "export_megatron"
    }
    assert exported == expected
    assert not [r for r, _ in paper_all if r == "train_local"]
    assert wildcard_values(paper_all, "megatron_import", "model") == sorted(config["models"])
    assert wildcard_values(paper_all, "provenance_manifest", "output") == sorted(registry.outputs(config))


def test_a_one_node_training_job_is_no_mpi_job():
    """The SLURM plugin refuses an MPI job of one task; it runs the job in a step of its own instead."""
    check = "results/megatron/launch_check.txt"
    overlay = ("--configfiles", registry.REHEARSAL_OVERLAY)
    resources, command = printed_job(check, "megatron_launch_check", *overlay)
    assert "nodes=1" in resources and "tasks=1" in resources and "mpi=" not in resources
    assert "megatron-launch --nodes 1 --gpus-per-node 8" in command


def test_paper_training_job_requests_the_configured_nodes_and_launches_one_torchrun_per_node():
    config = load_config(toy=False)
    parallelism = config["training"]["parallelism"]
    resources, command = printed_job("results/megatron/trained/moonlight/math20k/rpb/s42", "train_megatron")
    assert f"nodes={parallelism['nodes']}" in resources and f"tasks={parallelism['nodes']}" in resources
    # Several nodes: an MPI job, which the SLURM plugin does not wrap in a one-task step of its own.
    assert parallelism["nodes"] > 1 and "mpi=srun" in resources
    assert f"gres=gpu:{parallelism['gpus_per_node']}" in resources
    assert "--launcher srun" in command
    assert "tasks_per_gpu=0" in resources and "--ntasks-per-node=1" in resources
    assert (
        f"megatron-launch --nodes {parallelism['nodes']} --gpus-per-node {parallelism['gpus_per_node']}"
        in command
    )
    assert "-- train megatron --hf-base results/models/moonlight/base" in command


@pytest.mark.parametrize(
    ("target", "rule"),
    [
        ("results/megatron/moonlight/base", "megatron_import"),
        ("results/checkpoints/moonlight/math20k/rpb/s42", "export_megatron"),
    ],
)
def test_paper_import_and_export_run_on_one_gpu(target, rule):
    """Both build the model in one process with CUDA state and Transformer Engine's layers."""
    resources, _ = printed_job(target, rule)
    assert re.search(r"\bgpu=1\b", resources), resources


def test_with_a_container_srun_stays_on_the_host_and_each_torchrun_runs_in_the_image(tmp_path):
    """NVIDIA's image has no SLURM: the launch rules are not wrapped in it, their ranks enter it."""
    overlay = tmp_path / "container.yaml"
    overlay.write_text("training:\n  container: envs/megatron.sif\n")
    extra = ("--configfiles", "config.yaml", str(overlay))
    target = "results/megatron/trained/moonlight/math20k/rpb/s42"
    _, launch = printed_job(target, "train_megatron", *extra)
    assert launch.startswith("Shell command: python -m workflow_scripts train megatron-launch ")
    assert " --launcher srun --container envs/megatron.sif -- train megatron " in launch
    _, check = printed_job("results/megatron/launch_check.txt", "megatron_launch_check", *extra)
    assert check.startswith("Shell command: python -m workflow_scripts train megatron-launch ")
    assert " --container envs/megatron.sif -- train megatron-rendezvous " in check
    containers = rule_containers(extra[1:])
    assert containers["train_megatron"] is containers["megatron_launch_check"] is None
    assert containers["megatron_import"] == containers["export_megatron"] == "envs/megatron.sif"
    assert containers["megatron_claim"] == "envs/megatron.sif"  # its one process runs in the image


# Prints each rule's container: directive as Snakemake parsed it (argv: the config files).
_RULE_CONTAINERS = """
import sys
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, ResourceSettings

with SnakemakeApi() as api:
    files = [Path(path) for path in sys.argv[1:]]
    config = ConfigSettings(configfiles=files)
    workflow = api.workflow(ResourceSettings(), config, snakefile=Path("Snakefile"))
    for rule in workflow._workflow.rules:
        print(f"container {rule.name}={rule.container_img or ''}")
"""


def rule_containers(configfiles: tuple[str, ...]) -> dict[str, str | None]:
    """The ``container:`` each rule declares under ``configfiles`` (``None``: it has none)."""
    command = [sys.executable, "-c", _RULE_CONTAINERS, *configfiles]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.findall(r"^container (\w+)=(.*)$", done.stdout, re.MULTILINE)
    return {rule: image or None for rule, image in found}


def test_paper_scale_all_downloads_generates_and_scores_every_evaluated_cell(paper_all):
    """Every evaluation of the registry: a vLLM generation job, then a grading job, on hub benchmarks."""
    config = load_config(toy=False)
    expected = set()
    for output in registry.outputs(config):
        expected |= {
            f"{e.model}/base" if e.corpus is None else f"{e.model}/{e.corpus}/{e.condition}/s{e.seed}"
            for e in registry.closure(config, output).evaluations
        }
    for rule in ("generate", "score"):
        assert {f"{w['model']}/{w['evaluated']}" for r, w in paper_all if r == rule} == expected
    assert wildcard_values(paper_all, "download_benchmark", "benchmark") == sorted(config["benchmarks"])
    assert not [r for r, _ in paper_all if r == "toy_benchmark"]


def test_paper_generation_job_runs_vllm_on_one_eight_gpu_node():
    resources, command = printed_job("results/evals/moonlight/base/generations.parquet", "generate")
    assert re.search(r"\bgpu=8\b", resources)
    assert "--backend vllm" in command and "--data-parallel 8" in command


def test_rules_take_every_result_path_from_the_layout():
    """One definition of result paths: no rule types a ``results/...`` pattern of its own."""
    typed = re.compile(r"""f?["']results/[^"']*\{""")
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted((ROOT / "rules").glob("*.smk"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if typed.search(line)
    ]
    assert found == [], "use workflow_scripts.layout.rule_path:\n" + "\n".join(found)
