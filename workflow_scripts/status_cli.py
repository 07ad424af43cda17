"""``python -m workflow_scripts status [OUTPUT ...]``: where a run stands, from the checkout it runs in.

For each table or figure (default: every one, as ``all`` builds them): complete (its files and
its provenance manifest present), or the jobs it still needs by rule, from Snakemake's own dry
run in the checkout under the profile's config files (``--nolock``: it never waits for, nor
disturbs, a Snakemake that is running); the SLURM jobs of yours that run now, by rule
(``squeue --me``); and GPU-hours spent (the provenance records under ``results/``) beside the
compute plan's estimate of what is left. A top-level command like ``plan``; it changes nothing.

    python -m workflow_scripts status                       # every output, under profiles/slurm
    python -m workflow_scripts status table5 --profile profiles/local
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from workflow_scripts.errors import UserInputError

DEFAULT_PROFILE = "slurm"  # the link at the repository root to profiles/slurm, as users name it
PROFILE_FILES = ("config.v8+.yaml", "config.yaml")  # what Snakemake 9 reads in a profile folder, first found
RERUN_TRIGGERS = ("code", "input", "mtime", "params", "software-env")
PROTECTED_HINT = (
    "a job whose outputs are write-protected would rerun (docs/operating.md, 'Rerunning one table'); "
    "to count what a run with narrower triggers would do: status --rerun-triggers mtime input"
)


def profile_settings(folders: list[str]) -> dict[str, Any]:
    """The keys of the profiles' files, a later profile's replacing an earlier one's (as in Snakemake)."""
    settings: dict[str, Any] = {}
    for folder in folders:
        found = [Path(folder) / name for name in PROFILE_FILES if (Path(folder) / name).is_file()]
        if not found:
            raise UserInputError(
                f"--profile {folder}: no {' or '.join(PROFILE_FILES)} there (a profile folder)"
            )
        try:
            loaded = yaml.safe_load(found[0].read_text()) or {}
        except yaml.YAMLError as error:
            raise UserInputError(f"{found[0]}: not valid YAML ({error})") from None
        if not isinstance(loaded, dict):
            raise UserInputError(f"{found[0]}: not a mapping of Snakemake options")
        settings.update(loaded)
    return settings


def _listed(value: Any) -> list[str]:
    """A profile value that may be one string or a list."""
    if value is None:
        return []
    return [str(value)] if isinstance(value, str) else [str(item) for item in value]


def _records(results: Path) -> list[tuple[str, Any]]:
    """Every provenance record under ``results``: (path, its JSON, or why it cannot be read)."""
    from workflow_scripts.records.verify import RECORD_PATTERN

    found = []
    for path in sorted(results.rglob(RECORD_PATTERN)) if results.is_dir() else []:
        try:
            found.append((str(path), json.loads(path.read_text())))
        except (OSError, ValueError) as error:
            found.append((str(path), f"unreadable ({error})"))
    return found


