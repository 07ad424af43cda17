"""One ``torchrun`` per node under ``srun``, with a c10d rendezvous taken from the SLURM allocation.

Inside a job the SLURM executor plugin leaves only ``SLURM_JOB_ID`` of the SLURM variables,
so the head node and the CPUs per task are read back from the scheduler (``squeue`` for the
node list, ``scontrol``). The ``srun`` step names its CPUs and GPUs itself: without them
they are SLURM's defaults, which the stripped ``SRUN_*`` variables no longer steer (one CPU
per task on many sites: under core binding torchrun, its ranks and their data loaders then
share one core). With a container image the step runs
``srun ... apptainer exec --nv <image> torchrun ...``: ``srun`` stays on the host, where
SLURM is. Node ranks come from the c10d rendezvous itself, so one argv serves every node.
Without a SLURM job a one-node run starts ``torchrun --standalone`` directly.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from workflow_scripts.errors import UserInputError


def head_node(job_id: str) -> str:
    """The first host of SLURM job ``job_id``'s allocation."""
    nodelist = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%N"], capture_output=True, text=True, check=True
    ).stdout.strip()
    hosts = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    ).stdout.split()
    if not hosts:
        raise UserInputError(f"SLURM job {job_id} has no nodes (squeue printed {nodelist!r})")
    return hosts[0]


