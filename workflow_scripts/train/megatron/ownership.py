"""One job at a time in a training's work folder: the launch takes it, and refuses while a live job holds it.

A training's work folder (``--work``) holds its resume checkpoints. When Snakemake's head process
dies, its SLURM jobs run on; a restarted head resubmits the unfinished training, whose ranks
would then write the same checkpoints as the orphan still running. ``train megatron-launch``
therefore records the job that holds the folder (``owner.json``: SLURM job id, host, pid) before
any rank starts, and refuses to start while that holder is alive, naming it. A holder that has
ended (finished, failed, cancelled, timed out: no longer in ``squeue``, or its process gone)
never blocks, so a retry or a resubmission after a kill takes the folder over.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from workflow_scripts.atomic import write_json
from workflow_scripts.errors import UserInputError

OWNER_FILE = "owner.json"
# squeue states of a job that may still write (everything but the states it leaves squeue in).
_ENDED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                 "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT"}  # fmt: skip


@dataclass(frozen=True)
class Holder:
    """Who holds a work folder: a SLURM job (its id), or outside SLURM a process on a host."""

    slurm_job: str | None
    host: str
    pid: int

    def describe(self) -> str:
        where = f"on {self.host} (pid {self.pid})"
        return f"SLURM job {self.slurm_job} {where}" if self.slurm_job else f"a process {where}"


def this_job() -> Holder:
    return Holder(os.environ.get("SLURM_JOB_ID"), socket.gethostname(), os.getpid())


def state(holder: Holder) -> str | None:
    """The holder's state if it may still be running (a SLURM state, or ``running``), else None.

    A SLURM holder is asked of ``squeue``: a job it no longer lists, or lists in an ended state,
    has ended. Outside SLURM a process is alive while its pid exists on the same host; one of
    another host cannot be seen from here and counts as alive (the folder is then refused).
    """
    if holder.slurm_job:
        try:
            done = subprocess.run(
                ["squeue", "-h", "-j", holder.slurm_job, "-o", "%T"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except FileNotFoundError:
            raise UserInputError(
                f"cannot tell whether SLURM job {holder.slurm_job} still runs: squeue is not on PATH"
            ) from None
        listed = done.stdout.strip()
        return listed if done.returncode == 0 and listed and listed not in _ENDED_STATES else None
    if holder.host != socket.gethostname():
        return "running (on another host, unseen)"
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it exists, under another user
    return "running"


def take(work: Path) -> None:
    """Make this job the holder of ``work``; refuse, naming the holder, while another live job holds it."""
    check_free(work)
    write_json(Path(work) / OWNER_FILE, asdict(this_job()))


def check_free(work: Path) -> None:
    """Refuse, naming the holder, while a job other than this one that is still alive holds ``work``."""
    path = Path(work) / OWNER_FILE
    me = this_job()
    if path.is_file():
        try:
            holder = Holder(**json.loads(path.read_text()))
        except (ValueError, TypeError) as error:
            raise UserInputError(
                f"{path}: not a holder record ({error}); remove it if no job uses {work}"
            ) from None
        # The same SLURM job again (SLURM's own requeue keeps the id) or this process: not another job.
        same = holder == me or (holder.slurm_job is not None and holder.slurm_job == me.slurm_job)
        alive = None if same else state(holder)
        if alive:
            cancel = f"; or scancel {holder.slurm_job}" if holder.slurm_job else ""
            raise UserInputError(
                f"{work} is held by {holder.describe()}, {alive}: a training never shares its work folder; "
                f"wait for it to end{cancel}"
            )
