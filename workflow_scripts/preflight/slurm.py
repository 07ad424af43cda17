"""The SLURM half of preflight: the profiles' accounts, partitions, QOS and GPUs against the cluster.

What the executor plugin would pass to ``sbatch`` (``-A``, ``-p``, ``--qos``, ``--gpus``/``--gres``)
is checked against what the cluster reports, before anything is submitted: an account the user
has no association with, a partition that does not exist or is down, a QOS outside the
association, or more GPUs per node than the partition's nodes have each fail with the profile
file and key that set the value.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from workflow_scripts.preflight.checklist import FAIL, OK, SKIPPED, Check, named_list
from workflow_scripts.preflight.profiles import Resources, Setting

#: The shipped profile's placeholders (``your_account``, ``your_partition``): never a real name.
PLACEHOLDER = re.compile(r"your_\w*")
SINFO = ["sinfo", "--noheader", "--format=%P|%a|%D|%G"]
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::([^:,()]+))?:(\d+)")


def gpus_of_gres(gres: str) -> dict[str | None, int]:
    """GPUs per node by type (None: untyped) of a gres as ``sinfo`` prints it (``gpu:h200:8(S:0-1)``)."""
    found: dict[str | None, int] = {}
    for kind, count in _GRES_GPU.findall(gres):
        found[kind or None] = found.get(kind or None, 0) + int(count)
    return found


@dataclass
class Partition:
    """One partition as ``sinfo`` reports it: availability, node groups (nodes, GPUs per node by type)."""

    name: str
    default: bool = False
    availability: set[str] = field(default_factory=set)
    groups: list[tuple[int, dict[str | None, int]]] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return sum(count for count, _ in self.groups)

    def gpu_types(self) -> set[str]:
        return {kind for _, gpus in self.groups for kind in gpus if kind}

    def gpus_per_node(self, model: str | None = None) -> int:
        """The most GPUs (of ``model`` where given) one node of the partition has."""
        return max(
            (gpus.get(model, 0) if model else sum(gpus.values()) for _, gpus in self.groups), default=0
        )

    def nodes_with(self, gpus: int, model: str | None = None) -> int:
        return sum(
            count
            for count, per_node in self.groups
            if (per_node.get(model, 0) if model else sum(per_node.values())) >= gpus
        )

    def describe(self) -> str:
        most = self.gpus_per_node()
        kinds = ", ".join(f"gpu:{kind}" for kind in sorted(self.gpu_types()))
        gpus = f"{most} GPUs per node" + (f" ({kinds})" if kinds else "") if most else "no GPUs"
        return f"{self.nodes} nodes, {gpus}"


def parse_sinfo(text: str) -> dict[str, Partition]:
    """Partitions by name from ``sinfo --noheader --format=%P|%a|%D|%G`` (one line per node group)."""
    partitions: dict[str, Partition] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        name, availability, nodes, gres = line.split("|", 3)
        default = name.endswith("*")
        partition = partitions.setdefault(name.rstrip("*"), Partition(name.rstrip("*")))
        partition.default |= default
        partition.availability.add(availability)
        partition.groups.append((int(nodes), gpus_of_gres(gres)))
    return partitions


@dataclass(frozen=True)
class Association:
    """One row of ``sacctmgr show associations``: account, the partition it is limited to (None: any), QOS."""

    account: str
    partition: str | None
    qos: tuple[str, ...]


def parse_associations(text: str) -> list[Association]:
    """Rows of ``sacctmgr --noheader --parsable2 show associations user=U format=account,partition,qos``."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        account, partition, qos = line.split("|")[:3]
        rows.append(Association(account, partition or None, tuple(q for q in qos.split(",") if q)))
    return rows


@dataclass(frozen=True)
class Allocation:
    """A multi-node request the rule sets itself (a Megatron training: ``training.parallelism``)."""

    rule: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class _Request:
    """What one rule (None: every rule without a block of its own) would ask ``sbatch`` for."""

    rule: str | None
    account: Setting | None
    partition: Setting | None
    qos: Setting | None


def _run(command: Sequence[str], env: Mapping[str, str] | None) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=120, env=env)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"


def _wheres(settings: Sequence[Setting]) -> str:
    """Where values were set, by file: ``<file>: set-resources.a.key, set-resources.b.key and 3 more``."""
    keys: dict[str, list[str]] = {}
    for setting in settings:
        file, _, key = setting.where.rpartition(": ")
        keys.setdefault(file, []).append(key)
    return "; ".join(f"{file}: {named_list(list(dict.fromkeys(named)))}" for file, named in keys.items())