def cpus_per_task(job_id: str) -> int:
    """The CPUs per task SLURM job ``job_id`` was granted (``CPUs/Task`` of ``scontrol show job``)."""
    record = subprocess.run(
        ["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"\bCPUs/Task=(\d+)", record)
    if not found:
        raise UserInputError(f"SLURM job {job_id}: no CPUs/Task in scontrol's record {record.strip()!r}")
    return int(found.group(1))


def container_prefix(image: str | None) -> list[str]:
    """The argv that runs a command in ``image`` with the node's GPUs (nothing without an image)."""
    return ["apptainer", "exec", "--nv", image] if image else []


#: Rendezvous ports: the first, and how many job ids spread over (all below Linux's ephemeral range).
RENDEZVOUS_PORT, RENDEZVOUS_PORTS = 29500, 2000


def rendezvous_port(job_id: str) -> int:
    """The c10d rendezvous port of a SLURM job on its head node, one per job id: two runs whose
    allocations share a node (a site without exclusive nodes, the CI's one-machine cluster) would
    otherwise both listen on one port, and the second would fail to start."""
    return RENDEZVOUS_PORT + int(job_id) % RENDEZVOUS_PORTS


def torchrun_command(
    nodes: int,
    gpus_per_node: int,
    entry: Sequence[str],
    launcher: str = "srun",
    head: str | None = None,
    port: int = RENDEZVOUS_PORT,
    job_id: str | None = None,
    cpus: int | None = None,
    image: str | None = None,
) -> list[str]:
    """The launch argv: ``srun`` one task per node with its ``cpus`` and GPUs, each ``torchrun``.

    One node needs no ``srun``: outside SLURM, and inside a SLURM job, whose one-node command the
    executor already runs in a step holding the job's CPUs and GPUs (a second step could not get
    them), ``torchrun`` starts standalone. ``image``: run torchrun (and so every rank) in that
    apptainer image, ``srun`` outside it.
    """
    module = ["-m", "workflow_scripts", *entry]
    inside = container_prefix(image)
    if nodes == 1:
        return [*inside, "torchrun", "--standalone", f"--nproc-per-node={gpus_per_node}", *module]
    if job_id is None:
        raise UserInputError(f"{nodes} nodes need a SLURM allocation (no SLURM_JOB_ID in the environment)")
    if cpus is None:
        raise UserInputError("a SLURM launch needs the CPUs per task of the allocation")
    return [
        launcher,
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus}",
        f"--gres=gpu:{gpus_per_node}",
        *inside,
        "torchrun",
        f"--nnodes={nodes}",
        f"--nproc-per-node={gpus_per_node}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={head}:{port}",
        f"--rdzv-id={job_id}",
        *module,
    ]


def training_work(entry: Sequence[str]) -> str | None:
    """The ``--work`` folder of a ``train megatron`` entry (``None`` for any other command)."""
    if list(entry[:2]) != ["train", "megatron"]:
        return None
    for at, argument in enumerate(entry):
        if argument == "--work" and at + 1 < len(entry):
            return entry[at + 1]
        if argument.startswith("--work="):
            return argument.partition("=")[2]
    return None


def run_launch(args: argparse.Namespace) -> None:
    """Start the run on every node of the allocation and wait for it; a failed rank fails the job.

    Before a training starts, this one process takes its work folder (``ownership.take``: refused
    while another live job holds it) and checks the checkpoint it will resume from against
    its digests (``resume.set_aside_damaged``), so that no rank reads a damaged one and no rank
    hashes hundreds of GB while the others wait.
    """
    entry = args.entry[1:] if args.entry[:1] == ["--"] else args.entry
    if not entry:
        raise UserInputError("nothing to launch: give the workflow_scripts command after '--'")
    work = training_work(entry)
    if work is not None:
        from workflow_scripts.train.megatron.ownership import take
        from workflow_scripts.train.megatron.resume import set_aside_damaged

        take(Path(work))  # before anything in the folder is touched: an orphan may still write there
        set_aside_damaged(Path(work))
    job_id = os.environ.get("SLURM_JOB_ID")
    head = head_node(job_id) if job_id else None
    cpus = cpus_per_task(job_id) if job_id else None
    port = args.port if args.port is not None else rendezvous_port(job_id) if job_id else RENDEZVOUS_PORT
    command = torchrun_command(
        args.nodes, args.gpus_per_node, entry, args.launcher, head, port, job_id, cpus, args.container
    )
    print("launching:", shlex.join(command), file=sys.stderr, flush=True)
    status = subprocess.run(command).returncode
    if status:
        raise SystemExit(status)


#: What torchrun sets for each rank; a command run without it cannot join a process group.
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def require_torchrun(command: str) -> None:
    """Refuse to start outside ``torchrun`` (as ``megatron-launch`` runs it), naming what is unset."""
    unset = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
    if unset:
        raise UserInputError(
            f"{command} runs on every rank under torchrun (train megatron-launch starts it); "
            f"{', '.join(unset)} not set"
        )


def rendezvous_report(out: str) -> None:
    """Join the job's process group and write who joined: a launch check without training.

    Every rank (under ``torchrun``) initialises the default group (NCCL when it has a GPU, gloo
    otherwise), gathers each rank's host, node rank, local rank, the CPUs it may run on and the
    container it runs in (apptainer's ``APPTAINER_CONTAINER``), and rank 0 writes one line per
    rank plus the rendezvous address to ``out``. A wrong allocation, launcher, CPU binding or
    rendezvous shows here in seconds instead of after a model has loaded.
    """
    import socket

    import torch
    import torch.distributed as dist

    from workflow_scripts.atomic import write_text

    require_torchrun("train megatron-rendezvous")
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    me = {
        "host": socket.gethostname(),
        "slurm_node": os.environ.get("SLURMD_NODENAME", ""),
        "node_rank": int(os.environ["GROUP_RANK"]),
        "rank": dist.get_rank(),
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "cpus": len(os.sched_getaffinity(0)),
        "container": os.environ.get("APPTAINER_CONTAINER") or "none",
    }
    everyone: list[dict] = [{} for _ in range(dist.get_world_size())]
    dist.all_gather_object(everyone, me)
    if dist.get_rank() == 0:
        address = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        lines = [f"world {dist.get_world_size()} rendezvous {address} backend {backend}"]
        lines += [
            f"rank {m['rank']} node_rank {m['node_rank']} local_rank {m['local_rank']} "
            f"host {m['host']} slurm_node {m['slurm_node']} cpus {m['cpus']} container {m['container']}"
            for m in sorted(everyone, key=lambda m: m["rank"])
        ]
        print("\n".join(lines), flush=True)
        write_text(out, "\n".join(lines) + "\n")
    dist.destroy_process_group()
