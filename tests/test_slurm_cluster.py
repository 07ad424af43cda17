"""The pipeline through a real SLURM cluster: the two emulated 8-GPU nodes of tests/cluster/slurm.sh.

The toy closure of Table 14's within-hard cell on one corpus (a training, the base probe, shuffled
priors, a generation, its scores, the table) runs through the SLURM executor with the paper
profile in one copy of the checkout and through the local profile in another. sacct must then
show every job with its rule's request from the paper profile, the outputs must match byte for
byte, no SLURM job may have run in the local fork server, and the Megatron launch check must get
two nodes with one torchrun each, its srun step the rule's CPUs and GPUs, plainly and with
training.container set (a stand-in for apptainer, tests/cluster/bin/apptainer, stands for
NVIDIA's image: no SLURM inside it).
Run by tests/run_slurm.sh, which brings the cluster up and always tears it down.

The CI cluster's account and partition reach the jobs through a second profile layered after the
paper one: the paper profile's whole ``default-resources`` and ``set-resources`` blocks with its
placeholders replaced by the cluster's account and partition (a later profile, like
``--default-resources`` on the command line, replaces a block as a whole). Everything else is the
paper profile as shipped, with two command-line overrides (CI_FLAGS).

Preflight (workflow_scripts/preflight) runs against the real cluster too: failing on the shipped
placeholders, a missing partition and an unreachable hub, passing with the CI profile and a
stand-in hub (tests/hub_server.py, through ``HF_ENDPOINT``), its srun jobs on the emulated GPU
nodes, and as the first step of every ``--profile slurm`` run: a failure submits nothing, and a
run that starts again reruns no job for it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.dag import (
    JOB_ENV,
    ROOT,
    SHORT_BASE,
    copy_checkout,
    copy_workdir,
    overlay_configfiles,
    with_overlay,
)
from tests.dag import snakemake as run_snakemake
from tests.hub_server import TOKEN, HubServer, pinned_overlay, repos_of_config
from tests.slurm_ci import (
    PROFILE,
    Cluster,
    Run,
    ci_blocks,
    command,
    running_cluster,
    sacct,
    snakemake,
    write_ci_profile,
)
from workflow_scripts.train.megatron import ownership
from workflow_scripts.train.megatron.launch import rendezvous_port

pytestmark = pytest.mark.slurm

TABLE = "table14"
#: Table 14's within-hard cell on one corpus (a shuffled prior, a training, a generation and its
#: scores, the base probe behind the shuffle): 36 jobs instead of 63.
ONE_CELL = {
    **SHORT_BASE,
    "tables": {
        TABLE: {
            "title": "Decomposition of prior hardness and shuffle scope on Moonlight-16B-A3B",
            "cells": [
                {
                    "models": ["moonlight"],
                    "corpora": ["math20k"],
                    "conditions": ["within_hard"],
                    "eval_seeds": [42],
                }
            ],
        }
    },
}
TARGET = f"results/tables/{TABLE}.csv"
LAUNCH_CHECK = "results/megatron/launch_check.txt"
PAPER_PROFILE = Path("profiles/slurm/config.yaml")
# What only a one-machine CI cluster needs. No conda here, and env-modules would load the stage
# venvs of tests/run_environments.sh; no rule of these targets names a container (training.container
# is null), so apptainer deploys nothing and jobs run in this interpreter's environment (PATH).
# Status checks after 2 s and every 2 s, instead of 40 s and every 10 s: toy jobs take seconds, and
# a chain of ten rules waited up to ten checks.
CI_FLAGS = [
    *("--sdm", "apptainer"),
    *("--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2"),
]
# The launch check at two nodes of two gloo ranks each: torchrun on CPU starts that many processes.
TWO_NODES = {"training": {"parallelism": {"nodes": 2, "gpus_per_node": 2}}}
# The container form: an empty file as the image, run by the stand-in for apptainer first on PATH.
STAND_IN = Path("tests/cluster/bin")
# Provenance fields that describe the run rather than the result: a SLURM and a local run differ there.
RUN_FIELDS = ("started_utc", "wall_seconds", "slurm_job_id")
TIMEOUT = 1800


def tres(text: str) -> dict[str, float]:
    """sacct's TRES list (``cpu=16,gres/gpu=1,mem=240000M,node=1``) with memory in MB."""
    scale = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}
    values = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=", 1)
        values[key] = float(value[:-1]) * scale[value[-1]] if key == "mem" else float(value)
    return values


