"""``python -m workflow_scripts plan <target>``: price a table, a figure or ``all`` before submitting it.

    python -m workflow_scripts plan all --nodes 32      # GPU- and CPU-hours, disk, makespan on 32 nodes
    python -m workflow_scripts plan profile             # rewrite profiles/slurm/config.yaml from the plan
    python -m workflow_scripts plan profile --check     # fail if the profile is not what it would write

A top-level command rather than a stage: it loads the registry as the workflow does
(``registry.load_config``: config file, optional overlay, validation, seed cap) and runs no rule.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.commands import add_registry_arguments, registry_config
from workflow_scripts.errors import UserInputError

PROFILE_TARGET = "profile"


def _row_count(text: str) -> tuple[str, int]:
    """argparse type of ``--rows corpus=N``."""
    corpus, equals, count = text.partition("=")
    if not equals or not corpus or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected CORPUS=N (N a row count), got {text!r}")
    return corpus, int(count)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _step_seconds(text: str) -> tuple[str, float]:
    """argparse type of ``--step-seconds model=S``."""
    model, equals, seconds = text.partition("=")
    if not equals or not model:
        raise argparse.ArgumentTypeError(f"expected MODEL=S (S seconds per optimizer step), got {text!r}")
    return model, _positive(seconds)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of nodes, got {text!r}")
    return int(text)


def register(stages: argparse._SubParsersAction) -> None:
    summary = (
        "print the GPU-hours, CPU-hours, disk and makespan a table, a figure, 'all' or 'gates' needs, "
        "before submitting it; 'profile' writes the SLURM profile from the plan"
    )
    parser = stages.add_parser("plan", help=summary, description=summary)
    parser.add_argument(
        "target",
        help="a table or figure id, 'all' for every one (what `snakemake` runs), 'gates' for the sanity "
        "gates, 'rehearsal' for the rehearsal's default target (with --overlay "
        f"profiles/rehearsal/rehearsal.yaml), or '{PROFILE_TARGET}': write every rule's SLURM request "
        "to --out",
    )
    add_registry_arguments(parser)
    parser.add_argument(
        "--rows",
        type=_row_count,
        action="append",
        default=[],
        metavar="CORPUS=N",
        help="training-split rows of a corpus (repeatable); needed where train_rows is null",
    )
    parser.add_argument(
        "--step-seconds",
        type=_step_seconds,
        action="append",
        default=[],
        metavar="MODEL=S",
        help="measured seconds per optimizer step of MODEL's training at the configured parallelism "
        "(Bridge's 'elapsed time per iteration' / 1000); prices its trainings instead of the MFU; repeatable",
    )
    parser.add_argument(
        "--decode-rate",
        type=_positive,
        metavar="TOKENS",
        help="measured decoded tokens per second per GPU of a generation job; replaces the assumed rate",
    )
    parser.add_argument(
        "--nodes",
        type=_count,
        metavar="N",
        help="GPU nodes of the makespan (default: one training's, training.parallelism.nodes)",
    )
    parser.add_argument(
        "--out",
        default=None,
        metavar="PATH",
        help="profile only: the profile file to write (default: profiles/slurm/config.yaml); its account "
        "and partitions are kept",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="profile only: write nothing, fail if --out differs from what the plan writes or asks a "
        "runtime below a rule's planned upper estimate",
    )
    parser.set_defaults(run=run, command="plan", provenance=None, inputs=(), outputs=(), input_kinds={})


def run(args: argparse.Namespace) -> None:
    from workflow_scripts.compute_plan import PAPER_ROWS, Calibration, plan, render

    config = registry_config(args)
    if args.target == PROFILE_TARGET:
        write_profile(args, config)
        return
    if args.out or args.check:
        raise UserInputError(f"--out and --check go with the target {PROFILE_TARGET!r}")
    given = dict(args.rows)
    defaults = {
        corpus: count
        for corpus, count in PAPER_ROWS.items()
        if corpus in config["corpora"] and config["corpora"][corpus]["train_rows"] is None
    }
    calibration = Calibration(dict(args.step_seconds), args.decode_rate)
    result = plan(config, args.target, {**defaults, **given}, calibration, args.nodes)
    for corpus, count in defaults.items():
        if corpus in result.rows and corpus not in given:
            print(
                f"note: {corpus}: {count} training rows, the paper's approximate count; "
                f"pass --rows {corpus}=N with the built split's count"
            )
    print(render(result))


def write_profile(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """``plan profile``: the SLURM profile from the plan, keeping the site values of the file it replaces."""
    from workflow_scripts import slurm_profile
    from workflow_scripts.atomic import write_text
    from workflow_scripts.compute_plan import Calibration

    if args.rows or args.nodes:
        raise UserInputError("plan profile prices openr1math at the paper's rows and needs no --nodes")
    path = Path(args.out or slurm_profile.PROFILE)
    requests = slurm_profile.requests(config, Calibration(dict(args.step_seconds), args.decode_rate))
    text = slurm_profile.render(config, requests, slurm_profile.read_site(path))
    if not args.check:
        write_text(path, text)
        print(f"wrote {path}: {len(requests)} rules")
        return
    current = path.read_text() if path.is_file() else ""
    problems = slurm_profile.short_runtimes(yaml.safe_load(current) or {}, requests)
    if current != text:
        problems.append(f"{path} is not what `plan profile` writes from this config: rerun it")
    if problems:
        raise UserInputError("; ".join(problems))
    print(f"{path}: as the plan writes it, every runtime at or above its rule's upper estimate")
