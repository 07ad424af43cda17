"""Preflight's checklist (issue 31, item 1) against stand-ins at its two boundaries, without a cluster.

The SLURM side runs the real command against executable ``sinfo``/``sacctmgr``/``srun`` stubs on
``PATH`` that print what SLURM 22.05 prints for the exact arguments preflight passes (captured on
the CI's one-machine cluster, tests/cluster/slurm.sh) and refuse any others. The hub side runs
``huggingface_hub``'s own client against a local HTTP stand-in of the hub's API
(tests/hub_server.py) through ``HF_ENDPOINT``. The same checks against a real SLURM cluster:
tests/test_slurm_cluster.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.hub_server import TOKEN, USER, HubServer, Repo, commit_of, pinned_overlay, repos_of_config
from workflow_scripts import compute_plan, hub
from workflow_scripts.preflight import checklist, disk, profiles, slurm, targets

TOY = ["--config", str(ROOT / "config.yaml"), "--overlay", str(ROOT / "profiles/local/toy.yaml")]
PAPER_PROFILE = ROOT / "profiles/slurm/config.yaml"
# sinfo --noheader --format='%P|%a|%D|%G' of a site: a CPU partition (the default, starred), an H200
# one in two groups of nodes (one line per distinct set of the fields asked), and one that is down.
PARTITIONS = """\
cpu*|up|4|(null)
h200|up|14|gpu:h200:8(S:0-1)
h200|up|2|gpu:h200:8(S:0-1)
maint|down|1|gpu:h200:8(S:0-1)
"""
# sacctmgr --noheader --parsable2 show associations user=U format=account,partition,qos
ASSOCIATIONS = """\
rpb_ci||normal,high
teaching|cpu|normal
"""
LINE = re.compile(r"^(ok|FAIL|skipped) +([^:]+): (.*)$")


def stub(folder: Path, name: str, expected: str, output: str, status: int = 0, stderr: str = "") -> None:
    """An executable ``name`` that prints ``output`` for arguments matching the bash pattern ``expected``.

    Shell builtins only: the tests put nothing but the stubs on ``PATH``.
    """
    script = f"""#!/bin/bash
if [[ "$*" != {expected} ]]; then echo "{name} stub: unexpected arguments: $*" >&2; exit 64; fi
printf '%s' {shlex.quote(output)}
printf '%s' {shlex.quote(stderr)} >&2
exit {status}
"""
    path = folder / name
    path.write_text(script)
    path.chmod(0o755)


def srun_stub(folder: Path) -> None:
    """``srun``: records its arguments, drops its ``--option=value`` ones and runs the command here."""
    path = folder / "srun"
    path.write_text(
        f"""#!/bin/bash