def minutes(limit: str) -> int:
    """sacct's Timelimit ``[days-]hours:minutes:seconds`` in minutes."""
    days, _, clock = limit.rpartition("-")
    hours, mins, _ = clock.split(":")
    return int(days or 0) * 1440 + int(hours) * 60 + int(mins)


def requested(profile: dict, rule: str) -> dict:
    """The resources the paper profile gives ``rule``: its default-resources under its set-resources."""
    return {**profile["default-resources"], **profile["set-resources"].get(rule, {})}


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return running_cluster()


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> Path:
    """One copy of the checkout for every run to copy: edits to the tree during the runs reach none."""
    return copy_checkout(tmp_path_factory.mktemp("snapshot") / "rpb-repro")


def workdir(snapshot: Path, tmp_path_factory) -> Path:
    return copy_workdir(snapshot, tmp_path_factory.mktemp("run") / "rpb-repro")


@pytest.fixture(scope="module")
def paper(snapshot) -> dict:
    return yaml.safe_load((snapshot / PAPER_PROFILE).read_text())


@pytest.fixture(scope="module")
def ci_profile(cluster, paper, tmp_path_factory) -> Path:
    """The second profile: the paper profile's resource blocks with the CI account and partition."""
    return write_ci_profile(tmp_path_factory.mktemp("ci_profile"), paper, cluster)


@pytest.fixture(scope="module")
def slurm_run(snapshot, ci_profile, tmp_path_factory) -> Run:
    profiles = ["--profile", PROFILE, "--profile", str(ci_profile)]
    work = workdir(snapshot, tmp_path_factory)
    return snakemake(work, TARGET, *profiles, *overlay_configfiles(work, ONE_CELL), *CI_FLAGS)


@pytest.fixture(scope="module")
def local_run(snapshot, slurm_run, tmp_path_factory) -> Run:
    """The same target through the local profile, after the SLURM run so that the timings do not overlap."""
    work = workdir(snapshot, tmp_path_factory)
    return snakemake(work, TARGET, *with_overlay(work, ONE_CELL))


@pytest.fixture(scope="module")
def slurm_jobs(slurm_run) -> list[dict[str, str]]:
    return slurm_run.jobs()


def failed_attempts(run: Run, jobs: list[dict[str, str]]) -> str:
    """Each allocation that did not complete, with the end of its SLURM log."""
    return "\n\n".join(
        f"job {job['JobID']} ({job['Comment']}): {job['State']} {job['ExitCode']} on {job['NNodes']} "
        f"node(s):\n{run.slurm_log(job['JobID'])}"
        for job in jobs
        if job["State"] != "COMPLETED"
    )


def test_every_job_ran_under_slurm_with_its_rules_profile_request(slurm_run, slurm_jobs, cluster, paper):
    """Every planned job completed under SLURM, at its first attempt, with its rule's request.

    The paper profile resubmits a failed job once (``retries: 1``), so the run succeeds over a
    failed attempt: a failure is judged here, with its SLURM log and Snakemake's error paragraphs
    (a generation spread over two nodes failed once in CI and completed on its resubmission).
    """
    planned = slurm_run.job_counts()
    assert {"train_local", "probe_routes", "generate", "score", "table"} <= set(planned)
    failed = failed_attempts(slurm_run, slurm_jobs)
    assert not failed, f"{failed}\n\n{slurm_run.errors()}"
    assert Counter(job["rule"] for job in slurm_jobs) == planned, slurm_run.errors()
    for job in slurm_jobs:
        want = requested(paper, job["rule"])
        asked, got = tres(job["ReqTRES"]), tres(job["AllocTRES"])
        where = f"job {job['JobID']} ({job['Comment']})"
        assert job["ExitCode"] == "0:0", where
        assert (job["Account"], job["Partition"]) == (cluster.account, cluster.partition), where
        assert minutes(job["Timelimit"]) == want["runtime"], where
        assert asked["cpu"] == want["cpus_per_task"], where
        assert asked["mem"] == want["mem_mb"], where
        assert asked.get("gres/gpu", 0) == want.get("gpu", 0), where
        assert job["NNodes"] == "1", where  # no rule of this target asks for more (a Megatron run would)
        assert {key: got.get(key, 0) for key in ("cpu", "gres/gpu")} == {
            key: asked.get(key, 0) for key in ("cpu", "gres/gpu")
        }, where
    # Every output's provenance names the SLURM job that wrote it.
    job_ids = {job["JobID"] for job in slurm_jobs}
    records = list((slurm_run.workdir / "results").rglob("*provenance.json"))
    assert records
    for path in records:
        assert json.loads(path.read_text())["slurm_job_id"] in job_ids, path
    print(f"\n{len(slurm_jobs)} SLURM jobs of run {slurm_run.run_id()}: {dict(sorted(planned.items()))}")


