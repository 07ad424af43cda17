"""The rehearsal (profiles/rehearsal) end to end, as a cluster user runs it first, on the CI's SLURM cluster.

``snakemake --profile slurm --profile <site> --profile profiles/rehearsal`` in a copy of the checkout:
preflight first, then its default target through the SLURM executor, every rule in its stage's
environment through ``--sdm env-modules`` (the Megatron rules in the Megatron env, ``.venv-megatron``;
generation in the eval env with vLLM's CPU build, ``.venvs/eval``; data, training and analysis
in their venvs, ``.venvs/<stage>``). The hub is a stand-in (tests/rehearsal_sources.py): the
three bases, real-architecture toy checkpoints with their families' tokenizers, served over HTTP
under their real repository ids and cut by the download; the sources and benchmarks read from
dataset folders in their hubs' layouts.

What differs from a cluster's rehearsal is what a CPU needs (CPU_OVERLAY): the stand-ins' sizes
(for the plan too, whose disk estimate preflight checks), one training process
(tests/megatron_cpu_shim's adaptations on the Megatron jobs' PYTHONPATH), vLLM's CPU engine, and
the toy's scoring, whose generated rows the paper's length bands would rank by task.
Run by ``RPB_REHEARSAL=1 tests/run_slurm.sh``, which builds the environments it lacks.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.dag import JOB_ENV, ROOT, copy_checkout, dry_run, link_stage_envs
from tests.hub_server import TOKEN, HubServer, pinned_overlay, repos_of_config
from tests.rehearsal_sources import ARCHITECTURES, SPECS, build_base, served_models, write_sources
from tests.slurm_ci import JOB_FIELDS, PROFILE, Run, running_cluster, snakemake, write_ci_profile
from tests.stage_envs import environments_of_run
from workflow_scripts import registry

pytestmark = pytest.mark.rehearsal

#: Each stage's environment, as the CI builds them: the Megatron env (tests/build_megatron_env.sh),
#: the eval env with vLLM's CPU build and the other stage envs as venvs (tests/build_stage_envs.sh).
STAGE_ENVS = {
    "megatron": ROOT / ".venv-megatron",
    **{stage: ROOT / ".venvs" / stage for stage in ("data", "train", "eval", "analysis")},
}
MODULES_INIT = Path("/usr/share/modules/init/bash")
#: A preflight checklist line: its status and what it checked.
CHECK = re.compile(r"^(ok|FAIL|skipped) +([^:]+): ", re.MULTILINE)
SHIM = ROOT / "tests" / "megatron_cpu_shim"
TOY = yaml.safe_load((ROOT / "profiles/local/toy.yaml").read_text())
#: vLLM's CPU engine for the MLA stand-ins (tests/test_evaluate_vllm.py says why each setting).
CPU_ENGINE = {
    "dtype": "float32",
    "max_model_len": 1024,
    "enforce_eager": True,
    "kv_cache_memory_bytes": 1 << 28,
    "attention_backend": "CPU_MLA",
    "compilation_config": {"custom_ops": ["all", "-rotary_embedding"]},
}
ONE_PROCESS = {"nodes": 1, "gpus_per_node": 1, "tensor": 1, "pipeline": 1, "context": 1, "expert": 1,
               "expert_tensor": 1, "sequence_parallel": False, "recompute_modules": []}  # fmt: skip
CPU_OVERLAY = {
    "models": {
        model: {
            "experts": spec["num_experts"],
            "top_k": spec["top_k"],
            "shared_experts": spec["shared_experts"],
        }
        for model, spec in SPECS.items()
    },
    "scoring": TOY["scoring"],
    # The stand-ins' sizes for the plan, whose disk estimate preflight checks (a few million parameters).
    "compute": {
        "total_parameters_billion": dict.fromkeys(SPECS, 0.01),
        "active_parameters_billion": dict.fromkeys(SPECS, 0.01),
    },
    "corpora": {name: {"probe_tokens": 2000} for name in TOY["corpora"]},
    "training": {"sequence_length": 288, "precision": "fp32", "parallelism": ONE_PROCESS},
    "prior": {"batch_size": 16},
    "evaluation": {
        "max_new_tokens": 48,
        "data_parallel": 1,
        "grading_workers": 1,
        "engine": CPU_ENGINE,
        "sandbox": TOY["evaluation"]["sandbox"],
    },
}
#: The run's config files, in order: what the audit compares the records with.
FILES = (registry.CONFIG_FILE, registry.REHEARSAL_OVERLAY, "ci_overlay.yaml")
REHEARSAL = [
    *("--profile", PROFILE, "--profile", "{site}", "--profile", "profiles/rehearsal"),
    *("--configfiles", registry.REHEARSAL_OVERLAY, "ci_overlay.yaml"),
    *("--sdm", "env-modules"),
    *("--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2"),
]


def _missing() -> str:
    if shutil.which("sbatch") is None:
        return "no SLURM (tests/run_slurm.sh brings the CI cluster up)"
    absent = [
        str(env.relative_to(ROOT)) for env in STAGE_ENVS.values() if not (env / "bin" / "python").exists()
    ]
    if absent:
        return f"no stage environment {', '.join(absent)}: tests/run_slurm.sh builds them"
    if not MODULES_INIT.exists():
        return "Environment Modules not installed (Debian: environment-modules)"
    return ""


def merged(*parts: dict) -> dict:
    """Overlays merged in order, as the registry merges config files."""
    config: dict = {}
    for part in parts:
        registry.merge_config(config, json.loads(json.dumps(part)))
    return config


#: ``RPB_VENVS`` of the run: links in the repository's ignored ``.venvs``, not under /tmp, which the
#: scoring sandbox replaces by an empty directory (an interpreter reached through it could not start).
STAGE_LINKS = ROOT / ".venvs" / "rehearsal-links"


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory) -> Run:
    missing = _missing()
    if missing:
        pytest.skip(missing)
    root = tmp_path_factory.mktemp("rehearsal")
    work = copy_checkout(root / "rpb-repro")
    shipped = registry.load_config([work / registry.CONFIG_FILE, work / registry.REHEARSAL_OVERLAY])
    overlay = merged(CPU_OVERLAY, write_sources(work, shipped))
    config = merged(shipped, overlay)
    overlay = merged(overlay, pinned_overlay(config))
    (work / "ci_overlay.yaml").write_text(yaml.safe_dump(overlay))
    bases = {model: build_base(model, root / "bases" / model) for model in ARCHITECTURES}
    paper = yaml.safe_load((work / "profiles/slurm/config.yaml").read_text())
    site = write_ci_profile(root / "site", paper, running_cluster())
    repos = [repo for repo in repos_of_config(config) if repo.kind != "model"] + served_models(config, bases)
    with HubServer(repos) as hub:
        env = {
            **JOB_ENV,
            "HF_ENDPOINT": hub.url,
            "HF_TOKEN": TOKEN,
            "HF_HOME": str(root / "hf"),
            # Every job's bash defines `module` (Environment Modules) and finds the stage modules.
            "BASH_ENV": str(MODULES_INIT),
            "MODULEPATH": str(work / "envs" / "modules"),
            "RPB_VENVS": str(link_stage_envs(STAGE_LINKS, STAGE_ENVS)),
            "PYTHONPATH": str(SHIM),
        }
        return snakemake(work, *(arg.format(site=site) for arg in REHEARSAL), env=env, timeout=3000)


def _seconds_by_rule(jobs: list[dict[str, str]]) -> str:
    """Each rule's SLURM jobs, their summed and longest run time: where the rehearsal's time went."""
    seconds: dict[str, list[int]] = {}
    for job in jobs:
        seconds.setdefault(job["rule"], []).append(int(job["ElapsedRaw"]))
    ranked = sorted(seconds.items(), key=lambda item: -sum(item[1]))
    return "\n".join(f"  {rule:24} {len(s):3} jobs {sum(s):6} s (longest {max(s)} s)" for rule, s in ranked)


def test_the_rehearsal_runs_its_default_target_through_slurm(rehearsal):
    planned = rehearsal.job_counts()
    jobs = rehearsal.jobs((*JOB_FIELDS, "ElapsedRaw"))
    counts = dict(sorted(planned.items()))
    print(f"\nrehearsal: {sum(planned.values())} jobs in {rehearsal.seconds:.0f} s: {counts}")
    print(f"SLURM jobs' run time by rule:\n{_seconds_by_rule(jobs)}")
    wanted = Counter(rule for rule, _ in dry_run(["--profile", "profiles/rehearsal"], cwd=ROOT))
    assert set(planned) == set(wanted)
    completed = Counter(job["rule"] for job in jobs if job["State"] == "COMPLETED")
    local = {"download_dataset", "download_model", "download_benchmark", "provenance_manifest", "rehearsal"}
    for rule, count in planned.items():
        if rule not in local:
            assert completed[rule] == count, rule


def test_every_job_ran_in_its_stages_environment(rehearsal):
    """Each job's record names the interpreter of its rule's stage (tests/stage_envs.py), and every
    stage's environment ran at least one job."""
    assert environments_of_run(rehearsal.workdir / "results", STAGE_LINKS) == set(STAGE_ENVS)