echo "$*" >> {shlex.quote(str(folder / "srun.log"))}
while [[ "$1" == --* ]]; do shift; done
SLURM_JOB_ID=4242 SLURM_GPUS_ON_NODE=1 exec "$@"
"""
    )
    path.chmod(0o755)


@pytest.fixture()
def site(tmp_path) -> Path:
    """A folder of SLURM stubs of a healthy site."""
    folder = tmp_path / "bin"
    folder.mkdir()
    stub(folder, "sinfo", "'--noheader --format=%P|%a|%D|%G'", PARTITIONS)
    stub(
        folder,
        "sacctmgr",
        "'--noheader --parsable2 show associations user='*' format=account,partition,qos'",
        ASSOCIATIONS,
    )
    srun_stub(folder)
    return folder


def profile(tmp_path: Path, name: str, content: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump(content, sort_keys=False))
    return folder


#: What a user writes over the shipped profile's placeholders at this site.
SITE_VALUES = {"your_account": "rpb_ci", "your_partition": "h200", "your_cpu_partition": "cpu"}


def filled(value, values: dict = SITE_VALUES):
    """``value`` (a profile's block) with every placeholder replaced by this site's value."""
    if isinstance(value, dict):
        return {key: filled(item, values) for key, item in value.items()}
    return values.get(value, value) if isinstance(value, str) else value


def site_profile(tmp_path: Path, **resources) -> Path:
    """The paper profile's resource blocks with this site's account and partitions, to layer after it.

    ``resources`` replace default-resources entries.
    """
    paper = yaml.safe_load(PAPER_PROFILE.read_text())
    default = {**filled(paper["default-resources"]), **resources}
    return profile(
        tmp_path, "site", {"default-resources": default, "set-resources": filled(paper["set-resources"])}
    )


def preflight(tmp_path: Path, *args: str, path: Path | None, env: dict | None = None):
    """``python -m workflow_scripts preflight *args`` in the checkout, with only ``path`` on PATH."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HF_", "SLURM_", "RPB_")) and key != "PATH"
    }
    environment |= {"PATH": str(path) if path else "/nonexistent", "HF_HOME": str(tmp_path / "hf")}
    environment |= {"PYTHONPATH": str(ROOT), **(env or {})}
    # This test's own lock file (none unless a test writes it), not the checkout's hub.lock.yaml.
    lock = ["--lock", str(tmp_path / "hub.lock.yaml")]
    command = [
        sys.executable,
        "-m",
        "workflow_scripts",
        "preflight",
        *args,
        *lock,
        "--results",
        str(tmp_path / "results"),
    ]
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)


def checks(done: subprocess.CompletedProcess) -> dict[str, tuple[str, str]]:
    """The checklist: check name -> (status, detail); every line of stdout after the first is one."""
    found = {}
    for line in done.stdout.splitlines()[1:]:
        match = LINE.match(line)
        assert match, f"not a checklist line: {line!r}\n{done.stdout}"
        found[match[2]] = (match[1], match[3])
    return found


def test_the_shipped_placeholders_fail_naming_the_profile_file_and_key(tmp_path, site):
    done = preflight(tmp_path, "table5", *TOY, "--profile", "slurm", path=site)
    assert done.returncode == 2, done.stderr
    found = checks(done)
    status, detail = found["SLURM account your_account"]
    assert status == "FAIL"
    assert "profiles/slurm/config.yaml" in detail and "default-resources.slurm_account" in detail
    assert "rpb_ci" in detail  # the accounts sacctmgr lists for this user
    status, detail = found["SLURM partition your_partition"]
    assert status == "FAIL"
    assert "profiles/slurm/config.yaml" in detail and "default-resources.slurm_partition" in detail
    assert "cpu, h200, maint" in detail
    # The last line names what to fix: every FAIL of the checklist (the CPU partition's placeholder too).
    error = done.stderr.strip().splitlines()[-1]
    failed = [name for name, (status, _) in found.items() if status == "FAIL"]
    assert error.startswith(f"error: preflight: {len(failed)} checks failed: {', '.join(failed)}; ")
    assert {"SLURM account your_account", "SLURM partition your_partition"} <= set(failed)
    assert all(name.startswith(("SLURM account your_", "SLURM partition your_")) for name in failed)


def test_a_profile_naming_the_sites_account_and_partition_passes(tmp_path, site):
    own = site_profile(tmp_path)
    done = preflight(tmp_path, "table5", *TOY, "--profile", "slurm", "--profile", str(own), path=site)
    assert done.returncode == 0, done.stdout + done.stderr
    found = checks(done)
    assert found["SLURM commands"][0] == "ok"
    assert found["SLURM account rpb_ci"][0] == "ok"
    status, detail = found["SLURM partition h200"]
    assert status == "ok" and "16 nodes" in detail
    assert found["SLURM QOS"] == ("skipped", "none requested (the association's default applies)")
    # Every rule the paper profile gives GPUs, on the partition the layered profiles give it.
    gpu_rules = {
        rule: values["gpu"]
        for rule, values in yaml.safe_load(PAPER_PROFILE.read_text())["set-resources"].items()
        if values.get("gpu")
    }
    assert {"prior", "probe_routes", "generate"} <= set(gpu_rules)
    for rule, gpus in gpu_rules.items():
        status, detail = found[f"GPUs of {rule}"]
        assert status == "ok" and f"{gpus} on h200" in detail, detail
    # Toy scale: no hub repository, so the hub's checks have nothing to do.
    assert found["Hugging Face hub"][0] == "skipped"
    assert found["GPU software"][0] == "skipped" and "--gpu" in found["GPU software"][1]
    assert found["compute nodes reach the hub"][0] == "skipped"
    assert done.stdout.splitlines()[0].startswith("preflight of table5")