def _squeue() -> tuple[str | None, str]:
    """``squeue --me`` in the plugin-aware format, or None and why it could not be asked."""
    from workflow_scripts.run_status import SQUEUE_FORMAT

    if shutil.which("squeue") is None:
        return None, "no SLURM here (squeue not found)"
    command = ["squeue", "--me", "--noheader", f"--format={SQUEUE_FORMAT}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, "squeue did not answer within 120 s"
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return None, f"squeue failed: {said}"
    return done.stdout, ""


def run(args: argparse.Namespace) -> None:
    from workflow_scripts import registry, run_status
    from workflow_scripts.compute_plan import ALL, GATES, PAPER_ROWS, plan
    from workflow_scripts.dag_inputs import output_files
    from workflow_scripts.layout import RESULTS, manifest_path
    from workflow_scripts.provenance.settings import dry_run

    profiles = args.profile or [DEFAULT_PROFILE]
    settings = profile_settings(profiles)
    overlays = args.configfiles or _listed(settings.get("configfiles", settings.get("configfile")))
    config_files = [registry.CONFIG_FILE, *overlays]
    config = registry.load_config(config_files)
    known = registry.outputs(config)
    unknown = [output for output in args.output_ids if output not in known]
    if unknown:
        raise UserInputError(
            f"{', '.join(unknown)}: no such table or figure (known: {', '.join(sorted(known))})"
        )
    output_ids = args.output_ids or sorted(known)

    files = {
        output: [*output_files(config, output), str(manifest_path(RESULTS, output))] for output in output_ids
    }
    triggers = args.rerun_triggers or _listed(settings.get("rerun-triggers"))
    options = ["--rerun-incomplete", *(["--rerun-triggers", *triggers] if triggers else [])]
    targets = [str(manifest_path(RESULTS, output)) for output in output_ids]
    try:
        printed = dry_run(targets, overlays, Path.cwd(), options, shadow=False)
    except UserInputError as error:
        hint = f"\n{PROTECTED_HINT}" if "Write-protected" in str(error) else ""
        raise UserInputError(f"{error}{hint}") from None
    jobs = run_status.planned_jobs(printed)

    rows = {corpus: count for corpus, count in PAPER_ROWS.items() if corpus in config["corpora"]}
    rows = {
        corpus: count for corpus, count in rows.items() if config["corpora"][corpus]["train_rows"] is None
    }
    whole = plan(config, ALL, rows)
    outputs = []
    for output in output_ids:
        missing = [path for path in files[output] if not Path(path).exists()]
        means = run_status.mean_gpu_hours(plan(config, output, rows).classes)
        outputs.append(run_status.output_status(output, files[output], missing, jobs, means))
    needed = run_status.jobs_of([path for paths in files.values() for path in paths], jobs)

    squeue, note = _squeue()
    slurm = None if squeue is None else tuple(run_status.slurm_jobs(squeue))
    # The gates' likelihood jobs are not in `all` at paper scale: their GPUs come from their own plan.
    planned = {c.name for c in whole.classes}
    classes = [*whole.classes, *(c for c in plan(config, GATES, rows).classes if c.name not in planned)]
    spent = run_status.spent_hours(_records(Path(RESULTS)), {c.name: c.gpus_per_job for c in classes})
    means = run_status.mean_gpu_hours(whole.classes)
    gpu = run_status.gpu_hours(classes, spent, needed, means)
    status = run_status.Status(
        profiles=tuple(profiles),
        config_files=tuple(config_files),
        outputs=tuple(outputs),
        needed=run_status.rule_counts(needed),
        slurm=slurm,
        slurm_note=note,
        gpu=tuple(gpu),
        spent=spent,
    )
    if args.json:
        as_data = asdict(status)
        as_data["outputs"] = [{**asdict(output), "state": output.state} for output in status.outputs]
        as_data["gpus_per_job"] = run_status.GPU_SOURCE
        print(json.dumps(as_data, indent=2))
    else:
        print(run_status.render(status))


def register(stages: argparse._SubParsersAction) -> None:
    summary = "which tables and figures are complete, the jobs each still needs, GPU-hours spent and left"
    parser = stages.add_parser(
        "status", help=summary, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "output_ids",
        nargs="*",
        metavar="OUTPUT",
        help="table or figure ids (default: every one, as `all` builds)",
    )
    parser.add_argument(
        "--profile",
        action="append",
        metavar="DIR",
        help=f"the run's Snakemake profile folder, for its configfiles and rerun-triggers (default: "
        f"{DEFAULT_PROFILE}); repeatable like snakemake's, a later profile's keys replacing an earlier one's",
    )
    parser.add_argument(
        "--configfiles",
        nargs="+",
        metavar="FILE",
        help="the overlays the run gives snakemake --configfiles (they replace the profile's, as there)",
    )
    parser.add_argument(
        "--rerun-triggers",
        nargs="+",
        choices=RERUN_TRIGGERS,
        metavar="TRIGGER",
        help=f"the run's snakemake --rerun-triggers ({', '.join(RERUN_TRIGGERS)}; default: the profile's, "
        "else all): jobs are counted as a run with these triggers would run them",
    )
    parser.add_argument("--json", action="store_true", help="print the status as one JSON object, for tools")
    parser.set_defaults(
        run=run,
        command="status",
        provenance=None,
        inputs=(),
        outputs=(),
        input_kinds={},
    )
