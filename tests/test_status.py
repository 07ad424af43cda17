"""``status``: which outputs are complete, what each still needs, what SLURM runs, GPU-hours spent and left.

Checked against Snakemake's own dry runs of one output at a time, a real toy run's provenance
records, and a stub ``squeue`` printing what SLURM prints for the command's format.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.dag import ROOT, SHORT_BASE, copy_checkout, overlay_configfiles, snakemake_ok
from workflow_scripts import registry, run_status
from workflow_scripts.cli import build_parser, main
from workflow_scripts.compute_plan import GPU_RULES
from workflow_scripts.provenance.settings import dry_run, settings_by_record
from workflow_scripts.records.verify import RECORD_PATTERN

TABLE2, TABLE5 = "results/provenance/table2.json", "results/provenance/table5.json"
GATES = "results/tables/gates.md"  # a named target at paper scale: the likelihood rule's jobs
PROFILE = "profiles/status-test"  # the toy profile plus the short-base overlay, in the run's copy
SHELL = re.compile(r"^(?:local)?rule (\w+):\n(?:    .*\n)*Shell command: (.*)$", re.MULTILINE)
STATS = re.compile(r"^Job stats:\n.*?\n-+ +-+\n(.*?)^total +(\d+)$", re.MULTILINE | re.DOTALL)
# ``squeue --me --noheader --format=%i|%T|%M|%D|%j|%k`` as SLURM prints it: the plugin's jobs
# carry its run's uuid as name and ``rule_<rule>[_wildcards_<values>]`` as comment (slashes in a
# value as ``_``); the head's own CPU job has no comment, shown as ``(null)``.
SQUEUE_OUTPUT = """\
4242|RUNNING|1-02:03:04|16|3f2c6a7e-1b2d-4c1e-9a57-0c8d2f1e6b11|rule_train_megatron_wildcards_moonlight_math20k_rpb_42
4243|PENDING|0:00|1|3f2c6a7e-1b2d-4c1e-9a57-0c8d2f1e6b11|rule_generate_wildcards_moonlight_math20k_rpb_s42
4244|RUNNING|12:09|1|3f2c6a7e-1b2d-4c1e-9a57-0c8d2f1e6b11|rule_benchmark_suite
4250|RUNNING|5:12:09|1|snakemake-head|(null)
"""
SQUEUE_STUB = f"""#!/bin/sh
[ "$*" = "--me --noheader --format=%i|%T|%M|%D|%j|%k" ] || {{ echo "squeue: unexpected: $*" >&2; exit 1; }}
cat <<'EOF'
{SQUEUE_OUTPUT}EOF
"""


def _stages() -> argparse._SubParsersAction:
    (stages,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return stages


def _stats(printed: str) -> tuple[dict[str, int], int]:
    """Snakemake's own ``Job stats`` table of a dry run: jobs per rule, and the total."""
    rows, total = STATS.search(printed).groups()
    counts = {line.split()[0]: int(line.split()[1]) for line in rows.splitlines() if line.strip()}
    return counts, int(total)


# ---------------------------------------------------------------- parsing, without a run


def test_the_plugins_comment_names_the_rule_and_its_wildcards():
    assert run_status.plugin_comment("rule_train_megatron_wildcards_moonlight_math20k_rpb_42") == (
        "train_megatron",
        "moonlight_math20k_rpb_42",
    )
    assert run_status.plugin_comment("rule_benchmark_suite") == ("benchmark_suite", None)
    assert run_status.plugin_comment("(null)") == (None, None)


def test_squeue_lines_map_to_rules():
    jobs = run_status.slurm_jobs(SQUEUE_OUTPUT)
    assert [(job.job_id, job.state, job.rule) for job in jobs] == [
        ("4242", "RUNNING", "train_megatron"),
        ("4243", "PENDING", "generate"),
        ("4244", "RUNNING", "benchmark_suite"),
        ("4250", "RUNNING", None),
    ]
    assert (jobs[0].elapsed, jobs[0].nodes, jobs[3].name) == ("1-02:03:04", "16", "snakemake-head")


def test_every_gpu_command_is_a_command_of_a_gpu_rule_of_the_plan():
    assert set(run_status.COMMAND_RULE.values()) <= set(GPU_RULES)
    stages = _stages()
    for command in run_status.COMMAND_RULE:
        stage, name = command.split()
        commands = next(
            a for a in stages.choices[stage]._actions if isinstance(a, argparse._SubParsersAction)
        )
        assert name in commands.choices, command