def test_a_missing_partition_fails_naming_where_it_is_set(tmp_path, site):
    own = site_profile(tmp_path)
    gpu = profile(
        tmp_path, "gpu", {"set-resources": {"generate": {"slurm_partition": "h200-long", "gpu": 8}}}
    )
    done = preflight(tmp_path, "table5", *TOY, "--profile", str(own), "--profile", str(gpu), path=site)
    assert done.returncode == 2
    status, detail = checks(done)["SLURM partition h200-long"]
    assert status == "FAIL" and "does not exist" in detail and "cpu, h200, maint" in detail
    assert f"{gpu / 'config.yaml'}: set-resources.generate.slurm_partition" in detail
    assert checks(done)["GPUs of generate"][0] == "skipped"  # on a partition that does not exist


def test_a_partition_that_is_down_fails(tmp_path, site):
    done = preflight(
        tmp_path, "table5", *TOY, "--profile", str(site_profile(tmp_path, slurm_partition="maint")), path=site
    )
    status, detail = checks(done)["SLURM partition maint"]
    assert done.returncode == 2 and status == "FAIL" and "down" in detail


def test_an_account_the_user_has_no_association_with_fails(tmp_path, site):
    done = preflight(
        tmp_path, "table5", *TOY, "--profile", str(site_profile(tmp_path, slurm_account="physics")), path=site
    )
    status, detail = checks(done)["SLURM account physics"]
    assert done.returncode == 2 and status == "FAIL"
    assert "no association" in detail and "rpb_ci, teaching" in detail


def test_an_account_limited_to_other_partitions_fails(tmp_path, site):
    done = preflight(
        tmp_path,
        "table5",
        *TOY,
        "--profile",
        str(site_profile(tmp_path, slurm_account="teaching")),
        path=site,
    )
    status, detail = checks(done)["SLURM account teaching"]
    assert done.returncode == 2 and status == "FAIL"
    assert "h200" in detail and "only on partition cpu" in detail


@pytest.mark.parametrize(("qos", "status"), [("high", "ok"), ("premium", "FAIL")])
def test_a_qos_must_be_one_of_the_associations(tmp_path, site, qos, status):
    done = preflight(tmp_path, "table5", *TOY, "--profile", str(site_profile(tmp_path, qos=qos)), path=site)
    found, detail = checks(done)[f"SLURM QOS {qos}"]
    assert found == status, detail
    assert done.returncode == (0 if status == "ok" else 2)
    if status == "FAIL":
        assert "normal, high" in detail and "default-resources.qos" in detail


@pytest.mark.parametrize(
    ("request_", "words"),
    [({"gpu": 16}, "at most 8 GPUs per node"), ({"gpu": 1, "gpu_model": "a100"}, "no gpu:a100")],
)
def test_a_gpu_request_the_partition_cannot_meet_fails(tmp_path, site, request_, words):
    own = site_profile(tmp_path)
    gpus = profile(tmp_path, "gpus", {"set-resources": {"prior": request_}})
    done = preflight(tmp_path, "table5", *TOY, "--profile", str(own), "--profile", str(gpus), path=site)
    status, detail = checks(done)["GPUs of prior"]
    assert done.returncode == 2 and status == "FAIL" and words in detail, detail


