"""``python -m workflow_scripts preflight [TARGET ...]``: the checklist before a paper-scale SLURM run.

    python -m workflow_scripts preflight table5                    # profile slurm, config.yaml
    python -m workflow_scripts preflight --profile slurm --profile ~/my-cluster all
    python -m workflow_scripts preflight table5 --gpu --nodes-reach-hub   # also two short srun jobs

One line per check (ok, FAIL or skipped, and why); a FAIL names the file and key to fix, and
the command then exits with status 2. Every ``snakemake --profile slurm`` run runs the same
checks first (without the srun jobs), from the ``onstart`` hook, and stops before its first
``sbatch`` when one fails (``--no-hooks`` skips them).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts import hub, layout, registry
from workflow_scripts.commands import add_registry_arguments, registry_config
from workflow_scripts.errors import UserInputError
from workflow_scripts.preflight import disk, hub_access, nodes, profiles, slurm, targets
from workflow_scripts.preflight.checklist import SKIPPED, Check, failure, render

DEFAULT_PROFILE = "slurm"


@dataclass(frozen=True)
class Options:
    """How far to check: the hub's timeout, and the checks that submit jobs (GPU software, nodes' network)."""

    hub_timeout: float = 20.0
    gpu: bool = False
    megatron_python: str | None = None
    eval_python: str | None = None
    nodes_reach_hub: bool = False


def register(stages: argparse._SubParsersAction) -> None:
    summary = "check the SLURM profile, hub access, revisions and disk before a paper-scale run"
    parser = stages.add_parser(
        "preflight", help=summary, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "targets",
        nargs="*",
        default=[targets.ALL],
        metavar="TARGET",
        help="table or figure ids, 'all' (default), or 'rehearsal' under the rehearsal overlay: their hub "
        "repositories and disk are checked",
    )
    add_registry_arguments(parser)
    parser.add_argument(
        "--profile",
        action="append",
        metavar="PROFILE",
        help=f"a Snakemake profile, as for snakemake --profile (default: {DEFAULT_PROFILE}); repeatable, "
        "a later one replaces an earlier one's top-level keys, as in Snakemake",
    )
    parser.add_argument(
        "--lock", default=hub.LOCK_FILE, help=f"the hub lock the downloads read (default: {hub.LOCK_FILE})"
    )
    parser.add_argument("--results", default=layout.RESULTS, help="the results folder whose disk is checked")
    parser.add_argument(
        "--hub-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="timeout of each hub request (seconds)",
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="submit one short one-GPU srun job per environment (Megatron, evaluation): imports and CUDA",
    )
    parser.add_argument(
        "--megatron-python",
        metavar="PATH",
        help="the Megatron environment's Python (default: training.container's image, or .venvs/megatron)",
    )
    parser.add_argument(
        "--eval-python", metavar="PATH", help="the eval environment's interpreter (default .venvs/eval)"
    )
    parser.add_argument(
        "--nodes-reach-hub",
        action="store_true",
        help="submit a short srun job on the CPU partition that asks the hub (optional check)",
    )
    parser.set_defaults(run=run, command="preflight", provenance=None, inputs=(), outputs=(), input_kinds={})


def run_checks(
    config: Mapping[str, Any],
    ids: Sequence[str],
    resources: profiles.Resources,
    megatron: bool,
    hub_entries: Iterable[tuple[str, str]],
    lock: hub.Lock,
    results: Path,
    options: Options,
    environ: Mapping[str, str],
) -> list[Check]:
    """Every check, in checklist order: SLURM, the hub, disk, then the jobs on nodes (or how to run them)."""
    parallelism = config["training"]["parallelism"]
    training = slurm.Allocation("train_megatron", parallelism["nodes"], parallelism["gpus_per_node"])
    allocations = [training] if megatron else []
    found = slurm.checks(resources, allocations, env=environ)
    endpoint = hub_access.endpoint()
    repos = targets.hub_repos(config, hub_entries, lock)
    found += hub_access.checks(repos, endpoint, hub_access.token(), timeout=options.hub_timeout)
    found.append(disk.check(config, ids, results, disk.hf_home(environ)))
    if options.gpu:
        softwares = nodes.software(
            config["training"]["container"], options.megatron_python, options.eval_python, environ
        )
        found += nodes.gpu_checks(resources, softwares, environ)
    else:
        found.append(Check("GPU software", SKIPPED, f"needs a GPU node: run {nodes.HOW_TO_RUN}"))
    if options.nodes_reach_hub:
        found.append(nodes.hub_reach_check(resources, endpoint, environ))
    else:
        found.append(
            Check(
                "compute nodes reach the hub",
                SKIPPED,
                "optional: --nodes-reach-hub runs a short srun job on the CPU partition that asks the hub",
            )
        )
    return found


def _header(ids: Sequence[str], resources: profiles.Resources, config_files: Sequence[str]) -> str:
    shown = ", ".join(ids) if ids else "the run's targets (no table or figure)"
    used = ", ".join(resources.files) or "none"
    return f"preflight of {shown} (profiles: {used}; config: {', '.join(map(str, config_files))})"


def run(args: argparse.Namespace) -> None:
    config = registry_config(args)
    named = [targets.ALL] + [registry.REHEARSAL] * (registry.REHEARSAL in config)
    known = registry.outputs(config)
    for target in args.targets:
        if target not in named and target not in known:
            raise UserInputError(f"unknown target {target!r} (known: {', '.join(named + sorted(known))})")
    ids = [targets.ALL] if targets.ALL in args.targets else list(dict.fromkeys(args.targets))
    resources = profiles.Resources.layered(profiles.read_named(args.profile or [DEFAULT_PROFILE]))
    options = Options(
        args.hub_timeout, args.gpu, args.megatron_python, args.eval_python, args.nodes_reach_hub
    )
    found = run_checks(
        config,
        ids,
        resources,
        targets.trains_with_megatron(config, ids),
        targets.hub_entries_of_targets(config, ids),
        hub.read_lock(args.lock),
        Path(args.results),
        options,
        os.environ,
    )
    print(_header(ids, resources, [args.config, *args.overlay]))
    print(render(found))
    sys.stdout.flush()
    if message := failure(found):
        raise UserInputError(message)


def before_slurm_run(
    config: Mapping[str, Any],
    config_files: Sequence[str],
    target_files: Iterable[str],
    target_rules: Iterable[str],
    jobs: Sequence[tuple[str, Mapping[str, str]]],
    lock: hub.Lock,
    argv: Sequence[str],
    say: Callable[[str], None],
) -> str | None:
    """Preflight in a SLURM run (Snakemake's ``onstart``): the checklist via ``say``; why to stop, or None.

    The run's targets are its requested tables and figures, its hub repositories those of its
    download jobs (``jobs``: rule name and wildcards of every job of the DAG, done or not) at the
    revisions the rules pass (config.yaml's, or ``lock``'s commit for a ref), its profiles those
    of Snakemake's command line (``argv``). The checks that submit jobs are left
    to the command (how to run them is printed).
    """
    try:
        resources = profiles.Resources.layered(profiles.read_named(profiles.from_argv(argv, os.environ)))
        ids = targets.of_run(config, target_files, target_rules)
        megatron = targets.megatron_rules(config, {rule for rule, _ in jobs})
        entries = targets.hub_entries_of_jobs(jobs)
        found = run_checks(
            config, ids, resources, megatron, entries, lock, Path(layout.RESULTS), Options(), os.environ
        )
    except UserInputError as error:
        return f"preflight: {error}"
    say(_header(ids, resources, config_files) + "\n" + render(found))
    message = failure(found)
    return None if message is None else f"{message} (python -m workflow_scripts preflight runs them alone)"
