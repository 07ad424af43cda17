"""``python -m workflow_scripts priors <command>``: the frozen-base RPB prior of a split.

    python -m workflow_scripts priors compute --model results/models/moonlight/base \\
        --split results/data/math20k/train.parquet --prior results/priors/moonlight/math20k/prior.npy \\
        --meta results/priors/moonlight/math20k/meta.json \\
        --stats results/priors/moonlight/math20k/stats.json \\
        --batch-size 8 --max-length 8192 --clip-eps 0.05 --clip-c 5.0
    python -m workflow_scripts priors shuffle --prior results/priors/moonlight/math20k/prior.npy \
        --partition results/graphs/moonlight/math20k/base/partition.json --top-k 6 --seed 0 \
        --validation-seeds 0 1 2 --rhos 0.05 0.10 0.15 0.20 \
        --within results/priors/moonlight/math20k/shuffled-within.npy \
        --global results/priors/moonlight/math20k/shuffled-global.npy \
        --validation results/priors/moonlight/math20k/prior_validation.json
"""

from __future__ import annotations

import argparse

from workflow_scripts.atomic import write_json
from workflow_scripts.commands import add_command, add_stage
from workflow_scripts.errors import UserInputError

SPLIT_COLUMNS = ("row_id", "prompt", "answer")


def _read_split(path: str):
    import pandas as pd
    import pyarrow as pa

    try:
        frame = pd.read_parquet(path, columns=list(SPLIT_COLUMNS))
    except (OSError, KeyError, ValueError, pa.ArrowException) as error:
        raise UserInputError(
            f"--split {path}: cannot read columns {list(SPLIT_COLUMNS)} ({error})"
        ) from error
    if frame.empty:
        raise UserInputError(f"--split {path} has no rows")
    return frame


def run_compute(args: argparse.Namespace) -> None:
    """Frozen-base pass over the split: prior .npy, its meta.json and its statistics."""
    import torch

    from workflow_scripts.file_formats.prior import load_prior
    from workflow_scripts.modeling.toy import load_local
    from workflow_scripts.priors.compute import compute_prior, prior_meta
    from workflow_scripts.priors.stats import prior_stats

    if args.batch_size <= 0 or args.max_length <= 0:
        raise UserInputError(
            f"--batch-size and --max-length must be positive, got {args.batch_size}, {args.max_length}"
        )
    if not 0.0 < args.clip_eps <= args.clip_c:
        raise UserInputError(f"need 0 < --clip-eps <= --clip-c, got {args.clip_eps}, {args.clip_c}")
    split = _read_split(args.split)
    try:
        model, tokenizer = load_local(args.model)
    except (OSError, ValueError) as error:
        raise UserInputError(f"--model {args.model}: {error}") from error
    if torch.cuda.is_available():
        model = model.to("cuda")
    rows = list(zip(split["prompt"].tolist(), split["answer"].tolist(), strict=True))
    try:
        result = compute_prior(model, tokenizer, rows, args.prior, args.batch_size, args.max_length)
    except ValueError as error:
        raise UserInputError(f"priors compute: {error}") from error
    meta = prior_meta(
        result,
        split["row_id"].tolist(),
        args.split,
        args.model,
        tokenizer.chat_template,
        args.max_length,
        args.batch_size,
        args.clip_eps,
        args.clip_c,
        architecture=getattr(model.config, "model_type", None),
        prior_path=args.prior,
    )
    write_json(args.meta, meta)
    write_json(args.stats, prior_stats(load_prior(args.prior), args.clip_eps, args.clip_c))


