"""The CI's one-machine SLURM cluster (tests/cluster/slurm.sh) as the SLURM tests use it.

Its account and partition, Snakemake runs whose jobs it accounts (``sacct``), and the second
profile a CI run layers after the paper profile: the paper profile's ``default-resources`` and
``set-resources`` blocks with their placeholders replaced by the cluster's account and partition
(a later profile, like ``--default-resources`` on the command line, replaces a block as a whole).
"""

from __future__ import annotations

import getpass
import re
import shlex
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.dag import JOB_ENV, ROOT
from tests.dag import snakemake as run_snakemake

# The profile as users name it, from the repository root, where the checkout has that link.
PROFILE = "slurm" if (ROOT / "slurm").exists() else "profiles/slurm"
JOB_FIELDS = (
    "JobID",
    "NNodes",
    "State",
    "ExitCode",
    "Account",
    "Partition",
    "Timelimit",
    "ReqTRES",
    "AllocTRES",
    "Comment",
)


def command(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{shlex.join(args)}: {done.stderr.strip()} (is tests/cluster/slurm.sh up?)"
    return done.stdout


@dataclass(frozen=True)
class Cluster:
    account: str
    partition: str


def running_cluster() -> Cluster:
    """The running test cluster's account (this user's default) and default partition."""
    user = getpass.getuser()
    account = command("sacctmgr", "-n", "-P", "show", "user", user, "format=defaultaccount").strip()
    partitions = command("sinfo", "-h", "-o", "%P").split()
    default = [name.rstrip("*") for name in partitions if name.endswith("*")]
    assert account and default, (
        f"no account for {user} or no default partition: bring up tests/cluster/slurm.sh"
    )
    return Cluster(account, default[0])


@dataclass(frozen=True)
class Run:
    workdir: Path
    seconds: float
    output: str  # Snakemake's stdout and stderr
    started: str  # local time before the run, for sacct --starttime

    def job_counts(self) -> Counter[str]:
        """Jobs per rule from Snakemake's first "Job stats" table (what it planned to run)."""
        table = self.output.split("Job stats:", 1)[1].split("\ntotal", 1)[0]
        rows = (line.split() for line in table.splitlines()[3:])
        return Counter({row[0]: int(row[1]) for row in rows if len(row) == 2})

    def run_id(self) -> str:
        return re.search(r"SLURM run ID: (\S+)", self.output).group(1)

    def jobs(self, fields: tuple[str, ...] = JOB_FIELDS) -> list[dict[str, str]]:
        """The run's SLURM allocations from ``sacct``, each with its rule (from the plugin's comment:
        ``rule_<rule>`` or ``rule_<rule>_wildcards_<values>``)."""
        found = sacct("--allocations", "--name", self.run_id(), "--starttime", self.started, fields=fields)
        for job in found:
            job["rule"] = job["Comment"].removeprefix("rule_").split("_wildcards_")[0]
        return found

    def errors(self) -> str:
        """The paragraphs of Snakemake's output that report a failed or restarted job."""
        marks = ("Error", "Exception", "restart")
        return "\n\n".join(part for part in self.output.split("\n\n") if any(mark in part for mark in marks))

    def slurm_log(self, job_id: str, lines: int = 40) -> str:
        """The end of a job's SLURM log (the executor keeps a failed job's, removes a completed one's)."""
        found = sorted((self.workdir / ".snakemake" / "slurm_logs").rglob(f"{job_id}.log"))
        if not found:
            return f"(no SLURM log of job {job_id} under .snakemake/slurm_logs)"
        return "\n".join(found[0].read_text(errors="replace").splitlines()[-lines:])


def snakemake(workdir: Path, *args: str, env: dict[str, str] = JOB_ENV, timeout: float = 1800) -> Run:
    """A Snakemake run that must succeed (the end of its output otherwise), timed."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    begin = time.monotonic()
    done = run_snakemake(workdir, *args, env=env, timeout=timeout, stderr_into_stdout=True)
    assert done.returncode == 0, done.stdout[-6000:]
    return Run(workdir, time.monotonic() - begin, done.stdout, started)


def sacct(*args: str, fields: tuple[str, ...]) -> list[dict[str, str]]:
    lines = command("sacct", "--parsable2", "--noheader", "--format", ",".join(fields), *args).splitlines()
    return [dict(zip(fields, line.split("|", len(fields) - 1), strict=True)) for line in lines if line]


def filled(value, values: dict):
    """A profile block with its placeholders (``your_account``, ``your_partition``, ...) replaced."""
    if isinstance(value, dict):
        return {key: filled(item, values) for key, item in value.items()}
    return values.get(value, value) if isinstance(value, str) else value


def ci_blocks(paper: dict, cluster: Cluster) -> dict:
    """The paper profile's resource blocks at the CI cluster: its account, its partition for every rule."""
    values = {
        "your_account": cluster.account,
        "your_partition": cluster.partition,
        "your_cpu_partition": cluster.partition,
    }
    return {
        block: filled(paper[block], values)
        for block in ("default-resources", "set-resources")
        if block in paper
    }


def write_ci_profile(folder: Path, paper: dict, cluster: Cluster) -> Path:
    """The second profile in ``folder``: ``paper``'s resource blocks at ``cluster``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(ci_blocks(paper, cluster), sort_keys=False))
    return folder