def comparable(path: Path) -> bytes | list:
    """The file's bytes, or for a provenance record and a training log the content without timings."""
    if path.name.endswith("provenance.json"):
        record = {key: value for key, value in json.loads(path.read_text()).items() if key not in RUN_FIELDS}
        # A training log's checksum moves with its per-step timings (compared below without them).
        record["outputs"] = {
            name: {"path": entry["path"]} if str(entry.get("path", "")).endswith(".log.jsonl") else entry
            for name, entry in record.get("outputs", {}).items()
        }
        return [record]
    if path.name.endswith(".log.jsonl"):
        steps = [json.loads(line) for line in path.read_text().splitlines()]
        return [{key: value for key, value in step.items() if key != "seconds"} for step in steps]
    return path.read_bytes()


def test_outputs_match_a_local_run_byte_for_byte(slurm_run, local_run):
    def outputs(run: Run) -> set[Path]:
        return {
            path.relative_to(run.workdir) for path in (run.workdir / "results").rglob("*") if path.is_file()
        }

    names = outputs(slurm_run)
    assert names == outputs(local_run)
    for required in (f"results/tables/{TABLE}.csv", f"results/tables/{TABLE}.md"):
        assert Path(required) in names
    assert any(name.name == "summary.json" for name in names)
    different = []
    for name in sorted(names):
        ours, theirs = slurm_run.workdir / name, local_run.workdir / name
        if ours.read_bytes() != theirs.read_bytes():
            assert comparable(ours) == comparable(theirs), name
            different.append(name)
    # Only run records (provenance timings and job ids) and training logs' step timings may differ.
    assert all(name.name.endswith(("provenance.json", ".log.jsonl")) for name in different)
    print(
        f"\n{len(names)} outputs: {len(names) - len(different)} byte-identical, "
        f"{len(different)} equal without their timings: {', '.join(sorted({n.name for n in different}))}"
    )


def test_no_slurm_job_ran_in_the_fork_server(slurm_run, local_run):
    """The toy overlay starts the fork server; the plugin exports its socket to every SLURM job."""
    local_log = (local_run.workdir / "logs/forkserver.log").read_text()
    assert " served python -m workflow_scripts" in local_log  # the log shows what the server runs
    log = slurm_run.workdir / "logs/forkserver.log"
    if log.exists():  # no server at all is fine too
        lines = log.read_text().splitlines()
        assert not [line for line in lines if " served " in line]
        # The jobs did reach the server (one machine, one /tmp) and were turned away.
        assert [line for line in lines if " refused " in line and "slurm_job" in line]


