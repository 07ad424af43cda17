"""``python -m workflow_scripts probe <command>``: bias-free routes of a checkpoint on a probe pool.

    python -m workflow_scripts probe routes --checkpoint results/models/moonlight/base \\
        --pool results/data/math20k/probe.parquet --tokens 5000 --max-length 8192 \\
        --routes results/probe/moonlight/base/math20k/routes.npz \\
        --meta results/probe/moonlight/base/math20k/meta.json
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from workflow_scripts.atomic import atomic_path, write_json
from workflow_scripts.commands import add_command, add_stage, json_argument
from workflow_scripts.errors import UserInputError

POOL_COLUMNS = ("row_id", "prompt", "answer")


def _read_pool(path: str) -> list[tuple[int, str, str]]:
    """The pool's ``(row_id, prompt, answer)`` rows in file order; bad files are user errors."""
    import pandas as pd
    import pyarrow as pa

    try:
        frame = pd.read_parquet(path, columns=list(POOL_COLUMNS))
    except (OSError, KeyError, ValueError, pa.ArrowException) as error:
        raise UserInputError(f"--pool {path}: cannot read columns {list(POOL_COLUMNS)} ({error})") from error
    if frame.empty:
        raise UserInputError(f"--pool {path} has no rows")
    return list(
        zip(frame["row_id"].tolist(), frame["prompt"].tolist(), frame["answer"].tolist(), strict=True)
    )


def _load_moe(path: str) -> tuple[Any, Any]:
    """Model and tokenizer of a checkpoint with supported MoE gates, on the GPU when there is one."""
    import torch

    from workflow_scripts.modeling.toy import load_local
    from workflow_scripts.routing.hf import find_gates

    try:
        model, tokenizer = load_local(path)
        find_gates(model)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserInputError(f"--checkpoint {path}: not a supported MoE checkpoint ({error})") from error
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer


def run_routes(args: argparse.Namespace) -> None:
    """Select the probe tokens, record the stock routes, write the routes file and its meta."""
    from workflow_scripts.file_formats.routes import save_routes
    from workflow_scripts.probe.routes import probe_tokens, record_routes, routes_meta

    if args.tokens <= 0 or args.max_length <= 0:
        raise UserInputError(
            f"--tokens and --max-length must be positive, got {args.tokens}, {args.max_length}"
        )
    rows = _read_pool(args.pool)
    model, tokenizer = _load_moe(args.checkpoint)
    try:
        tokens = probe_tokens(tokenizer, rows, args.max_length, args.tokens)
    except ValueError as error:
        raise UserInputError(f"--pool {args.pool}: {error}") from error
    started = time.perf_counter()
    routes = record_routes(model, tokenizer, tokens)
    seconds = time.perf_counter() - started
    architecture = getattr(model.config, "model_type", None)
    meta = routes_meta(routes, tokens, args.checkpoint, args.pool, args.tokens, args.max_length, architecture)
    save_routes(args.routes, routes, tokens, meta, args.meta)
    rate = len(tokens) / max(seconds, 1e-9)
    print(f"probe routes: {len(tokens)} tokens in {seconds:.2f}s ({rate:.0f} tokens/s)", file=sys.stderr)
    if not meta["budget_reached"]:
        print(f"probe routes: the pool holds only {len(tokens)} of {args.tokens} tokens", file=sys.stderr)


def run_partition(args: argparse.Namespace) -> None:
    """The base partition of every layer, its modularity and the Q/A span profile (F.9, Table 11)."""
    from workflow_scripts.file_formats.routes import load_routes
    from workflow_scripts.probe.analysis import layer_partitions, modularities, span_profile
    from workflow_scripts.routing_metrics.communities import Detector

    routes, tokens = load_routes(args.routes)
    detector = Detector(**args.detector)
    kept, labels = layer_partitions(routes.topk, routes.num_experts, detector)
    write_json(
        args.out,
        {
            "detector": args.detector,
            "labels": labels.tolist(),
            "modularity": modularities(kept, labels, detector.resolution).tolist(),
            "spans": span_profile(routes.topk, tokens.spans, routes.num_experts),
        },
    )