def test_spent_hours_count_each_record_once_at_its_class_gpus():
    records = [
        ("a/provenance.json", {"command": "train megatron", "wall_seconds": 1800, "slurm_job_id": "7"}),
        ("b/provenance.json", {"command": "evaluate generate", "wall_seconds": 3600, "slurm_job_id": "8"}),
        ("c/provenance.json", {"command": "evaluate score", "wall_seconds": 3600, "slurm_job_id": None}),
        ("d/provenance.json", "unreadable (Expecting value: line 1 column 1 (char 0))"),
    ]
    spent = run_status.spent_hours(records, {"train_megatron": 128, "generate": 8, "score": 0})
    assert spent.gpu_hours == {"train_megatron": 64.0, "generate": 8.0}
    assert (spent.jobs, spent.records, spent.under_slurm) == ({"train_megatron": 1, "generate": 1}, 3, 2)
    assert spent.unreadable == ["d/provenance.json: unreadable (Expecting value: line 1 column 1 (char 0))"]


def test_an_unknown_output_is_refused_naming_the_known_ones(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["status", "table99"]) == 2
    error = capsys.readouterr().err
    assert "table99: no such table or figure" in error and "table5" in error


def test_a_folder_without_a_profile_is_refused(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(ROOT)
    assert main(["status", "--profile", str(tmp_path)]) == 2
    assert f"--profile {tmp_path}: no config.v8+.yaml or config.yaml there" in capsys.readouterr().err


# ---------------------------------------------------------------- the paper-scale DAG


@pytest.mark.slow
def test_one_dry_run_gives_each_output_the_jobs_its_own_dry_run_has():
    """Two tables planned together, split back by following inputs: each gets exactly its own jobs."""
    printed = dry_run([TABLE2, TABLE5, GATES], ["config.yaml"], ROOT, ["--printshellcmds"])
    together = run_status.planned_jobs(printed)
    for target in (TABLE2, TABLE5):
        alone = dry_run([target], ["config.yaml"], ROOT)
        files = [
            target,
            *(target.replace("provenance/", "tables/")[:-5] + s for s in (".csv", ".md", ".tex")),
        ]
        split = run_status.jobs_of(files, together)
        counts, total = _stats(alone)
        assert run_status.rule_counts(split) == counts and len(split) == total
        assert {job.outputs for job in split} == {job.outputs for job in run_status.planned_jobs(alone)}
    # Each GPU rule's job records the command COMMAND_RULE maps to that rule (a launcher's tail
    # records the training): the recording call of its shell command, parsed as the audit does.
    recorded = {}
    for rule, shell in SHELL.findall(printed):
        for arguments in settings_by_record([shell], _stages().choices).values():  # none: no record
            recorded.setdefault(rule, set()).add(f"{arguments['stage']} {arguments['command']}")
    gpu_rules = {rule: commands for rule, commands in recorded.items() if rule in GPU_RULES}
    assert set(gpu_rules) == set(GPU_RULES)
    for rule, (command,) in gpu_rules.items():
        assert run_status.COMMAND_RULE[command] == rule


# ---------------------------------------------------------------- a real toy run


@pytest.fixture(scope="module")
def toy_table(tmp_path_factory) -> Path:
    """A checkout copy where Table 13 and its manifest are built (a short toy base), with its profile."""
    workdir = copy_checkout(tmp_path_factory.mktemp("status") / "rpb-repro")
    configfiles = overlay_configfiles(workdir, SHORT_BASE)
    (workdir / PROFILE).mkdir(parents=True)
    (workdir / PROFILE / "config.yaml").write_text(
        yaml.safe_dump({"configfiles": configfiles[1:], "cores": 2})
    )
    snakemake_ok(workdir, "results/provenance/table13.json", "--profile", PROFILE)
    return workdir


SLURM_COMMANDS = {"squeue", "sbatch", "scancel", "sacct", "sinfo", "srun", "scontrol", "salloc", "sacctmgr"}


def path_without_slurm(folder: Path) -> str:
    """A PATH of this one's commands, linked into ``folder``, without SLURM's (as on a machine without it)."""
    folder.mkdir()
    for directory in [Path(sys.executable).parent, *map(Path, os.environ["PATH"].split(os.pathsep))]:
        for command in sorted(directory.iterdir()) if directory.is_dir() else ():
            name = folder / command.name
            if command.name not in SLURM_COMMANDS and not name.exists():
                name.symlink_to(command)
    return str(folder)


def status(workdir: Path, *args: str, path: str) -> subprocess.CompletedProcess:
    """``python -m workflow_scripts status`` in ``workdir`` with ``path`` as PATH."""
    env = {**os.environ, "PYTHONPATH": str(workdir), "PATH": path}
    command = [sys.executable, "-m", "workflow_scripts", "status", *args, "--profile", PROFILE]
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _expected_spent(results: Path) -> dict[str, float]:
    """GPU-hours by rule from the run's records, read here: the toy plan's priors and probes use 1 GPU."""
    gpus = {"priors compute": ("prior", 1), "probe routes": ("probe_routes", 1)}
    spent: dict[str, float] = {}
    for path in results.rglob(RECORD_PATTERN):
        record = json.loads(path.read_text())
        if record.get("command") in gpus:
            name, count = gpus[record["command"]]
            spent[name] = spent.get(name, 0.0) + record["wall_seconds"] * count / 3600
    return spent


@pytest.mark.slow
def test_status_of_a_real_run(toy_table, tmp_path):
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "squeue").write_text(SQUEUE_STUB)
    (stub / "squeue").chmod(0o755)
    path = f"{stub}{os.pathsep}{path_without_slurm(tmp_path / 'bin')}"
    report = json.loads(status(toy_table, "--json", path=path).stdout)
    outputs = {entry["output_id"]: entry for entry in report["outputs"]}
    overlays = yaml.safe_load((toy_table / PROFILE / "config.yaml").read_text())["configfiles"]
    known = registry.outputs(registry.load_config([toy_table / name for name in ["config.yaml", *overlays]]))
    assert set(outputs) == set(known)
    assert outputs["table13"]["state"] == "complete" and not outputs["table13"]["jobs"]

    alone = snakemake_ok(toy_table, TABLE5, "-n", "--profile", PROFILE).stdout
    counts, total = _stats(alone)
    assert outputs["table5"]["state"] == "missing" and outputs["table5"]["jobs"] == counts
    assert sum(outputs["table5"]["jobs"].values()) == total
    assert "prior" not in counts  # built for Table 13: not counted again

    spent = {entry["rule"]: entry for entry in report["gpu"]}
    expected = _expected_spent(toy_table / "results")
    assert expected["prior"] > 0 and expected["probe_routes"] > 0
    for name, hours in expected.items():
        assert spent[name]["spent"] == pytest.approx(hours, rel=1e-9)
    assert (spent["prior"]["spent_jobs"], spent["probe_routes"]["spent_jobs"]) == (2, 2)
    assert sum(entry["spent"] for entry in report["gpu"]) == pytest.approx(sum(expected.values()), rel=1e-9)
    assert spent["generate"]["left_jobs"] == report["needed"]["generate"] > 0

    running = {job["job_id"]: job for job in report["slurm"]}
    assert (
        running["4242"]["rule"] == "train_megatron"
        and running["4242"]["wildcards"] == "moonlight_math20k_rpb_42"
    )
    assert running["4250"]["rule"] is None

    text = status(toy_table, "table13", "table5", path=path).stdout
    assert re.search(r"^table13 +complete", text, re.MULTILINE)
    assert re.search(rf"^table5 +missing +{total} ", text, re.MULTILINE)
    assert "4242       RUNNING      1-02:03:04   16 nodes  train_megatron moonlight_math20k_rpb_42" in text
    assert "snakemake-head (not a Snakemake job)" in text


@pytest.mark.slow
def test_status_without_slurm_and_of_an_outdated_output(toy_table, tmp_path):
    path = path_without_slurm(tmp_path / "bin")
    done = status(toy_table, "table13", path=path)
    assert "running now: no SLURM here (squeue not found)" in done.stdout
    # Another edge-fraction sweep changes the shuffles' params: Table 13's files are there, but outdated
    # for a run with that overlay; a run that reruns on changed inputs only would not touch them.
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"probe": {"edge_fraction_sweep": [0.05, 0.1]}}))
    overlays = [
        "--configfiles",
        *yaml.safe_load((toy_table / PROFILE / "config.yaml").read_text())["configfiles"],
    ]
    overlays.append(str(sweep))
    outdated = json.loads(status(toy_table, "table13", "--json", *overlays, path=path).stdout)["outputs"][0]
    assert outdated["state"] == "outdated" and outdated["jobs"]["shuffled_priors"] == 2
    assert outdated["jobs"]["table"] == 1 and "prior" not in outdated["jobs"]
    narrower = status(
        toy_table, "table13", "--json", *overlays, "--rerun-triggers", "mtime", "input", path=path
    )
    assert json.loads(narrower.stdout)["outputs"][0]["state"] == "complete"