def test_no_slurm_commands_fail_once_and_skip_the_rest(tmp_path):
    done = preflight(tmp_path, "table5", *TOY, "--profile", "slurm", path=tmp_path)
    found = checks(done)
    assert done.returncode == 2
    assert found["SLURM commands"][0] == "FAIL" and "login node" in found["SLURM commands"][1]
    assert found["SLURM account your_account"][0] == "FAIL"  # a placeholder needs no SLURM to fail
    assert found["GPUs of generate"][0] == "skipped"


def test_an_unreachable_accounting_database_skips_the_account_checks(tmp_path, site):
    stub(
        site,
        "sacctmgr",
        "*",
        "",
        status=1,
        stderr="sacctmgr: error: Problem talking to the database: Connection refused",
    )
    done = preflight(tmp_path, "table5", *TOY, "--profile", str(site_profile(tmp_path)), path=site)
    status, detail = checks(done)["SLURM account rpb_ci"]
    assert status == "skipped" and "Connection refused" in detail
    assert checks(done)["SLURM partition h200"][0] == "ok"
    assert done.returncode == 0


def test_megatron_trainings_need_the_nodes_of_training_parallelism(site):
    """A paper-scale training asks 16 nodes of 8 GPUs (config.yaml training.parallelism)."""
    env = {"PATH": str(site)}
    site_values = {"slurm_account": "rpb_ci", "slurm_partition": "h200"}
    own = profiles.Profile(Path("site.yaml"), {"default-resources": site_values})
    resources = profiles.Resources.layered([profiles.read(PAPER_PROFILE), own])
    training = slurm.Allocation("train_megatron", nodes=16, gpus_per_node=8)
    found = {c.name: c for c in slurm.checks(resources, [training], env=env)}
    assert found["GPUs of train_megatron"].status == checklist.OK
    training = slurm.Allocation("train_megatron", nodes=32, gpus_per_node=8)
    found = {c.name: c for c in slurm.checks(resources, [training], env=env)}
    check = found["GPUs of train_megatron"]
    assert check.status == checklist.FAIL and "16 nodes with 8 GPUs" in check.detail, check.detail
    assert "training.parallelism" in check.detail


# ---------------------------------------------------------------------------------------- the hub


@pytest.fixture(scope="module")
def paper_repos() -> list[Repo]:
    from tests.conftest import load_config

    return repos_of_config(load_config(toy=False))


@pytest.fixture()
def pinned(tmp_path) -> list[str]:
    """The paper config with every revision a commit the stand-in hub knows."""
    from tests.conftest import load_config

    overlay = tmp_path / "pinned.yaml"
    overlay.write_text(yaml.safe_dump(pinned_overlay(load_config(toy=False))))
    return ["--config", str(ROOT / "config.yaml"), "--overlay", str(overlay)]


def hub_run(tmp_path, site, hub: HubServer, *args: str, token: str | None = TOKEN):
    env = {"HF_ENDPOINT": hub.url} | ({"HF_TOKEN": token} if token else {})
    return preflight(tmp_path, *args, "--profile", str(site_profile(tmp_path)), path=site, env=env)


@pytest.mark.slow
def test_every_hub_repository_of_the_target_is_reachable_and_pinned(tmp_path, site, paper_repos, pinned):
    with HubServer(paper_repos) as hub:
        done = hub_run(tmp_path, site, hub, "table5", *pinned)
    found = checks(done)
    assert {name for name, (status, _) in found.items() if status == "FAIL"} <= {"disk"}, done.stdout
    assert found["Hugging Face hub"] == ("ok", f"{hub.url} answers")
    assert found["Hugging Face token"] == ("ok", f"accepted for user {USER}")
    gpqa = f"hub dataset Idavidrein/gpqa@{commit_of('Idavidrein/gpqa')}"
    assert found[gpqa][0] == "ok" and "gated, access granted" in found[gpqa][1]
    names = [name for name in found if name.startswith("hub ") and name != "hub revisions"]
    # Table 5: Moonlight trained on math20k and coding20k (both GLM-5.1) and evaluated on the twelve
    # benchmarks, of ten repositories (MMLU and MMLU-STEM share one, as GPQA's two configs do).
    assert len(names) == 1 + 1 + 10, names
    assert found["hub revisions"] == ("ok", "all 14 are commits")
    # The disk: 2 TB for Table 5, which this machine may not have free.
    assert found["disk"][0] == disk_status(tmp_path, "table5")
    assert done.returncode == (0 if found["disk"][0] == "ok" else 2)


