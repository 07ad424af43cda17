"""Writing the locked commits into config.yaml reruns nothing (issue 31, item 4): a real Snakemake run.

The project's paper-scale DAG runs GLM-5.1's Math download, the corpus built from it, GSM8K's
download and its items, from dataset folders written here (``fakehub/...``: valid repository ids
that ``datasets`` reads from disk, the way it reads a hub repository) at the commits that
``python -m workflow_scripts lock`` wrote (the hub's lookups faked, tests/fake_hub.py). Then
config.yaml names those commits instead of ``main``, as a user freezing the reproduction writes
them, and Snakemake schedules no job and reports no changed params.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.dag import JOB_ENV, ROOT, copy_checkout, dry_run, snakemake, snakemake_ok
from tests.fake_hub import install
from workflow_scripts import hub, registry
from workflow_scripts.chat_sources import toy
from workflow_scripts.cli import main
from workflow_scripts.evaluate.fixtures import read_fixture

CORPUS = "results/data/math20k/train.parquet"
ITEMS = "results/benchmarks/gsm8k/items.parquet"
DOWNLOADS = {"results/raw/glm51/Math.manifest.json", "results/benchmarks/gsm8k/manifest.json"}
OVERLAY = "hub_overlay.yaml"
# Without a profile: the local executor and config.yaml (paper scale) plus the test's overlay.
PAPER_LOCAL = ["--configfiles", OVERLAY]


def write_repos(workdir: Path) -> int:
    """``fakehub/glm51`` (Math as JSON Lines, as the hub has it) and ``fakehub/gsm8k``; GSM8K's rows."""
    glm = workdir / "fakehub" / "glm51"
    glm.mkdir(parents=True)
    rows = toy.generate("glm_sharegpt", "Math", rows=500, seed=0, bad_fraction=0.1).to_pylist()
    (glm / "Math.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    gsm8k = workdir / "fakehub" / "gsm8k"
    (gsm8k / "main").mkdir(parents=True)
    frame = read_fixture("gsm8k")
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), gsm8k / "main" / "test.parquet")
    for folder, config, split, path in (
        (glm, "Math", "train", "Math.jsonl"),
        (gsm8k, "main", "test", "main/test.parquet"),
    ):
        configs = [{"config_name": config, "data_files": [{"split": split, "path": path}]}]
        (folder / "README.md").write_text(f"---\n{yaml.safe_dump({'configs': configs})}---\n")
    return len(frame)


def overlay(gsm8k_rows: int) -> dict:
    """The two sources read from ``fakehub/``; the toy's corpus size and scoring for its 500 rows."""
    toy_overlay = yaml.safe_load((ROOT / "profiles/local/toy.yaml").read_text())
    return {
        "datasets": {"glm51": {"hub": {"repo": "fakehub/glm51"}}},
        "benchmarks": {"gsm8k": {"hub": {"repo": "fakehub/gsm8k"}, "rows": gsm8k_rows}},
        "corpora": {"math20k": toy_overlay["corpora"]["math20k"]},
        "scoring": toy_overlay["scoring"],
        "training": {"schedule": {"warmup_steps": 1}},  # within the 3 steps of that corpus (a registry check)
    }


def pin_config(workdir: Path, lock: hub.Lock) -> int:
    """Write each ref's locked commit into config.yaml in place of ``main``; how many were written.

    The commits are those of the sources the run used (the overlay's ``fakehub/...`` for two of
    them), written on the config.yaml line of the same key.
    """
    used = registry.load_config([workdir / "config.yaml", workdir / OVERLAY])
    shipped = {s.key: s.repo for s in hub.hub_sources(registry.load_config([workdir / "config.yaml"]))}
    commits = {shipped[s.key]: hub.locked_revision(s, lock) for s in hub.hub_sources(used)}
    text, count = re.subn(
        r"repo: ([^,]+), revision: main",
        lambda found: f"repo: {found.group(1)}, revision: {commits[found.group(1)]}",
        (workdir / "config.yaml").read_text(),
    )
    (workdir / "config.yaml").write_text(text)
    return count