def run_retention(args: argparse.Namespace) -> None:
    """Every retention metric of one probed checkpoint against its base (§2, B.1, B.2)."""
    import numpy as np
    import pandas as pd

    from workflow_scripts.file_formats.partition import load_partition_labels
    from workflow_scripts.file_formats.routes import load_routes
    from workflow_scripts.probe.analysis import nmi_sweep, null_model, retention
    from workflow_scripts.routing_metrics.communities import Detector

    (base, base_tokens), (run, run_tokens) = load_routes(args.base_routes), load_routes(args.routes)
    same = all(
        np.array_equal(getattr(base_tokens, name), getattr(run_tokens, name))
        for name in ("row_ids", "positions", "spans")
    )
    if not same:
        raise UserInputError(
            f"--routes {args.routes} and --base-routes {args.base_routes} probe different tokens"
        )
    detector, probe = Detector(**args.detector), args.probe
    experts = base.num_experts
    rows, summary = retention(base.topk, run.topk, experts, detector, probe["divergence_log_base"])
    base_labels = load_partition_labels(args.partition)
    null = probe["null_model"]
    null_rows, null_summary = null_model(
        run.topk, base_labels, experts, detector, null["samples"], null["seed"]
    )
    sweep = nmi_sweep(
        base.topk,
        run.topk,
        experts,
        probe["edge_fraction_sweep"],
        probe["robustness_detectors"],
        probe["detector_seeds"],
        detector.resolution,
        detector.tolerance,
        detector.max_iterations,
    )
    with atomic_path(args.layers) as tmp:
        pd.DataFrame(rows).merge(pd.DataFrame(null_rows), on="layer").to_parquet(tmp, index=False)
    write_json(args.out, {"summary": summary, "null_model": null_summary, "sweep": sweep})


def register(stages: argparse._SubParsersAction) -> None:
    """Add the ``probe`` stage and its commands."""
    commands = add_stage(stages, "probe", "bias-free routing probes (§2, Appendix F.8)")

    routes = add_command(
        commands,
        "routes",
        run_routes,
        "stock top-k and router probabilities of a checkpoint on the first N Q/A tokens of a probe pool",
        inputs=("checkpoint", "pool"),
        folders=("checkpoint",),
        outputs=("routes", "meta"),
    )
    routes.add_argument("--checkpoint", required=True, help="checkpoint directory (base or fine-tuned)")
    routes.add_argument("--pool", required=True, help="probe pool parquet (row_id, prompt, answer)")
    routes.add_argument("--tokens", type=int, required=True, help="Q/A tokens to probe (token budget)")
    routes.add_argument("--max-length", type=int, required=True, help="tokens kept per row")
    routes.add_argument("--routes", required=True, help="output .npz: topk, probs, row_ids, positions, spans")
    routes.add_argument(
        "--meta", required=True, help="output JSON: inputs' checksums, settings, token counts"
    )

    partition = add_command(
        commands,
        "partition",
        run_partition,
        "per-layer communities of the base router's co-activation graphs, with modularity and span profile",
        inputs=("routes",),
        outputs=("out",),
    )
    partition.add_argument("--routes", required=True, help="the base model's routes .npz")
    partition.add_argument("--detector", required=True, type=json_argument, help="detector settings (JSON)")
    partition.add_argument(
        "--out", required=True, help="output JSON: labels (L, E), modularity, span profile"
    )

    retention = add_command(
        commands,
        "retention",
        run_retention,
        "community NMI, Q, Delta Q, TVD/JSD, top-k overlap, B.2 sweeps, B.1 null margins of a checkpoint",
        inputs=("routes", "base_routes", "partition"),
        outputs=("out", "layers"),
    )
    retention.add_argument("--routes", required=True, help="the checkpoint's routes .npz")
    retention.add_argument("--base-routes", required=True, help="the base model's routes .npz (same tokens)")
    retention.add_argument("--partition", required=True, help="the base partition JSON")
    retention.add_argument("--detector", required=True, type=json_argument, help="detector settings (JSON)")
    retention.add_argument(
        "--probe", required=True, type=json_argument, help="the config 'probe' section (JSON)"
    )
    retention.add_argument(
        "--out", required=True, help="output JSON: layer means, null-model and sweep results"
    )
    retention.add_argument(
        "--layers", required=True, help="output parquet: per-layer metrics and the run's communities (labels)"
    )
