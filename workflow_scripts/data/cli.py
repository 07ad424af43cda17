"""``python -m workflow_scripts data <command>``: raw sources in, corpus splits out.

    python -m workflow_scripts data toy-raw --format glm_sharegpt --subset Math --rows 400 \\
        --seed 0 --bad-fraction 0.1 --out results/raw/glm51/Math.parquet
    python -m workflow_scripts data download --format glm_sharegpt \\
        --repo Jackrong/GLM-5.1-Reasoning-1M-Cleaned --revision <commit> --subset Math --split train \\
        --out results/raw/glm51/Math.parquet --manifest results/raw/glm51/Math.manifest.json
    python -m workflow_scripts data build --raw results/raw/glm51/Math.parquet --format glm_sharegpt \\
        --corpus math20k --spec '{"domain": "math", ...}' --scoring '{...}' \\
        --train results/data/math20k/train.parquet --probe results/data/math20k/probe.parquet \\
        --report results/data/math20k/report.json
"""

from __future__ import annotations

import argparse
import sys

from workflow_scripts.atomic import write_json, write_parquet
from workflow_scripts.commands import add_command, add_stage, json_argument
from workflow_scripts.errors import UserInputError

FORMAT_CHOICES = ("glm_sharegpt", "openr1")


def run_toy_raw(args: argparse.Namespace) -> None:
    from workflow_scripts.chat_sources.toy import generate

    write_parquet(generate(args.format, args.subset, args.rows, args.seed, args.bad_fraction), args.out)


def run_download(args: argparse.Namespace) -> None:
    """Download one subset/split of a training source at a commit (hub.lock.yaml), columns declared.

    The revision must be a commit: the workflow passes the locked one (``workflow_scripts.hub``),
    so the rows never depend on the day the job runs. GLM-5.1's JSON subsets are loaded with
    their columns declared (``chat_sources.hub_features``), or a column first seen past datasets'
    first 10 MB chunk would stop the download partway.
    """
    try:
        import datasets  # noqa: F401
        import huggingface_hub  # noqa: F401
    except ImportError as error:
        raise UserInputError(
            f"data download needs the 'datasets' and 'huggingface_hub' packages ({error}); "
            "install them from envs/ or use 'data toy-raw' at toy scale"
        ) from error
    from workflow_scripts import hub
    from workflow_scripts.chat_sources.hub_features import hub_features

    hub.require_commit(args.repo, args.revision)
    if args.gated:
        hub.require_token(args.repo, args.subset)
    if args.first_rows is not None and args.first_rows < 1:
        raise UserInputError(f"--first-rows {args.first_rows}: need at least one row")
    features = hub_features(args.format)
    dataset = hub.load_dataset_at(
        args.repo, args.subset, args.split, args.revision, features, args.first_rows
    )
    record = {"repo": args.repo, "subset": args.subset, "split": args.split, "format": args.format}
    if args.first_rows is not None:
        record["first_rows"] = args.first_rows
    hub.write_download(dataset, args.out, args.manifest, {**record, "revision_resolved": args.revision})


def run_build(args: argparse.Namespace) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workflow_scripts.chat_sources.readers import SHOWN_ROW_IDS, read_source
    from workflow_scripts.data.duplicates import drop_repeated_rows
    from workflow_scripts.data.report import build_report
    from workflow_scripts.data.scoring import ScoringConfig, score_frame
    from workflow_scripts.data.selection import CorpusSpec, select

    if not isinstance(args.spec, dict) or not isinstance(args.scoring, dict):
        raise UserInputError("--spec and --scoring must be JSON objects")
    spec = CorpusSpec.from_dict(args.spec, args.corpus)
    config = ScoringConfig.from_dict(args.scoring)
    source = read_source(args.raw, args.format)
    dropped = pq.ParquetFile(args.raw).metadata.num_rows - len(source)  # rows that were not clean text
    source, copies = drop_repeated_rows(source, args.raw)
    if len(copies):
        shown = ", ".join(map(str, copies[:SHOWN_ROW_IDS])) + (", ..." if len(copies) > SHOWN_ROW_IDS else "")
        print(
            f"{args.raw}: dropped {len(copies)} rows repeating an earlier row's id and content "
            f"(row ids {shown})",
            file=sys.stderr,
        )
    scored = score_frame(source, spec.domain, config)
    selection = select(scored, spec, args.corpus)
    columns = ["row_id", "source_id", "prompt", "answer", "score", *[c for c in scored if c.startswith("c_")]]
    for path, mask in ((args.train, selection.train), (args.probe, selection.probe)):
        # Masks keep the frame's order, which is source (row_id) order.
        write_parquet(pa.Table.from_pandas(scored.loc[mask, columns], preserve_index=False), path)
    report = build_report(scored, selection, args.corpus)
    repeats = {"rows_dropped_repeated": len(copies), "rows_dropped_repeated_row_ids": copies.tolist()}
    write_json(args.report, {**report, "rows_dropped_invalid_text": dropped, **repeats})