@pytest.mark.parametrize("form", ["plain", "container"])
def test_launch_check_spans_two_nodes_with_one_torchrun_each(
    form, snapshot, paper, ci_profile, tmp_path_factory
):
    work = workdir(snapshot, tmp_path_factory)
    overlay, env = dict(TWO_NODES), JOB_ENV
    if form == "container":
        image = work / "megatron-stand-in.sif"
        image.touch()
        overlay = {"training": {**TWO_NODES["training"], "container": str(image)}}
        log = work / "apptainer.log"
        env = {
            **JOB_ENV,
            "PATH": f"{work / STAND_IN}{os.pathsep}{JOB_ENV['PATH']}",
            "RPB_APPTAINER_LOG": str(log),
        }
    (work / "two_nodes.yaml").write_text(yaml.safe_dump(overlay))
    profiles = ["--profile", PROFILE, "--profile", str(ci_profile)]
    flags = [*profiles, "--configfiles", "two_nodes.yaml", *CI_FLAGS, "--verbose"]
    run = snakemake(work, LAUNCH_CHECK, *flags, env=env)
    # The executor's request: both nodes, one task per node, the rule's GPUs per node.
    submitted = shlex.split(re.search(r"sbatch call: (.*?) --wrap=", run.output).group(1))
    assert {"--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--gres=gpu:2"} <= set(submitted), submitted
    (job,) = sacct(
        "--allocations",
        "--name",
        run.run_id(),
        "--starttime",
        run.started,
        fields=("JobID", "State", "NNodes", "NodeList", "ReqTRES"),
    )
    assert (job["State"], job["NNodes"]) == ("COMPLETED", "2")
    asked = tres(job["ReqTRES"])
    assert (asked["node"], asked["gres/gpu"]) == (2, 4)
    # The srun step: one task on each node with the rule's CPUs per task and GPUs per node (the
    # plugin strips SLURM_CPUS_PER_TASK, so srun's default would be one CPU per task).
    cpus = requested(paper, "megatron_launch_check")["cpus_per_task"]
    steps = sacct("--jobs", job["JobID"], fields=("JobName", "NNodes", "NTasks", "NodeList", "AllocTRES"))
    step_name = "apptainer" if form == "container" else "torchrun"
    (step,) = [step for step in steps if step["JobName"] == step_name]
    assert (step["NNodes"], step["NTasks"], step["NodeList"]) == ("2", "2", job["NodeList"]), steps
    step_tres = tres(step["AllocTRES"])
    assert (step_tres["cpu"], step_tres.get("gres/gpu")) == (2 * cpus, 4), step
    hosts = command("scontrol", "show", "hostnames", job["NodeList"]).split()
    head = hosts[0]
    launch = (run.workdir / "logs/megatron/launch_check.log").read_text()
    port = rendezvous_port(job["JobID"])
    assert f"--rdzv-endpoint={head}:{port} --rdzv-id={job['JobID']} " in launch, launch
    assert f"--cpus-per-task={cpus} --gres=gpu:2 " in launch, launch
    # The report: every rank with its node rank, local rank and container, one node rank on each node.
    lines = (run.workdir / LAUNCH_CHECK).read_text().splitlines()
    world = re.fullmatch(r"world 4 rendezvous (\S+):(\d+) backend gloo", lines[0])
    assert world, lines[0]
    rank_line = re.compile(
        r"rank (\d) node_rank (\d) local_rank (\d) host \S+ slurm_node (\S+) cpus \d+ container (\S+)"
    )
    ranks = [rank_line.fullmatch(line) for line in lines[1:]]
    assert all(ranks), lines
    assert [int(rank[1]) for rank in ranks] == [0, 1, 2, 3]
    placement = {(int(rank[2]), int(rank[3])): rank[4] for rank in ranks}
    assert sorted(placement) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert placement[0, 0] == placement[0, 1] != placement[1, 0] == placement[1, 1]
    assert {placement[0, 0], placement[1, 0]} == set(hosts)
    # torchrun's worker address is node rank 0's own name; here every node name resolves to this machine.
    assert socket.gethostbyname(world[1]) == socket.gethostbyname(head)
    if form == "container":
        # srun on the host, then each node's torchrun inside the image (with the GPUs), never srun in it.
        assert f" --gres=gpu:2 apptainer exec --nv {image} torchrun --nnodes=2 " in launch, launch
        assert {rank[5] for rank in ranks} == {str(image.resolve())}
        execs = log.read_text().splitlines()
        assert len(execs) == 2 and all(" nv=1 step=0 " in line for line in execs), execs
        assert {line.split(" node=")[1].split()[0] for line in execs} == set(hosts)
        assert all(line.split(" command=")[1].startswith("torchrun ") for line in execs), execs
    else:
        assert {rank[5] for rank in ranks} == {"none"}
    print(f"\nlaunch check, {form} (job {job['JobID']} on {job['NodeList']}):\n" + "\n".join(lines))


def test_slurm_overhead_per_job(slurm_run, local_run):
    """Printed, not asserted: wall time per job through SLURM and locally (with the fork server)."""
    jobs = sum(slurm_run.job_counts().values())
    assert jobs == sum(local_run.job_counts().values())
    per_slurm, per_local = slurm_run.seconds / jobs, local_run.seconds / jobs
    print(
        f"\n{TABLE}: {jobs} jobs; SLURM {slurm_run.seconds:.0f} s ({per_slurm:.1f} s/job), "
        f"local {local_run.seconds:.0f} s ({per_local:.1f} s/job); "
        f"overhead {per_slurm - per_local:+.1f} s/job"
    )