def test_the_preempted_trainings_failed_once_and_resumed_in_their_retry(rehearsal):
    config = registry.load_config([rehearsal.workdir / name for name in FILES])
    preempted = config["training"]["preempt"]["conditions"]
    jobs = [job for job in rehearsal.jobs() if job["rule"] == "train_megatron"]
    states = Counter(job["State"] for job in jobs)
    assert states == {"FAILED": len(preempted), "COMPLETED": 10}, states
    records = sorted((rehearsal.workdir / "results/megatron/trained").rglob("*.record.json"))
    assert len(records) == 10
    for path in records:
        record = json.loads(path.read_text())
        condition = path.parent.name
        assert record["steps"] == 8, path
        assert record["resumed_from"] == ([0, 4] if condition in preempted else [0]), path


def test_the_bases_were_cut_to_their_dense_layers_and_two_moe_layers(rehearsal):
    for model, spec in SPECS.items():
        manifest = json.loads((rehearsal.workdir / f"results/models/{model}/manifest.json").read_text())
        config = json.loads((rehearsal.workdir / f"results/models/{model}/base/config.json").read_text())
        assert config["num_hidden_layers"] == spec["first_dense_layers"] + 2, model
        assert manifest["cut"]["source_layers"] == spec["num_layers"], model


def test_the_evaluated_run_is_scored_and_the_outputs_audit_clean(rehearsal):
    summary = rehearsal.workdir / "results/evals/moonlight/math20k/rpb_selection_only/s42/summary.json"
    assert json.loads(summary.read_text())
    for output in ("figure2", "table13"):
        done = subprocess.run(
            [sys.executable, "-m", "workflow_scripts", "provenance", "audit", output,
             "--config-files", *FILES],
            cwd=rehearsal.workdir, env=JOB_ENV, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_preflight_ran_first_and_passed(rehearsal):
    checks = CHECK.findall(rehearsal.output)
    assert {status for status, _ in checks} <= {"ok", "skipped"}, checks
    assert {("ok", "Hugging Face hub"), ("ok", "hub revisions"), ("ok", "disk")} <= set(checks), checks