@pytest.mark.slow
def test_a_gated_repository_without_a_token_fails_saying_where_to_get_access(
    tmp_path, site, paper_repos, pinned
):
    with HubServer(paper_repos) as hub:
        done = hub_run(tmp_path, site, hub, "table5", *pinned, token=None)
    found = checks(done)
    assert done.returncode == 2
    assert found["Hugging Face token"][0] == "skipped" and "HF_TOKEN" in found["Hugging Face token"][1]
    status, detail = found[f"hub dataset Idavidrein/gpqa@{commit_of('Idavidrein/gpqa')}"]
    assert status == "FAIL" and "gated" in detail and "HF_TOKEN" in detail
    assert f"{hub.url}/datasets/Idavidrein/gpqa" in detail
    assert found[f"hub dataset openai/gsm8k@{commit_of('openai/gsm8k')}"][0] == "ok"  # public


@pytest.mark.slow
def test_a_token_without_access_to_a_gated_repository_fails(tmp_path, site, paper_repos, pinned):
    with HubServer(paper_repos, granted=()) as hub:
        done = hub_run(tmp_path, site, hub, "table5", *pinned)
    status, detail = checks(done)[f"hub dataset Idavidrein/gpqa@{commit_of('Idavidrein/gpqa')}"]
    assert done.returncode == 2 and status == "FAIL"
    assert f"user {USER} has no access" in detail and "request access" in detail


@pytest.mark.slow
def test_a_rejected_token_is_an_authentication_failure(tmp_path, site, paper_repos, pinned):
    with HubServer(paper_repos) as hub:
        done = hub_run(tmp_path, site, hub, "table5", *pinned, token="hf_revoked")
    found = checks(done)
    assert done.returncode == 2
    status, detail = found["Hugging Face token"]
    assert status == "FAIL" and "rejected" in detail and "HF_TOKEN" in detail
    # Every repository then fails the same way, not as "not found".
    gsm8k = found[f"hub dataset openai/gsm8k@{commit_of('openai/gsm8k')}"]
    assert gsm8k[0] == "FAIL" and "token" in gsm8k[1] and "not found" not in gsm8k[1]


@pytest.mark.slow
def test_a_missing_repository_and_a_missing_revision_are_named_with_their_config_keys(
    tmp_path, site, paper_repos, pinned
):
    wrong = tmp_path / "wrong.yaml"
    missing = "0" * 40
    wrong.write_text(
        yaml.safe_dump(
            {
                "models": {"moonlight": {"hub": {"repo": "moonshotai/Moonlight-16B-A4B"}}},
                "benchmarks": {"gsm8k": {"hub": {"revision": missing}}},
            }
        )
    )
    with HubServer(paper_repos) as hub:
        done = hub_run(tmp_path, site, hub, "table5", *pinned, "--overlay", str(wrong))
    found = checks(done)
    assert done.returncode == 2
    status, detail = found[
        f"hub model moonshotai/Moonlight-16B-A4B@{commit_of('moonshotai/Moonlight-16B-A3B')}"
    ]
    assert status == "FAIL" and "not found" in detail and "models.moonlight.hub.repo" in detail
    status, detail = found[f"hub dataset openai/gsm8k@{missing}"]
    assert status == "FAIL" and "revision" in detail and "benchmarks.gsm8k.hub.revision" in detail