def checks(
    resources: Resources,
    allocations: Sequence[Allocation] = (),
    env: Mapping[str, str] | None = None,
    user: str | None = None,
) -> list[Check]:
    """The SLURM checks of ``resources`` and the rules' own ``allocations``, by the commands on PATH."""
    user = user or getpass.getuser()
    environment = dict(os.environ if env is None else env)
    path = environment.get("PATH", "")
    found: list[Check] = []
    partitions: dict[str, Partition] | None = None
    sinfo = shutil.which("sinfo", path=path)
    sacctmgr = shutil.which("sacctmgr", path=path)
    if sinfo is None:
        found.append(
            Check(
                "SLURM commands",
                FAIL,
                "sinfo is not on PATH: run preflight on the cluster's login "
                "node, where Snakemake submits with sbatch",
            )
        )
    else:
        done = _run(SINFO, environment)
        if done.returncode != 0:
            found.append(Check("SLURM commands", FAIL, f"sinfo failed: {_last_line(done.stderr)}"))
        else:
            partitions = parse_sinfo(done.stdout)
            note = "" if sacctmgr else "; sacctmgr is not on PATH, so the account checks are skipped"
            listed = f"partition{'s' * (len(partitions) != 1)} {', '.join(sorted(partitions))}"
            found.append(Check("SLURM commands", OK, f"sinfo at {sinfo} lists {listed}{note}"))
    associations: list[Association] | None = None
    why_no_associations = "sacctmgr is not on PATH"
    if sacctmgr is not None:
        command = [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "associations",
            f"user={user}",
            "format=account,partition,qos",
        ]
        done = _run(command, environment)
        if done.returncode == 0:
            associations = parse_associations(done.stdout)
        else:
            why_no_associations = f"sacctmgr failed: {_last_line(done.stderr)}"

    requests = [
        _Request(
            rule,
            resources.value(rule, "slurm_account"),
            resources.value(rule, "slurm_partition"),
            resources.value(rule, "qos"),
        )
        for rule in [None, *resources.rules()]
    ]
    found += _account_checks(requests, associations, why_no_associations, user, partitions)
    found += _partition_checks(requests, partitions)
    found += _qos_checks(requests, associations, why_no_associations, user)
    found += _gpu_checks(resources, allocations, partitions)
    return found


def _by_value(requests: Sequence[_Request], key: str) -> dict[object, list[_Request]]:
    groups: dict[object, list[_Request]] = {}
    for request in requests:
        setting = getattr(request, key)
        groups.setdefault(None if setting is None else setting.value, []).append(request)
    return groups


def _account_checks(
    requests: Sequence[_Request],
    associations: list[Association] | None,
    why_not: str,
    user: str,
    partitions: dict[str, Partition] | None,
) -> list[Check]:
    found = []
    how = f"sacctmgr show associations user={user} format=account"
    yours = named_list(list(dict.fromkeys(a.account for a in associations)), 8) if associations else None
    for account, group in _by_value(requests, "account").items():
        if account is None:
            found.append(
                Check("SLURM account", OK, "none set for some rules: they run under your default account")
            )
            continue
        name, where = f"SLURM account {account}", _wheres([r.account for r in group])
        if PLACEHOLDER.fullmatch(str(account)):
            listing = f"yours: {yours} ({how})" if yours else f"`{how}` lists yours"
            found.append(Check(name, FAIL, f"a placeholder ({where}): set your account there; {listing}"))
        elif associations is None:
            found.append(Check(name, SKIPPED, f"{why_not}; cannot tell whether {user} may use it ({where})"))
        elif not (rows := [a for a in associations if a.account == account]):
            found.append(Check(name, FAIL, f"{user} has no association with it ({where}); yours: {yours}"))
        elif all(row.partition for row in rows):
            allowed = sorted({row.partition for row in rows})
            outside = [r.partition for r in group if r.partition and str(r.partition.value) not in allowed]
            if outside:
                detail = (
                    f"{user}'s association with {account} holds only on partition {', '.join(allowed)}, "
                    f"and {outside[0].where} asks {outside[0].value}"
                )
                found.append(Check(name, FAIL, detail))
            else:
                found.append(
                    Check(name, OK, f"{user} has an association with it on {', '.join(allowed)} ({where})")
                )
        else:
            found.append(Check(name, OK, f"{user} has an association with it ({where})"))
    return found


def _partition_checks(requests: Sequence[_Request], partitions: dict[str, Partition] | None) -> list[Check]:
    found = []
    names = ", ".join(sorted(partitions)) if partitions is not None else None
    for value, group in _by_value(requests, "partition").items():
        if value is None:
            default = next((p.name for p in (partitions or {}).values() if p.default), None)
            found.append(
                Check(
                    "SLURM partition",
                    OK,
                    "none set for some rules: they go to the default partition"
                    + (f" {default}" if default else ""),
                )
            )
            continue
        name, where = f"SLURM partition {value}", _wheres([r.partition for r in group])
        if PLACEHOLDER.fullmatch(str(value)):
            listing = f"the cluster's: {names}" if names else "`sinfo -s` lists the cluster's"
            found.append(Check(name, FAIL, f"a placeholder ({where}): set the partition there; {listing}"))
        elif partitions is None:
            found.append(Check(name, SKIPPED, f"sinfo did not answer ({where})"))
        elif (partition := partitions.get(str(value))) is None:
            found.append(Check(name, FAIL, f"does not exist ({where}); the cluster's partitions: {names}"))
        elif partition.availability != {"up"}:
            states = "/".join(sorted(partition.availability))
            found.append(
                Check(name, FAIL, f"is {states} according to sinfo ({where}): choose another partition")
            )
        else:
            found.append(Check(name, OK, f"up, {partition.describe()} ({where})"))
    return found


