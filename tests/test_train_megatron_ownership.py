"""A training's work folder is held by one job: a live holder refuses another, an ended one never blocks.

Real processes stand for the jobs (outside SLURM a holder is a pid on a host); the SLURM case,
with ``squeue`` of a real cluster, is ``tests/test_slurm_cluster.py``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from workflow_scripts.errors import UserInputError
from workflow_scripts.train.megatron import ownership, resume


def hold(work, pid: int, host: str | None = None, slurm_job: str | None = None) -> None:
    work.mkdir(parents=True, exist_ok=True)
    holder = {"slurm_job": slurm_job, "host": host or socket.gethostname(), "pid": pid}
    (work / ownership.OWNER_FILE).write_text(json.dumps(holder))


@pytest.fixture()
def orphan():
    """A process still running, as an orphaned training whose head process died."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process
    process.kill()
    process.wait()


def test_a_live_holder_is_named_and_the_folder_left_alone(tmp_path, orphan, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    work = tmp_path / "work"
    hold(work, orphan.pid)
    (work / "resume_log.json").write_text("[0]")
    with pytest.raises(UserInputError, match=rf"held by a process on .* \(pid {orphan.pid}\), running"):
        ownership.take(work)
    with pytest.raises(UserInputError, match="never shares its work folder"):
        resume.claim(work, "another run's key")  # the claim would discard it: it must not
    assert (work / "resume_log.json").read_text() == "[0]"
    assert json.loads((work / ownership.OWNER_FILE).read_text())["pid"] == orphan.pid


def test_an_ended_holder_never_blocks(tmp_path, orphan, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    work = tmp_path / "work"
    hold(work, orphan.pid)
    orphan.kill()
    orphan.wait()
    ownership.take(work)
    assert json.loads((work / ownership.OWNER_FILE).read_text())["pid"] == ownership.this_job().pid


def test_a_holder_on_another_host_counts_as_alive(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    hold(tmp_path, 1, host="another-node")
    with pytest.raises(UserInputError, match="on another-node .* unseen"):
        ownership.take(tmp_path)


def test_slurms_own_requeue_keeps_the_job_id_and_takes_its_folder_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    hold(tmp_path, 1, host="the-node-it-ran-on", slurm_job="4242")
    ownership.take(tmp_path)
    assert json.loads((tmp_path / ownership.OWNER_FILE).read_text())["slurm_job"] == "4242"


def test_a_damaged_holder_record_is_named(tmp_path):
    (tmp_path / ownership.OWNER_FILE).write_text("{")
    with pytest.raises(UserInputError, match=f"{tmp_path / ownership.OWNER_FILE}: not a holder record"):
        ownership.take(tmp_path)