def test_an_unreachable_hub_is_reported_once_and_the_repositories_skipped(tmp_path, site, pinned):
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    env = {"HF_ENDPOINT": url, "HF_TOKEN": TOKEN}
    done = preflight(
        tmp_path, "table5", *pinned, "--profile", str(site_profile(tmp_path)), path=site, env=env
    )
    found = checks(done)
    assert done.returncode == 2
    status, detail = found["Hugging Face hub"]
    assert status == "FAIL" and url in detail and "unreachable" in detail and "HF_ENDPOINT" in detail
    repos = [value for name, value in found.items() if name.startswith("hub ") and name != "hub revisions"]
    assert repos and all(value == ("skipped", "the hub is unreachable") for value in repos)


def test_a_python_without_huggingface_hub_fails_the_hub_check_saying_so(tmp_path, site, pinned):
    """The Python that runs Snakemake may lack the client: the hub's line says so, the rest still runs."""
    argv = [
        "preflight",
        "table5",
        *pinned,
        "--profile",
        str(site_profile(tmp_path)),
        "--results",
        str(tmp_path),
    ]
    program = (
        "import sys; sys.modules['huggingface_hub'] = None\n"  # what an environment without it raises
        f"from workflow_scripts.cli import main; sys.exit(main({argv!r}))"
    )
    env = {"PATH": str(site), "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True)
    found = checks(done)
    assert found["Hugging Face hub"][0] == "FAIL" and "not installed" in found["Hugging Face hub"][1]
    assert found["SLURM account rpb_ci"][0] == "ok" and done.returncode == 2


@pytest.mark.slow
def test_moving_revisions_fail_naming_their_keys_and_todays_commits(tmp_path, site, paper_repos):
    paper = ["--config", str(ROOT / "config.yaml")]
    with HubServer(paper_repos) as hub:
        done = hub_run(tmp_path, site, hub, "table5", *paper)
    status, detail = checks(done)["hub revisions"]
    assert done.returncode == 2 and status == "FAIL"
    assert "14 name a moving ref" in detail and "run `python -m workflow_scripts lock` once" in detail
    assert (
        f"datasets.glm51.hub.revision main (today {commit_of('Jackrong/GLM-5.1-Reasoning-1M-Cleaned')})"
        in detail
    )
    assert "config.yaml" in detail


@pytest.mark.slow
def test_refs_the_hub_lock_resolves_count_as_commits(tmp_path, site, paper_repos, paper_config):
    """config.yaml's `main` with hub.lock.yaml's commits: what the download rules fetch is what is checked."""
    lock = {(r.kind, r.repo, "main"): commit_of(r.repo) for r in paper_repos}
    (tmp_path / "hub.lock.yaml").write_text(hub.lock_text(lock))
    with HubServer(paper_repos) as server:
        done = hub_run(tmp_path, site, server, "table5", "--config", str(ROOT / "config.yaml"))
    found = checks(done)
    assert found["hub revisions"] == ("ok", "all 14 are commits (14 through hub.lock.yaml)")
    gsm8k = f"hub dataset openai/gsm8k@{commit_of('openai/gsm8k')}"
    assert found[gsm8k] == ("ok", f"commit {commit_of('openai/gsm8k')}")


def test_disk_at_toy_scale_has_no_estimate_and_reports_the_free_space(tmp_path, site):
    done = preflight(tmp_path, "table5", *TOY, "--profile", str(site_profile(tmp_path)), path=site)
    status, detail = checks(done)["disk"]
    assert status == "skipped" and "no disk estimate" in detail
    assert re.search(r"results/: \d+(\.\d)? GB free", detail.replace(str(tmp_path) + "/", "")), detail
    assert "HF cache" in detail


def plan_gb(config: dict, target: str) -> float:
    """The reference: the compute plan's disk of ``target`` (kept, plus a running training's work folder)."""
    rows = {
        corpus: n
        for corpus, n in compute_plan.PAPER_ROWS.items()
        if config["corpora"][corpus]["train_rows"] is None
    }
    plan = compute_plan.plan(config, target, rows)
    return plan.disk.kept + plan.disk.training_work


def disk_status(tmp_path: Path, target: str) -> str:
    """What the disk line of a fresh run of ``target`` must say on this machine: ok where the plan fits."""
    from tests.conftest import load_config

    return (
        "ok" if plan_gb(load_config(toy=False), target) <= shutil.disk_usage(tmp_path).free / 1e9 else "FAIL"
    )


@pytest.mark.parametrize(
    ("free_gb", "results_hold_files", "status"),
    [(1e5, False, "ok"), (10, False, "FAIL"), (10, True, "skipped")],
)
def test_disk_at_paper_scale_against_the_compute_plan(
    tmp_path, monkeypatch, paper_config, free_gb, results_hold_files, status
):
    """Table 5 writes about 1.6 TB kept plus a training's work folder: a fresh run needs that much free."""
    results = tmp_path / "results"
    if results_hold_files:
        (results / "raw").mkdir(parents=True)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=int(free_gb * 1e9)))
    check = disk.check(paper_config, ["table5"], results, tmp_path / "hf")
    assert check.status == status, check.detail
    assert check.detail.startswith(f"table5 write about {plan_gb(paper_config, 'table5'):.0f} GB (")
    if status == "FAIL":
        assert "put " + str(results) + "/ on a larger filesystem" in check.detail