def _qos_checks(
    requests: Sequence[_Request], associations: list[Association] | None, why_not: str, user: str
) -> list[Check]:
    groups = {value: group for value, group in _by_value(requests, "qos").items() if value is not None}
    if not groups:
        return [Check("SLURM QOS", SKIPPED, "none requested (the association's default applies)")]
    found = []
    for value, group in groups.items():
        name, where = f"SLURM QOS {value}", _wheres([r.qos for r in group])
        if PLACEHOLDER.fullmatch(str(value)):
            found.append(Check(name, FAIL, f"a placeholder ({where}): set it, or remove the key"))
            continue
        if associations is None:
            found.append(Check(name, SKIPPED, f"{why_not} ({where})"))
            continue
        failed = None
        for request in group:
            account = request.account.value if request.account else None
            rows = [a for a in associations if account is None or a.account == account]
            allowed = list(dict.fromkeys(q for row in rows for q in row.qos))
            if str(value) not in allowed:
                failed = (
                    f"not among the QOS of {user}'s association with {account or 'any account'}: "
                    f"{', '.join(allowed) or 'none'} ({request.qos.where})"
                )
                break
        found.append(Check(name, FAIL, failed) if failed else Check(name, OK, f"allowed ({where})"))
    return found


def _gpu_request(resources: Resources, rule: str | None) -> tuple[int, str | None, Setting] | None:
    """GPUs per job, their type, and the setting that asks (``gpu``/``gpu_model`` or ``gres``), or None."""
    gpu, model = resources.value(rule, "gpu"), resources.value(rule, "gpu_model")
    if gpu is not None and int(gpu.value) > 0:
        return int(gpu.value), (str(model.value) if model else None), gpu
    gres = resources.value(rule, "gres")
    if gres is not None and (per_type := gpus_of_gres(str(gres.value))):
        kind, count = next(iter(per_type.items()))
        return count, kind, gres
    return None


def _partition_of(
    resources: Resources, rule: str | None, partitions: dict[str, Partition] | None
) -> tuple[Partition | None, str]:
    """The partition ``rule`` runs in, or None and why it cannot be checked."""
    setting = resources.value(rule, "slurm_partition")
    if partitions is None:
        return None, "sinfo did not answer"
    if setting is None:
        default = next((p for p in partitions.values() if p.default), None)
        return default, "" if default else "no partition set and the cluster has no default"
    partition = partitions.get(str(setting.value))
    if partition is None and PLACEHOLDER.fullmatch(str(setting.value)):
        return None, f"its partition is the placeholder {setting.value} (see its line)"
    return partition, "" if partition else f"partition {setting.value} does not exist (see its line)"


def _gpu_checks(
    resources: Resources, allocations: Sequence[Allocation], partitions: dict[str, Partition] | None
) -> list[Check]:
    found = []
    for rule in [None, *resources.rules()]:
        if (request := _gpu_request(resources, rule)) is None:
            continue
        count, model, setting = request
        name = f"GPUs of {rule or 'every rule'}"
        partition, why = _partition_of(resources, rule, partitions)
        if partition is None:
            found.append(Check(name, SKIPPED, why))
        elif model and model not in partition.gpu_types():
            kinds = ", ".join(f"gpu:{kind}" for kind in sorted(partition.gpu_types())) or "no typed GPUs"
            found.append(
                Check(
                    name,
                    FAIL,
                    f"no gpu:{model} on partition {partition.name} (its nodes have {kinds}; {setting.where})",
                )
            )
        elif (most := partition.gpus_per_node(model)) < count:
            found.append(
                Check(
                    name,
                    FAIL,
                    f"{count} GPUs asked ({setting.where}), and partition {partition.name} "
                    f"has at most {most} GPUs per node",
                )
            )
        else:
            found.append(Check(name, OK, f"{count} on {partition.name} ({most} per node; {setting.where})"))
    for allocation in allocations:
        name = f"GPUs of {allocation.rule}"
        partition, why = _partition_of(resources, allocation.rule, partitions)
        asked = f"{allocation.nodes} nodes x {allocation.gpus_per_node} GPUs"
        if partition is None:
            found.append(Check(name, SKIPPED, why))
            continue
        have = partition.nodes_with(allocation.gpus_per_node)
        detail = (
            f"{asked} (config.yaml training.parallelism) on {partition.name}, which has {have} nodes "
            f"with {allocation.gpus_per_node} GPUs or more"
        )
        if have < allocation.nodes:
            found.append(
                Check(
                    name,
                    FAIL,
                    f"{detail}: lower training.parallelism.nodes or choose a partition with more such nodes",
                )
            )
        else:
            found.append(Check(name, OK, detail))
    return found