def register(stages: argparse._SubParsersAction) -> None:
    """Add the ``data`` stage and its commands."""
    commands = add_stage(stages, "data", "raw sources, corpus scoring and selection (Appendix F.2)")

    toy = add_command(
        commands, "toy-raw", run_toy_raw, "write a toy raw source in a real source schema", outputs=("out",)
    )
    toy.add_argument("--format", required=True, choices=FORMAT_CHOICES, help="source schema")
    toy.add_argument(
        "--subset", required=True, help="source subset (glm_sharegpt: main, Math; openr1: default)"
    )
    toy.add_argument("--rows", type=int, required=True, help="number of rows")
    toy.add_argument("--seed", type=int, default=0, help="generator seed")
    toy.add_argument("--bad-fraction", type=float, default=0.1, help="share of damaged rows, 0..1")
    toy.add_argument("--out", required=True, help="output parquet")

    download = add_command(
        commands,
        "download",
        run_download,
        "download one subset/split of a hub dataset at a commit to parquet",
        outputs=("out", "manifest"),
    )
    download.add_argument(
        "--repo", required=True, help="hub dataset id, e.g. Jackrong/GLM-5.1-Reasoning-1M-Cleaned"
    )
    download.add_argument(
        "--format", required=True, choices=FORMAT_CHOICES, help="source schema (declares GLM-5.1's columns)"
    )
    download.add_argument(
        "--revision",
        required=True,
        help="hub commit, 40 hex digits ('python -m workflow_scripts lock' resolves refs)",
    )
    download.add_argument("--subset", required=True, help="dataset config name, e.g. Math")
    download.add_argument("--split", default="train", help="split name")
    download.add_argument("--out", required=True, help="output parquet")
    download.add_argument("--manifest", required=True, help="output JSON: repo, revisions, rows, sha256")
    download.add_argument(
        "--first-rows",
        type=int,
        default=None,
        help="keep only the split's first N rows, streamed (the rehearsal's; default: every row)",
    )
    download.add_argument(
        "--gated",
        action="store_true",
        help="the dataset is gated (e.g. Idavidrein/gpqa): fail before any download when no hub token is set",
    )

    build = add_command(
        commands,
        "build",
        run_build,
        "score a raw source and write a corpus's train split, probe pool and report",
        inputs=("raw",),
        outputs=("train", "probe", "report"),
    )
    build.add_argument("--raw", required=True, help="raw source parquet")
    build.add_argument("--format", required=True, choices=FORMAT_CHOICES, help="source schema")
    build.add_argument(
        "--corpus", required=True, help="corpus id, e.g. math20k (used in messages and the report)"
    )
    build.add_argument("--spec", required=True, type=json_argument, help="corpus spec as JSON")
    build.add_argument("--scoring", required=True, type=json_argument, help="the scoring block as JSON")
    build.add_argument("--train", required=True, help="output parquet: training rows, in row_id order")
    build.add_argument("--probe", required=True, help="output parquet: probe pool rows, in row_id order")
    build.add_argument("--report", required=True, help="output JSON: counts, penalties, score distribution")