def summary(workdir: Path) -> list[dict[str, str]]:
    """Snakemake's ``--summary`` of the targets' files: status (``params changed``, ...) and plan.

    Not ``--list-changes params``: in Snakemake 9.27 it lists the last output of every job,
    changed or not (``ParamsChange.__or__`` keeps the files of an empty change).
    """
    done = snakemake_ok(workdir, CORPUS, ITEMS, "--summary", *PAPER_LOCAL, timeout=300)
    header, *rows = [line.split("\t") for line in done.stdout.splitlines() if "\t" in line]
    assert len(rows) == 10, done.stdout  # 2 + 4 files of the downloads, 4 + 2 of the corpus and items
    return [dict(zip(header, row, strict=True)) for row in rows]


def model_download_command(workdir: Path) -> str:
    done = snakemake_ok(
        workdir, "results/models/moonlight/manifest.json", "-n", "-p", *PAPER_LOCAL, timeout=300
    )
    return next(line for line in done.stdout.splitlines() if "models download" in line)


@pytest.mark.slow
def test_writing_the_locked_commits_into_config_yaml_reruns_nothing(tmp_path, monkeypatch):
    workdir = copy_checkout(tmp_path / "rpb-repro")
    (workdir / OVERLAY).write_text(yaml.safe_dump(overlay(write_repos(workdir))))
    install(monkeypatch)
    lock_file = workdir / hub.LOCK_FILE
    argv = ["lock", "--config", str(workdir / "config.yaml"), "--overlay", str(workdir / OVERLAY)]
    assert main([*argv, "--lock", str(lock_file)]) == 0
    lock = hub.read_lock(lock_file)
    glm_commit = lock[("dataset", "fakehub/glm51", "main")]

    env = {**JOB_ENV, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    snakemake_ok(workdir, CORPUS, ITEMS, "--cores", "1", *PAPER_LOCAL, env=env, timeout=900)
    for manifest in DOWNLOADS:
        assert json.loads((workdir / manifest).read_text())["revision_resolved"] in lock.values()
    assert (
        json.loads((workdir / "results/raw/glm51/Math.manifest.json").read_text())["revision_resolved"]
        == glm_commit
    )
    model_command = model_download_command(workdir)
    assert f"--revision {lock[('model', 'moonshotai/Moonlight-16B-A3B', 'main')]}" in model_command

    assert pin_config(workdir, lock) == 17
    assert "revision: main" not in (workdir / "config.yaml").read_text()
    assert dry_run(PAPER_LOCAL, CORPUS, ITEMS, cwd=workdir) == []
    assert {(row["status"], row["plan"]) for row in summary(workdir)} == {("ok", "no update")}
    assert model_download_command(workdir) == model_command  # the model's job too: same params
    lock_file.unlink()  # the lock is not needed once config.yaml names the commits
    assert dry_run(PAPER_LOCAL, CORPUS, ITEMS, cwd=workdir) == []

    # The check can see a change: another GSM8K commit reruns its download and everything after it.
    text = (workdir / "config.yaml").read_text()
    gsm8k_commit = lock[("dataset", "fakehub/gsm8k", "main")]
    (workdir / "config.yaml").write_text(text.replace(gsm8k_commit, "f" * 40))
    rules = {rule for rule, _ in dry_run(PAPER_LOCAL, CORPUS, ITEMS, cwd=workdir)}
    assert rules == {"download_benchmark", "benchmark_items"}
    changed = {row["output_file"] for row in summary(workdir) if row["status"] == "params changed"}
    assert changed == {"results/benchmarks/gsm8k/raw.parquet", "results/benchmarks/gsm8k/manifest.json"}


@pytest.mark.slow
def test_a_download_job_without_the_lock_fails_naming_the_lock_command(tmp_path):
    workdir = copy_checkout(tmp_path / "rpb-repro")
    (workdir / OVERLAY).write_text(yaml.safe_dump(overlay(write_repos(workdir))))
    assert dry_run(PAPER_LOCAL, ITEMS, cwd=workdir)  # a dry run plans before the lock
    env = {**JOB_ENV, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    done = snakemake(workdir, ITEMS, "--cores", "1", *PAPER_LOCAL, env=env, timeout=600)
    assert done.returncode != 0
    log = (workdir / "logs/benchmarks/download/gsm8k.log").read_text()
    assert "'main' is a ref, not a commit; run 'python -m workflow_scripts lock'" in log
    assert not (workdir / "results/benchmarks/gsm8k/raw.parquet").exists()