def run_shuffle(args: argparse.Namespace) -> None:
    """Within-community and global shuffles of a prior, and their prior-side validation (Appendix E, B.2)."""

    from workflow_scripts.file_formats.partition import load_partition_labels
    from workflow_scripts.file_formats.prior import load_prior
    from workflow_scripts.priors.shuffle import (
        apply_permutations,
        global_permutations,
        within_community_permutations,
    )
    from workflow_scripts.priors.validation import prior_side_strength, within_shuffle_community_check
    from workflow_scripts.records import path_digest

    prior = load_prior(args.prior)
    partition = load_partition_labels(args.partition)
    if partition.shape != prior.shape[2:]:
        raise UserInputError(
            f"--partition {args.partition}: labels of shape {partition.shape}, "
            f"the prior has (L, E) = {prior.shape[2:]}"
        )
    scopes = {
        "within": (within_community_permutations(partition, args.seed), args.within),
        "global": (global_permutations(*partition.shape, args.seed), args.global_out),
    }
    strength = {}
    files = {"source": path_digest(args.prior)}  # checksums the trainer checks (check_prior_file)
    for scope, (perms, path) in scopes.items():
        apply_permutations(prior, perms, path)
        files[scope] = path_digest(path)
        strength[scope] = prior_side_strength(prior, load_prior(path), args.top_k, args.clip_eps, args.clip_c)
        strength[scope]["permutations"] = perms.tolist()
    check = within_shuffle_community_check(
        prior, partition, args.validation_seeds, args.rhos, args.top_k, args.clip_eps, args.clip_c
    )
    write_json(
        args.validation, {"seed": args.seed, "files": files, "strength": strength, "community_check": check}
    )


def add_clip_arguments(parser: argparse.ArgumentParser) -> None:
    """The prior clamp [eps/E, C/E] of eq. (3), shared by every command that reads a prior's bias."""
    parser.add_argument("--clip-eps", type=float, default=0.05, help="clamp lower numerator (eps/E)")
    parser.add_argument("--clip-c", type=float, default=5.0, help="clamp upper numerator (C/E)")


def register(stages: argparse._SubParsersAction) -> None:
    """Add the ``priors`` stage and its commands."""
    commands = add_stage(stages, "priors", "frozen-base Q/A routing priors (eq. 2, Appendix F.7)")

    compute = add_command(
        commands,
        "compute",
        run_compute,
        "one frozen-base pass over a split: the (N, 2, L, E) prior, its meta and statistics",
        inputs=("model", "split"),
        folders=("model",),
        outputs=("prior", "meta", "stats"),
    )
    compute.add_argument("--model", required=True, help="base checkpoint directory")
    compute.add_argument("--split", required=True, help="split parquet (row_id, prompt, answer)")
    compute.add_argument(
        "--prior", required=True, help="output .npy: float32 (N, 2, L, E), row i = split row i"
    )
    compute.add_argument("--meta", required=True, help="output JSON: inputs' checksums, spans, token counts")
    compute.add_argument("--stats", required=True, help="output JSON: bias sd/range, clamp fractions")
    compute.add_argument("--batch-size", type=int, required=True, help="rows per forward pass")
    compute.add_argument(
        "--max-length", type=int, required=True, help="tokens kept per row (training sequence length)"
    )
    add_clip_arguments(compute)

    shuffle = add_command(
        commands,
        "shuffle",
        run_shuffle,
        "within-community and global expert shuffles of a prior, with their prior-side validation",
        inputs=("prior", "partition"),
        outputs=("within", "global_out", "validation"),
    )
    shuffle.add_argument("--prior", required=True, help="the base prior .npy (N, 2, L, E)")
    shuffle.add_argument(
        "--partition", required=True, help="base partition JSON with per-layer 'labels' (L, E)"
    )
    shuffle.add_argument("--top-k", type=int, required=True, help="the model's routing top-k")
    shuffle.add_argument("--seed", type=int, required=True, help="permutation seed of the training priors")
    shuffle.add_argument(
        "--validation-seeds", type=int, nargs="+", required=True, help="permutation seeds of the B.2 check"
    )
    shuffle.add_argument(
        "--rhos", type=float, nargs="+", required=True, help="edge fractions of the B.2 check"
    )
    add_clip_arguments(shuffle)
    shuffle.add_argument("--within", required=True, help="output .npy: within-community shuffled prior")
    shuffle.add_argument(
        "--global", dest="global_out", required=True, help="output .npy: globally shuffled prior"
    )
    shuffle.add_argument(
        "--validation",
        required=True,
        help="output JSON: sha256 of the source and shuffled priors, Table 13 strength and B.2 check",
    )