def _holder_job(work: Path, cluster: Cluster) -> str:
    """A real SLURM job that takes ``work`` as a training's launch does, then runs on (an orphan)."""
    take = f"from workflow_scripts.train.megatron.ownership import take; take({str(work)!r})"  # as a launch
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(take)} && sleep 300"
    job = command(
        "sbatch", "--parsable", f"--account={cluster.account}", f"--partition={cluster.partition}",
        "--time=10", f"--chdir={ROOT}", f"--output={work.parent / 'holder.out'}",
        f"--export=ALL,PYTHONPATH={ROOT}", f"--wrap={script}",
    ).strip().split(";")[0]  # fmt: skip
    deadline = time.monotonic() + 120
    while not (work / "owner.json").is_file():
        assert time.monotonic() < deadline, f"SLURM job {job} did not take {work}"
        time.sleep(0.5)
    return job


def test_a_training_never_shares_its_work_folder_with_a_live_job(cluster, tmp_path):
    """A resubmitted training's launch refuses while an orphan holds it; once it ended, it is free."""
    work = tmp_path / "work"
    work.mkdir()
    job = _holder_job(work, cluster)
    launch = [sys.executable, "-m", "workflow_scripts", "train", "megatron-launch", "--nodes", "1"]
    launch += ["--gpus-per-node", "1", "--", "train", "megatron", "--work", str(work)]
    env = {**JOB_ENV, "PYTHONPATH": str(ROOT)}
    env.pop("SLURM_JOB_ID", None)
    try:
        refused = subprocess.run(launch, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stderr
        assert f"{work} is held by SLURM job {job} on " in refused.stderr
        assert "RUNNING" in refused.stderr and f"scancel {job}" in refused.stderr
    finally:
        command("scancel", job)
    deadline = time.monotonic() + 120
    while ownership.state(ownership.Holder(job, "", 0)):
        assert time.monotonic() < deadline, f"SLURM job {job} did not end"
        time.sleep(0.5)
    ownership.take(work)  # the orphan has ended: the folder is free


# ---------------------------------------------------------------------------------------- preflight

# A small toy target: the generated GLM-5.1 rows and the math corpus built from them (two jobs).
CORPUS = "results/data/math20k/train.parquet"
CHECK = re.compile(r"^(ok|FAIL|skipped) +([^:]+): (.*)$", re.MULTILINE)
TOY_OVERLAY = ["--overlay", "profiles/local/toy.yaml"]


def preflight(work: Path, *args: str, env: dict[str, str] = JOB_ENV) -> subprocess.CompletedProcess:
    """``python -m workflow_scripts preflight *args`` in ``work``, with the cluster's real SLURM commands."""
    command = [sys.executable, "-m", "workflow_scripts", "preflight", *args]
    return subprocess.run(
        command, cwd=work, env={**env, "PYTHONPATH": str(work)}, capture_output=True, text=True, timeout=600
    )


def checklist(text: str) -> dict[str, tuple[str, str]]:
    return {match[2]: (match[1], match[3]) for match in CHECK.finditer(text)}


@pytest.fixture(scope="module")
def paper_config(snapshot) -> dict:
    from workflow_scripts import registry

    return registry.load_config([snapshot / "config.yaml"])


def accounted(job_ids: list[str], fields: tuple[str, ...]) -> list[dict[str, str]]:
    """sacct's allocation rows of ``job_ids``, once slurmdbd has recorded them ended.

    slurmdbd lags slurmctld: a job of srun that has just ended can show first as a bare record
    (name ``allocation``, no partition), completed a moment later.
    """
    deadline = time.monotonic() + 60
    while True:
        jobs = sacct("--allocations", "--jobs", ",".join(job_ids), fields=("State", "Partition", *fields))
        ended = [job for job in jobs if job["State"] not in ("PENDING", "RUNNING") and job["Partition"]]
        if len(ended) == len(job_ids):
            return [{key: job[key] for key in ("State", *fields)} for job in ended]
        assert time.monotonic() < deadline, f"sacct has not recorded jobs {job_ids}: {jobs}"
        time.sleep(1)


def paper_overlay(work: Path, config: dict) -> list[str]:
    """Every hub revision a commit the stand-in hub knows; Megatron trainings on the two 8-GPU nodes here."""
    overlay = {**pinned_overlay(config), "training": {"parallelism": {"nodes": 2}}}
    (work / "pinned.yaml").write_text(yaml.safe_dump(overlay))
    return ["--overlay", "pinned.yaml"]


def test_preflight_fails_on_the_shipped_placeholders(snapshot, cluster, tmp_path_factory):
    work = workdir(snapshot, tmp_path_factory)
    done = preflight(work, TABLE, *TOY_OVERLAY, "--profile", PROFILE)
    found = checklist(done.stdout)
    assert done.returncode == 2, done.stdout + done.stderr
    status, detail = found["SLURM account your_account"]
    assert status == "FAIL" and "profiles/slurm/config.yaml: default-resources.slurm_account" in detail
    assert cluster.account in detail  # sacctmgr's answer: the accounts this user may use
    status, detail = found["SLURM partition your_partition"]
    assert status == "FAIL" and "profiles/slurm/config.yaml: default-resources.slurm_partition" in detail
    assert f"the cluster's: {cluster.partition}" in detail
    assert done.stderr.strip().splitlines()[-1].startswith("error: preflight: ")
    print("\n" + done.stdout)


def test_preflight_fails_on_a_missing_partition(snapshot, cluster, paper, tmp_path_factory):
    work = workdir(snapshot, tmp_path_factory)
    blocks = ci_blocks(paper, cluster)
    generate = {**blocks["set-resources"]["generate"], "slurm_partition": "h200-long"}
    blocks["set-resources"]["generate"] = generate
    (work / "site.yaml").write_text(yaml.safe_dump(blocks))
    done = preflight(work, TABLE, *TOY_OVERLAY, "--profile", PROFILE, "--profile", "site.yaml")
    status, detail = checklist(done.stdout)["SLURM partition h200-long"]
    assert done.returncode == 2 and status == "FAIL"
    assert detail == (
        f"does not exist (site.yaml: set-resources.generate.slurm_partition); "
        f"the cluster's partitions: {cluster.partition}"
    )
    assert checklist(done.stdout)[f"SLURM partition {cluster.partition}"][0] == "ok"


def test_preflight_fails_when_the_hub_is_unreachable(snapshot, ci_profile, paper_config, tmp_path_factory):
    """From this host and from a compute node (a real srun job on the CPU partition)."""
    work = workdir(snapshot, tmp_path_factory)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    env = {**JOB_ENV, "HF_ENDPOINT": url, "HF_TOKEN": TOKEN, "HF_HOME": str(work / "hf")}
    profiles = ["--profile", PROFILE, "--profile", str(ci_profile)]
    done = preflight(
        work, "table5", *paper_overlay(work, paper_config), *profiles, "--nodes-reach-hub", env=env
    )
    found = checklist(done.stdout)
    assert done.returncode == 2, done.stdout + done.stderr
    status, detail = found["Hugging Face hub"]
    assert status == "FAIL" and f"{url} is unreachable" in detail
    status, detail = found["compute nodes reach the hub"]
    assert status == "FAIL" and f"{url} is unreachable on node" in detail and "(job " in detail, detail
    failed = {name for name, (status, _) in found.items() if status == "FAIL"}
    assert failed - {"disk"} == {"Hugging Face hub", "compute nodes reach the hub"}


def test_preflight_passes_with_the_clusters_account_and_partition(
    snapshot, cluster, ci_profile, paper_config, tmp_path_factory
):
    """Paper scale, Table 5: every check passes or is skipped by choice; the node check ran as a SLURM job."""
    work = workdir(snapshot, tmp_path_factory)
    profiles = ["--profile", PROFILE, "--profile", str(ci_profile)]
    with HubServer(repos_of_config(paper_config)) as hub:
        env = {**JOB_ENV, "HF_ENDPOINT": hub.url, "HF_TOKEN": TOKEN, "HF_HOME": str(work / "hf")}
        done = preflight(
            work, "table5", *paper_overlay(work, paper_config), *profiles, "--nodes-reach-hub", env=env
        )
    found = checklist(done.stdout)
    # Everything passes but the disk where this machine has less free than Table 5's 2 TB.
    disk_status = found["disk"][0]
    assert disk_status == "ok" or "put results/ on a larger filesystem" in found["disk"][1]
    assert done.returncode == (0 if disk_status == "ok" else 2), done.stdout + done.stderr
    skipped = {name for name, (status, _) in found.items() if status == "skipped"}
    assert skipped == {"SLURM QOS", "GPU software"}, skipped
    assert {status for name, (status, _) in found.items() if name != "disk"} == {"ok", "skipped"}
    assert found["GPUs of train_megatron"][1].startswith(
        f"2 nodes x 8 GPUs (config.yaml training.parallelism) on {cluster.partition}"
    )
    assert found["hub revisions"] == ("ok", "all 14 are commits")
    assert hub.url in found["compute nodes reach the hub"][1]
    job_id = re.search(r"\(job (\d+)\)", found["compute nodes reach the hub"][1])[1]
    (job,) = accounted([job_id], fields=("JobName", "Account", "Partition"))
    assert job == {
        "State": "COMPLETED",
        "JobName": "rpb-preflight-hub",
        "Account": cluster.account,
        "Partition": cluster.partition,
    }
    print("\n" + done.stdout)


def test_preflight_gpu_check_runs_a_one_gpu_job_per_environment(
    snapshot, cluster, ci_profile, tmp_path_factory
):
    """This interpreter stands for both environments: it lacks their packages; the emulated GPUs are files."""
    work = workdir(snapshot, tmp_path_factory)
    python = ["--megatron-python", sys.executable, "--eval-python", sys.executable]
    done = preflight(
        work, TABLE, *TOY_OVERLAY, "--profile", PROFILE, "--profile", str(ci_profile), "--gpu", *python
    )
    found = checklist(done.stdout)
    assert done.returncode == 2
    job_ids = []
    for name, modules in (("Megatron", ("megatron.bridge", "transformer_engine")), ("evaluation", ("vllm",))):
        status, detail = found[f"GPU software ({name})"]
        assert status == "FAIL" and all(f"{module} not importable" in detail for module in modules), detail
        assert "no CUDA device" in detail
        job_ids.append(re.search(r"\(job (\d+)\)", detail)[1])
    jobs = accounted(job_ids, fields=("JobName", "Account", "Partition", "AllocTRES"))
    for job in jobs:  # one GPU of the cluster's partition, under the profile's account
        assert (job["JobName"], job["Account"], job["Partition"]) == (
            "rpb-preflight-gpu",
            cluster.account,
            cluster.partition,
        )
        assert tres(job["AllocTRES"])["gres/gpu"] == 1, job


def test_a_slurm_run_with_the_placeholders_stops_before_any_sbatch(snapshot, tmp_path_factory):
    work = workdir(snapshot, tmp_path_factory)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    args = [CORPUS, "--profile", PROFILE, *overlay_configfiles(work, SHORT_BASE), *CI_FLAGS, "--verbose"]
    done = run_snakemake(work, *args, timeout=TIMEOUT, stderr_into_stdout=True)
    assert done.returncode != 0
    found = checklist(done.stdout)
    assert found["SLURM account your_account"][0] == "FAIL"
    assert "WorkflowError" in done.stdout and "preflight: " in done.stdout[-3000:]
    assert "sbatch call" not in done.stdout
    run_id = re.search(r"SLURM run ID: (\S+)", done.stdout)
    if run_id:
        assert sacct("--name", run_id[1], "--starttime", started, fields=("JobID",)) == []
    assert not (work / CORPUS).exists()


def test_preflight_runs_first_at_every_start_and_reruns_no_job(snapshot, ci_profile, tmp_path_factory):
    """A hook, not a job: a second start checks again, and only the job whose output was removed reruns."""
    work = workdir(snapshot, tmp_path_factory)
    profiles = ["--profile", PROFILE, "--profile", str(ci_profile)]
    args = [CORPUS, *profiles, *overlay_configfiles(work, SHORT_BASE), *CI_FLAGS, "--verbose"]
    first = snakemake(work, *args)
    header = first.output.index("preflight of the run's targets")
    assert header < first.output.index("sbatch call"), "the checklist comes before the first sbatch"
    assert first.job_counts() == Counter({"generate_toy_dataset": 1, "build_corpus": 1})
    (work / CORPUS).unlink()
    second = snakemake(work, *args)
    assert second.output.index("preflight of the run's targets") < second.output.index("sbatch call")
    assert second.job_counts() == Counter({"build_corpus": 1})