# -------------------------------------------------------------------- jobs on the nodes (srun)


@pytest.mark.slow
def test_the_gpu_check_runs_the_probe_in_each_environment_through_srun(tmp_path, site):
    """This interpreter has neither Megatron nor vLLM nor a GPU: both environments fail, naming why."""
    own = site_profile(tmp_path)
    python = sys.executable
    done = preflight(
        tmp_path,
        "table5",
        *TOY,
        "--profile",
        str(own),
        "--gpu",
        "--megatron-python",
        python,
        "--eval-python",
        python,
        path=site,
    )
    found = checks(done)
    assert done.returncode == 2
    status, detail = found["GPU software (Megatron)"]
    assert status == "FAIL" and "megatron.bridge" in detail and "transformer_engine" in detail
    assert "no CUDA device" in detail and "job 4242" in detail
    status, detail = found["GPU software (evaluation)"]
    assert status == "FAIL" and "vllm" in detail and "megatron" not in detail
    calls = (site / "srun.log").read_text().splitlines()
    assert len(calls) == 2
    for call in calls:
        assert {"--account=rpb_ci", "--partition=h200", "--gres=gpu:1", "--ntasks=1"} <= set(call.split())


@pytest.mark.slow
def test_the_probe_reports_imports_and_the_driver_as_json():
    probe = ROOT / "workflow_scripts/preflight/node_probe.py"
    done = subprocess.run(
        [sys.executable, str(probe), "imports", "json", "no_such_module_xyz"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0
    assert report["imports"]["json"]["ok"] and not report["imports"]["no_such_module_xyz"]["ok"]
    assert "No module named" in report["imports"]["no_such_module_xyz"]["error"]
    assert report["cuda_devices"] == 0  # this machine's torch is a CPU build (or absent)


@pytest.mark.slow
def test_the_nodes_check_asks_the_hub_from_a_compute_node(tmp_path, site, paper_repos):
    own = site_profile(tmp_path)
    with HubServer(paper_repos) as hub:
        done = preflight(
            tmp_path,
            "table5",
            *TOY,
            "--profile",
            str(own),
            "--nodes-reach-hub",
            path=site,
            env={"HF_ENDPOINT": hub.url},
        )
    status, detail = checks(done)["compute nodes reach the hub"]
    assert status == "ok" and hub.url in detail, detail
    # On the CPU partition (that of the profile's first CPU-only rule), where one exists.
    cpu = "cpu" if "your_cpu_partition" in PAPER_PROFILE.read_text() else "h200"
    assert f"partition {cpu}" in detail and f"--partition={cpu}" in (site / "srun.log").read_text()


# ------------------------------------------------------------------------------ the pieces


def test_profiles_are_read_from_snakemakes_command_line_in_its_order():
    argv = ["snakemake", "--profile", "slurm", "-j", "4", "--profile=/site/ci", "table5"]
    assert profiles.from_argv(argv, {}) == ["slurm", "/site/ci"]
    assert profiles.from_argv(["snakemake"], {"SNAKEMAKE_PROFILE": "slurm"}) == ["slurm"]
    assert profiles.from_argv(["snakemake", "--profile", "none"], {"SNAKEMAKE_PROFILE": "slurm"}) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["slurm", "profiles/slurm", "profiles/slurm/config.yaml", "no_such_profile"])
def test_a_profile_name_resolves_as_snakemake_resolves_it(name, monkeypatch):
    from snakemake.cli import get_profile_dir  # the reference

    monkeypatch.chdir(ROOT)
    expected = get_profile_dir(name)
    assert profiles.resolve(name) == (None if expected is None else expected[1])


def test_a_later_profile_replaces_a_whole_block_and_is_named_as_its_source(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # a profile file inside the working directory is named relative to it
    own = profile(tmp_path, "own", {"default-resources": {"slurm_account": "rpb_ci"}})
    resources = profiles.Resources.layered([profiles.read(PAPER_PROFILE), profiles.read(own / "config.yaml")])
    account = resources.value("generate", "slurm_account")
    assert (account.value, account.where) == (
        "rpb_ci",
        f"{own / 'config.yaml'}: default-resources.slurm_account",
    )
    assert (
        resources.value("generate", "slurm_partition") is None
    )  # the block replaced whole, as Snakemake does
    gpu = resources.value("generate", "gpu")
    assert (gpu.value, gpu.where) == (8, "profiles/slurm/config.yaml: set-resources.generate.gpu")


def test_the_targets_of_a_run_are_its_tables_and_figures(paper_config):
    assert targets.of_run(paper_config, ["results/tables/table5.md"], []) == ["table5"]
    assert targets.of_run(
        paper_config, ["results/figures/figure1.png", "results/provenance/table8.json"], []
    ) == [
        "figure1",
        "table8",
    ]
    assert targets.of_run(paper_config, [], ["all"]) == ["all"]
    assert targets.of_run(paper_config, ["results/megatron/launch_check.txt"], []) == []


def test_the_hub_repositories_of_a_run_are_those_of_its_download_jobs(paper_config):
    jobs = [
        ("download_model", {"model": "moonlight"}),
        ("download_benchmark", {"benchmark": "gpqa"}),
        ("download_benchmark", {"benchmark": "gpqa_diamond"}),
        ("build_corpus", {"corpus": "math20k"}),
    ]
    repos = targets.hub_repos(paper_config, targets.hub_entries_of_jobs(jobs), lock={})
    assert [(r.kind, r.repo, r.revision) for r in repos] == [
        ("model", "moonshotai/Moonlight-16B-A3B", "main"),
        ("dataset", "Idavidrein/gpqa", "main"),
    ]
    assert repos[1].keys == ("benchmarks.gpqa.hub", "benchmarks.gpqa_diamond.hub") and repos[1].gated


def test_gres_as_sinfo_prints_it():
    assert slurm.gpus_of_gres("gpu:8") == {None: 8}
    assert slurm.gpus_of_gres("gpu:h200:8(S:0-1)") == {"h200": 8}
    assert slurm.gpus_of_gres("gpu:h200:4(S:0),gpu:a100:2(S:1),shard:h200:32") == {"h200": 4, "a100": 2}
    assert slurm.gpus_of_gres("(null)") == {}


def test_the_checklist_renders_one_line_per_check():
    lines = checklist.render(
        [checklist.Check("a", checklist.OK, "fine"), checklist.Check("b c", checklist.FAIL, "fix it")]
    ).splitlines()
    assert lines == ["ok       a: fine", "FAIL     b c: fix it"]
