"""The SLURM profile asks what the compute plan says each rule needs (``plan profile``).

profiles/slurm/config.yaml is written from the plan: every rule of the workflow has a request
there or runs on the submit host; no rule's runtime is below the plan's upper estimate of its
longest job; GPU rules go to the GPU partition and CPU-only rules to a CPU partition, each set
once; and the file is what ``plan profile`` writes from the shipped config, so a change of
config.yaml that moves a request fails here until the profile is regenerated.
"""

from __future__ import annotations

import copy
import math
import re

import pytest
import yaml

from tests.conftest import ROOT
from workflow_scripts import slurm_profile
from workflow_scripts.cli import main
from workflow_scripts.compute_plan import plan

PROFILE = ROOT / "profiles/slurm/config.yaml"
RULE = re.compile(r"^rule (\w+):", re.MULTILINE)
LOCALRULES = re.compile(r"^localrules:\n((?:    \w+,?\n)+)", re.MULTILINE)


def workflow_rules() -> set[str]:
    rules = set()
    for path in sorted((ROOT / "rules").glob("*.smk")):
        rules |= set(RULE.findall(path.read_text()))
    return rules


def local_rules() -> set[str]:
    found = set()
    for path in sorted((ROOT / "rules").glob("*.smk")):
        for block in LOCALRULES.findall(path.read_text()):
            found |= {name.strip(" ,") for name in block.splitlines()}
    return found


@pytest.fixture(scope="module")
def profile() -> dict:
    return yaml.safe_load(PROFILE.read_text())


@pytest.fixture(scope="module")
def requests(_paper_config) -> dict[str, slurm_profile.Request]:
    return {request.rule: request for request in slurm_profile.requests(_paper_config)}


def test_every_rule_has_a_request_or_runs_on_the_submit_host(profile):
    assert local_rules() == set(slurm_profile.LOCAL_RULES)
    assert {"download_dataset", "download_model", "download_benchmark"} <= local_rules()
    asked = set(profile["set-resources"])
    assert not asked & local_rules()
    assert asked | local_rules() == workflow_rules() - {"all"}


def test_no_runtime_is_below_the_plans_upper_estimate(profile, requests):
    """The profile's runtime of each rule covers its longest job at the high end of every range."""
    assert slurm_profile.short_runtimes(profile, list(requests.values())) == []
    for rule, request in requests.items():
        assert profile["set-resources"][rule]["runtime"] >= request.upper_minutes, rule


def test_a_runtime_lowered_below_the_plan_is_caught(profile, requests):
    lowered = copy.deepcopy(profile)
    upper = requests["generate"].upper_minutes
    lowered["set-resources"]["generate"]["runtime"] = math.floor(upper) - 1
    short = slurm_profile.short_runtimes(lowered, list(requests.values()))
    assert len(short) == 1 and short[0].startswith("generate: runtime ")
    del lowered["set-resources"]["generate"]["runtime"]  # the default's 60 min is shorter still
    assert slurm_profile.short_runtimes(lowered, list(requests.values()))


def test_the_profile_is_what_plan_profile_writes(_paper_config):
    """Regenerate with `python -m workflow_scripts plan profile` after changing config.yaml."""
    found = slurm_profile.requests(_paper_config)
    assert slurm_profile.render(_paper_config, found, slurm_profile.read_site(PROFILE)) == PROFILE.read_text()


def test_gpu_rules_on_the_gpu_partition_cpu_rules_on_a_cpu_partition_each_set_once(profile, requests):
    text = PROFILE.read_text()
    default = profile["default-resources"]
    assert (default["slurm_account"], default["slurm_partition"]) == ("your_account", "your_partition")
    cpu_partition = "your_cpu_partition"
    assert text.count(f'"{cpu_partition}"') == 1 and text.count("&cpu_partition") == 1
    for rule, resources in profile["set-resources"].items():
        gpus = requests[rule].gpus if rule in requests else 0
        if gpus:
            assert "slurm_partition" not in resources, rule  # the default: the GPU partition
        else:
            assert resources["slurm_partition"] == cpu_partition, rule
            assert "gpu" not in resources, rule
    for rule in ("score", "megatron_claim", "retention", "build_corpus", "table"):
        assert profile["set-resources"][rule]["slurm_partition"] == cpu_partition
    for rule in ("generate", "prior", "probe_routes", "likelihood", "megatron_import", "export_megatron"):
        assert profile["set-resources"][rule]["gpu"] == requests[rule].gpus >= 1


def test_every_gpu_job_the_rule_does_not_place_asks_for_one_node(profile):
    """``--gpus=8`` alone let the CI cluster spread a generation over two nodes, whose one task
    then could not start its step ("Invalid generic resource (gres) specification")."""
    for rule, resources in profile["set-resources"].items():
        if "gpu" in resources:
            assert rule not in slurm_profile.ALLOCATION_RULES
            assert resources["nodes"] == 1, rule
        else:
            assert "nodes" not in resources, rule


def test_trainings_ask_what_the_plan_says_they_need(_paper_config, profile):
    """Per node of an exclusive training: its ranks, the prior and its share of a save; not 1.6 TB, 48 h."""
    planned = plan(_paper_config, "all", {"openr1math": 94000})
    jobs = [job for job in planned.jobs if job.rule == "train_megatron"]
    training = profile["set-resources"]["train_megatron"]
    need = max(job.memory_gb for job in jobs)
    assert training["mem_mb"] == 1000 * math.ceil(1.25 * need)
    assert training["mem_mb"] < 400_000
    assert training["cpus_per_task"] == 8 * 8
    upper = max(job.wall.high for job in jobs) / 60
    assert upper <= training["runtime"] <= upper * 1.25 + 10 + 5
    assert "gpu" not in training  # nodes, tasks and GPUs come from the rule (MEGATRON_ALLOCATION)


@pytest.mark.slow
def test_plan_profile_keeps_the_site_values_and_check_names_a_short_runtime(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "config.yaml"
    site = PROFILE.read_text().replace('"your_account"', '"rpb"').replace('"your_partition"', '"h200"')
    out.write_text(site.replace('"your_cpu_partition"', '"cpu"'))
    assert main(["plan", "profile", "--out", str(out)]) == 0
    written = yaml.safe_load(out.read_text())
    default = written["default-resources"]
    assert (default["slurm_account"], default["slurm_partition"]) == ("rpb", "h200")
    assert written["set-resources"]["score"]["slurm_partition"] == "cpu"
    assert main(["plan", "profile", "--out", str(out), "--check"]) == 0
    capsys.readouterr()
    out.write_text(re.sub(r"(  generate:\n    runtime: )\d+", r"\g<1>5", out.read_text()))
    assert main(["plan", "profile", "--out", str(out), "--check"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: generate: runtime 5 min, the plan's upper estimate ")
    assert "is not what `plan profile` writes" in error
