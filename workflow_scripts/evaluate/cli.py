"""``python -m workflow_scripts evaluate <command>``: benchmark items, generations, scores (§4, F.3-F.5).

    python -m workflow_scripts evaluate toy-benchmark --benchmark gsm8k --rows 8 --seed 1234 \\
        --out results/benchmarks/gsm8k/raw.parquet
    python -m workflow_scripts evaluate items --benchmark gsm8k \\
        --raw results/benchmarks/gsm8k/raw.parquet --spec '{...}' --shuffle-seed 42 \\
        --out results/benchmarks/gsm8k/items.parquet
    python -m workflow_scripts evaluate suite --items results/benchmarks/*/items.parquet \\
        --out results/benchmarks/suite.parquet
    python -m workflow_scripts evaluate generate --checkpoint results/models/moonlight/base \\
        --items results/benchmarks/suite.parquet --sampling '{...}' --backend hf \\
        --out results/evals/moonlight/base/generations.parquet
    python -m workflow_scripts evaluate score --items ... --generations .../generations.parquet \\
        --run '{"model": "moonlight", ...}' --scores .../scores.parquet --summary .../summary.json
    python -m workflow_scripts evaluate likelihood --checkpoint results/models/moonlight/base \\
        --items results/benchmarks/suite.parquet --routings own global_hard --families '{...}' \\
        --identity '{...}' --out .../likelihood.parquet --summary .../likelihood.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflow_scripts.atomic import write_json, write_parquet
from workflow_scripts.commands import add_command, add_stage, json_argument
from workflow_scripts.errors import UserInputError

if TYPE_CHECKING:
    from workflow_scripts.evaluate.generation import Completion
    from workflow_scripts.evaluate.shards import Shard

BACKENDS = ("hf", "vllm")
# The routings of ``evaluate likelihood`` (evaluate/likelihood.py ROUTINGS; a test holds them equal).
ROUTINGS = ("own", "own_prior_hard", "global_hard")
# In a generation's run folder: one empty file per shard an engine has taken (``shards.claim``).
CLAIMS = "claims"


def _read_parquet(path: str, what: str) -> Any:
    import pandas as pd
    import pyarrow as pa

    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise UserInputError(f"{what} {path}: cannot read parquet ({error})") from error


def _read_items(paths: Sequence[str]) -> Any:
    """All benchmarks' items, one frame; a file lacking an item column is named."""
    import pandas as pd

    from workflow_scripts.evaluate.items import ITEM_COLUMNS

    frames = []
    for path in paths:
        frame = _read_parquet(path, "--items")
        missing = [c for c in ITEM_COLUMNS if c not in frame.columns]
        if missing:
            raise UserInputError(f"--items {path}: missing columns {missing}")
        frames.append(frame[list(ITEM_COLUMNS)])
    items = pd.concat(frames, ignore_index=True)
    duplicated = items.duplicated(["benchmark", "item_id"])
    if duplicated.any():
        first = items[duplicated].iloc[0]
        raise UserInputError(f"--items: item {first['item_id']!r} of {first['benchmark']!r} appears twice")
    return items


def run_fixture(args: argparse.Namespace) -> None:
    """Copy a benchmark's bundled toy fixture (its real raw schema) to parquet."""
    import pyarrow as pa

    from workflow_scripts.evaluate.fixtures import read_fixture

    write_parquet(pa.Table.from_pandas(read_fixture(args.benchmark), preserve_index=False), args.out)


def run_toy_benchmark(args: argparse.Namespace) -> None:
    """Write a benchmark's toy rows (the toy task families in its real raw schema) to parquet."""
    import pyarrow as pa

    from workflow_scripts.evaluate.toy_benchmarks import toy_benchmark_rows

    raw = toy_benchmark_rows(args.benchmark, args.rows, args.seed)
    write_parquet(pa.Table.from_pandas(raw, preserve_index=False), args.out)
    print(f"toy-benchmark: {args.benchmark}: {len(raw)} rows (seed {args.seed})", file=sys.stderr)


def run_download(args: argparse.Namespace) -> None:
    """Download a benchmark at a commit (hub.lock.yaml), refusing an item count that is not the paper's.

    A hub ``main`` that moved (LiveBench adds and retires questions) would otherwise evaluate
    another item set without a word: the count its filter keeps (``items.item_count``) must equal
    ``--rows``, the registry's ``rows`` (the paper's snapshot), or nothing is written.
    """
    try:
        import datasets  # noqa: F401
    except ImportError as error:
        raise UserInputError(
            f"evaluate download needs 'datasets' ({error}); install envs/data.yaml"
        ) from error
    from workflow_scripts import hub
    from workflow_scripts.evaluate.items import item_count

    hub.require_commit(args.repo, args.revision)
    if args.gated:
        hub.require_token(args.repo, args.subset)
    dataset = hub.load_dataset_at(args.repo, args.subset, args.split, args.revision)
    count = item_count(args.benchmark, dataset)
    if count != args.rows:
        raise UserInputError(
            f"{args.benchmark}: {args.repo} ({args.subset}, {args.split}) at {args.revision} has "
            f"{count} items, but config.yaml's benchmarks.{args.benchmark}.rows is {args.rows} (the "
            f"paper's snapshot): set benchmarks.{args.benchmark}.hub.revision to a commit that holds "
            f"those {args.rows}, or change rows to evaluate this one"
        )
    record = {"benchmark": args.benchmark, "repo": args.repo, "subset": args.subset, "split": args.split}
    hub.write_download(
        dataset, args.out, args.manifest, {**record, "items": count, "revision_resolved": args.revision}
    )


def run_items(args: argparse.Namespace) -> None:
    """Normalise a benchmark's raw rows into the item schema, options shuffled once (F.3)."""
    from workflow_scripts.evaluate.items import normalise

    raw = _read_parquet(args.raw, "--raw")
    try:
        items = normalise(args.benchmark, raw, args.spec, args.shuffle_seed)
    except (KeyError, ValueError) as error:
        raise UserInputError(f"--raw {args.raw}: {error}") from error
    if args.limit is not None:
        items = items.head(args.limit)
    _write_items(items, args.out)
    print(f"items: {args.benchmark}: {len(items)} items from {len(raw)} raw rows", file=sys.stderr)


def run_suite(args: argparse.Namespace) -> None:
    """Every benchmark's items in one file, in the order given: what the evaluations read."""
    items = _read_items(args.items)
    _write_items(items, args.out)
    counts = items.groupby("benchmark", sort=False).size()
    print(f"suite: {len(items)} items, " + ", ".join(f"{b} {n}" for b, n in counts.items()), file=sys.stderr)


def _write_items(items: Any, out: str) -> None:
    """Items parquet with explicit types: a benchmark without options still stores ``choices`` as strings."""
    import pyarrow as pa

    from workflow_scripts.evaluate.items import ITEM_COLUMNS

    schema = pa.schema([(c, pa.list_(pa.string()) if c == "choices" else pa.string()) for c in ITEM_COLUMNS])
    write_parquet(pa.Table.from_pandas(items, schema=schema, preserve_index=False), out)


def _prompts(checkpoint: str, items: Any) -> list[str]:
    """Each item's F.3 template rendered through the checkpoint's own chat template."""
    from workflow_scripts.evaluate.generation import chat_prompts
    from workflow_scripts.evaluate.templates import render
    from workflow_scripts.modeling.tokenizer import load_tokenizer

    # Moonlight ships its own (tiktoken-based) tokenizer code with the checkpoint.
    tokenizer = load_tokenizer(checkpoint)
    return chat_prompts(tokenizer, (render(item) for _, item in items.iterrows()))


def _hashed_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """Check and hash ``generate``'s inputs once (the entry point's check, ``claimed_digests``),
    keeping the digests: the checkpoint's is part of the shard key."""
    from workflow_scripts.records.verify import verify_inputs

    if not hasattr(args, "input_digests"):
        inputs = {"checkpoint": args.checkpoint, **{f"items[{i}]": p for i, p in enumerate(args.items)}}
        args.input_digests = verify_inputs(
            inputs, digest_all=True, kinds=args.input_kinds, labels=args.option_labels
        )
    return args.input_digests


def _backend_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The backend, the settings of it that shape the samples, and its packages' versions.

    Not ``--data-parallel``: vLLM seeds every request, so which engine ran a shard does not matter.
    """
    from workflow_scripts.evaluate.shards import engine_packages

    settings = {"batch_size": args.batch_size} if args.backend == "hf" else {"engine": args.engine}
    return {"name": args.backend, **settings, "packages": engine_packages(args.backend)}


def _generate_hf(
    args: argparse.Namespace, prompts: list[str], work: Path, missing: list[Shard], run: Path
) -> None:
    """Generate the missing shards in this process, each block from its own seed (``block_seed``)."""
    from workflow_scripts.evaluate.generation import block_seed, sample_hf
    from workflow_scripts.evaluate.shards import fill_shards, key_digest, key_sampling, read_key
    from workflow_scripts.modeling.toy import load_local

    key = read_key(work)
    sampling = key_sampling(key)
    # This backend runs on CPU, where transformers' SDPA attention under a padding mask takes its
    # math kernel: eager attention samples the same tokens about a tenth faster (toy models).
    model, tokenizer = load_local(args.checkpoint, attn_implementation="eager")

    def sample(shard: Shard) -> list[Completion]:
        seed = block_seed(sampling.seeds[shard.repeat], shard.block)
        block = prompts[shard.start : shard.stop]
        return sample_hf(model, tokenizer, block, sampling, seed, args.batch_size)

    try:
        for shard in fill_shards(work, key_digest(key), missing, sample, run / CLAIMS):
            _report_shard(shard)
    except ValueError as error:
        raise UserInputError(f"--checkpoint {args.checkpoint}: {error}") from error


def _report_shard(shard: Shard) -> None:
    print(
        f"generate: wrote shard {shard.name} (repeat {shard.repeat}, prompts {shard.start}-{shard.stop - 1})",
        file=sys.stderr,
    )


def _generate_vllm(
    args: argparse.Namespace, prompts: list[str], work: Path, missing: list[Shard], run: Path
) -> None:
    """Data parallel: one vLLM engine per GPU (at most one per missing shard), each taking the next
    unclaimed shard until none is left."""
    from workflow_scripts.modeling.toy import check_weight_files

    check_weight_files(args.checkpoint)  # once, before any engine starts: vLLM's error names no file
    prompt_file, shard_file = run / "prompts.json", run / "shards.json"
    prompt_file.write_text(json.dumps(prompts))
    shard_file.write_text(json.dumps([shard.name for shard in missing]))
    workers = []
    for index in range(min(args.data_parallel, len(missing))):
        command = [
            sys.executable, "-m", "workflow_scripts", "evaluate", "generate-shard",
            "--checkpoint", args.checkpoint, "--work", str(work), "--prompts", str(prompt_file),
            "--shards", str(shard_file), "--claims", str(run / CLAIMS),
        ]  # fmt: skip
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(index)}
        workers.append(subprocess.Popen(command, env=env))
    failed = [index for index, worker in enumerate(workers) if worker.wait() != 0]
    if failed:
        raise UserInputError(
            f"vLLM engines {failed} failed (see their output above); the shards written are kept "
            f"in {work}: the same command continues from them"
        )


def run_generate(args: argparse.Namespace) -> None:
    """Sample every item once per repeat seed, shard by shard, and store the responses with their seeds.

    Shards already written for the same inputs and settings (``<out>.parts/``) are kept: a rerun
    after a kill generates only the others, and writes the bytes an uninterrupted run writes.
    """
    import pyarrow as pa

    from workflow_scripts.evaluate.generation import GENERATION_COLUMNS, MAX_BLOCKS, Sampling, rows_for
    from workflow_scripts.evaluate.shards import (
        DamagedShard,
        assemble,
        key_digest,
        open_work,
        parts_folder,
        plan_shards,
        shard_key,
        sort_written,
    )

    if args.shard_prompts < 1:
        raise UserInputError(f"--shard-prompts must be at least 1, got {args.shard_prompts}")
    items = _read_items(args.items)
    sampling = Sampling.from_config(args.sampling)
    prompts = _prompts(args.checkpoint, items)
    keys = list(zip(items["benchmark"], items["item_id"], strict=True))
    checkpoint_sha256 = _hashed_inputs(args)["checkpoint"]["sha256"]
    key = shard_key(checkpoint_sha256, keys, prompts, sampling, args.shard_prompts, _backend_settings(args))
    digest = key_digest(key)
    shards = plan_shards(len(prompts), len(sampling.seeds), args.shard_prompts)
    blocks = max((shard.block + 1 for shard in shards), default=0)
    if args.backend == "hf" and blocks > MAX_BLOCKS + 1:
        raise UserInputError(
            f"--shard-prompts {args.shard_prompts}: {blocks} blocks of prompts a repeat, but the hf "
            f"backend seeds at most {MAX_BLOCKS + 1} distinctly (block_seed)"
        )
    work, stale = open_work(args.out, key)
    missing, damaged = sort_written(work, digest, shards)
    for shard, reason in damaged.items():
        print(
            f"generate: shard {work / shard.name} is damaged ({reason}): generating it again", file=sys.stderr
        )
    print(
        f"generate: {len(shards) - len(missing)} of {len(shards)} shards (up to {args.shard_prompts} prompts "
        f"each) already in {work}, {len(missing)} to generate"
        + (f"; removed {stale} work folder(s) of other inputs or settings" if stale else ""),
        file=sys.stderr,
    )
    started = time.perf_counter()
    backend = {"hf": _generate_hf, "vllm": _generate_vllm}[args.backend]
    if missing:
        with tempfile.TemporaryDirectory(prefix=".run-", dir=work) as run:  # engines' inputs and claims
            (Path(run) / CLAIMS).mkdir()
            backend(args, prompts, work, missing, Path(run))
    seconds = time.perf_counter() - started
    try:
        completions = assemble(work, digest, shards, len(sampling.seeds))
    except DamagedShard as error:  # written by this run: changed or removed under it
        raise UserInputError(f"--out {args.out}: shard {error}; rerun to generate it again") from error
    rows = rows_for(keys, completions, sampling)
    table = pa.Table.from_pylist(rows).select(list(GENERATION_COLUMNS))
    write_parquet(table, args.out)
    shutil.rmtree(parts_folder(args.out))
    print(
        f"generate: {len(rows)} responses ({len(prompts)} prompts x {len(sampling.seeds)} repeats), "
        f"{len(missing)} of {len(shards)} shards generated in {seconds:.1f}s with {args.backend}",
        file=sys.stderr,
    )


def run_generate_shard(args: argparse.Namespace) -> None:
    """One data-parallel vLLM engine: the listed shards of the work folder it claims first."""
    from workflow_scripts.evaluate.generation import sample_vllm, vllm_engine
    from workflow_scripts.evaluate.shards import (
        fill_shards,
        key_digest,
        key_sampling,
        plan_shards,
        read_key,
    )

    work = Path(args.work)
    key = read_key(work)
    sampling = key_sampling(key)
    prompts = json.loads(Path(args.prompts).read_text())
    listed = set(json.loads(Path(args.shards).read_text()))
    shards = [
        shard
        for shard in plan_shards(len(prompts), len(sampling.seeds), key["shard_prompts"])
        if shard.name in listed
    ]
    llm, stops = vllm_engine(args.checkpoint, key["backend"]["engine"])

    def sample(shard: Shard) -> list[Completion]:
        return sample_vllm(llm, prompts[shard.start : shard.stop], sampling, shard.repeat, stops)

    for shard in fill_shards(work, key_digest(key), shards, sample, Path(args.claims)):
        _report_shard(shard)


def run_score(args: argparse.Namespace) -> None:
    """Grade every generation, then write per-item scores and the per-benchmark avg@k summary."""
    import pyarrow as pa

    from workflow_scripts.evaluate.grading import (
        MAX_RESPONSE_CHARS,
        SCORE_COLUMNS,
        check_coverage,
        check_generations,
        grade,
        summarize,
    )
    from workflow_scripts.evaluate.sandbox import IsolationUnavailable, Limits

    items = _read_items(args.items)
    generations = _read_parquet(args.generations, "--generations")
    sandbox = dict(args.limits)
    allow_unisolated = bool(sandbox.pop("allow_unisolated"))
    max_chars = MAX_RESPONSE_CHARS if args.max_response_chars is None else args.max_response_chars
    started = time.perf_counter()
    try:
        check_generations(generations)
        check_coverage(items, generations, args.repeats)
        scores = grade(
            items,
            generations,
            Limits(**sandbox),
            args.workers,
            args.math_timeout,
            allow_unisolated,
            max_chars,
        )
        benchmarks = summarize(scores, args.repeats)
    except IsolationUnavailable as error:
        raise UserInputError(
            f"{error}. Model-written code would run as this user, able to use the network, write "
            "wherever this user may and outlive its timeout. Run as root, or where unprivileged "
            "user namespaces work (see the warning above), or set evaluation.sandbox.allow_unisolated: "
            "true to accept that"
        ) from error
    except ValueError as error:
        raise UserInputError(f"--generations {args.generations}: {error}") from error
    write_parquet(pa.Table.from_pandas(scores[list(SCORE_COLUMNS)], preserve_index=False), args.scores)
    write_json(args.summary, {**args.identity, "repeats": args.repeats, "benchmarks": benchmarks})
    line = ", ".join(f"{name} {entry['score']:.1f}" for name, entry in benchmarks.items())
    seconds = time.perf_counter() - started
    print(f"score: {len(scores)} generations in {seconds:.1f}s: {line}", file=sys.stderr)


def run_likelihood(args: argparse.Namespace) -> None:
    """Teacher-forced gold-answer log-likelihood of every item, under each requested routing."""
    import pyarrow as pa
    import torch

    from workflow_scripts.evaluate.likelihood import (
        ITEM_LIKELIHOOD_COLUMNS,
        LIKELIHOOD_VERSION,
        gold_response,
        likelihood_rows,
        summarize,
    )
    from workflow_scripts.evaluate.toy_benchmarks import toy_gold_response
    from workflow_scripts.modeling.toy import load_local

    items = _read_items(args.items)
    unknown = sorted(set(items["benchmark"]) - set(args.families))
    if unknown:
        raise UserInputError(f"--families names no family for benchmarks {unknown}")
    prompts = _prompts(args.checkpoint, items)
    model, tokenizer = load_local(args.checkpoint)
    if torch.cuda.is_available():  # paper scale: one GPU, as the prior pass (profiles/slurm)
        model = model.to("cuda")
    started = time.perf_counter()
    records = [item for _, item in items.iterrows()]
    try:
        gold = {"answer_line": gold_response, "toy": toy_gold_response}[args.gold]
        rows = likelihood_rows(model, tokenizer, records, prompts, args.routings, args.seed, gold)
    except (TypeError, ValueError) as error:
        raise UserInputError(f"--checkpoint {args.checkpoint}: {error}") from error
    table = pa.Table.from_pylist(rows).select(list(ITEM_LIKELIHOOD_COLUMNS))
    write_parquet(table, args.out)
    summary = {
        **args.identity,
        "version": LIKELIHOOD_VERSION,
        "metric": "mean log-likelihood per gold-answer token (nats), SE over items",
        "seed": args.seed,
        "gold": args.gold,
        "routings": summarize(rows, args.families),
    }
    write_json(args.summary, summary)
    line = "; ".join(
        f"{routing}: "
        + ", ".join(f"{domain} {value['mean']:.3f}" for domain, value in parts["domains"].items())
        for routing, parts in summary["routings"].items()
    )
    seconds = time.perf_counter() - started
    print(f"likelihood: {len(rows)} item scores in {seconds:.1f}s; {line}", file=sys.stderr)


def register(stages: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` stage and its commands."""
    commands = add_stage(stages, "evaluate", "benchmarks, sampled generations, grading, avg@5 (§4, F.3-F.5)")

    fixture = add_command(
        commands,
        "fixture",
        run_fixture,
        "write a benchmark's bundled toy fixture (real raw schema) as parquet",
        outputs=("out",),
    )
    fixture.add_argument("--benchmark", required=True, help="benchmark id of the registry")
    fixture.add_argument("--out", required=True, help="output raw parquet")

    download = add_command(
        commands,
        "download",
        run_download,
        "download a benchmark's hub split at a commit to parquet, refusing an item count other than --rows",
        outputs=("out", "manifest"),
    )
    download.add_argument("--benchmark", required=True, help="benchmark id of the registry, e.g. mmlu_stem")
    download.add_argument(
        "--rows", type=int, required=True, help="items the benchmark must hold (the registry's rows)"
    )
    download.add_argument("--repo", required=True, help="hub dataset id, e.g. cais/mmlu")
    download.add_argument(
        "--revision",
        required=True,
        help="hub commit, 40 hex digits ('python -m workflow_scripts lock' resolves refs)",
    )
    download.add_argument("--subset", required=True, help="dataset config name, e.g. all")
    download.add_argument("--split", required=True, help="split name, e.g. test")
    download.add_argument("--out", required=True, help="output raw parquet (every row, before the filter)")
    download.add_argument("--manifest", required=True, help="output JSON: repo, commit, rows, items, sha256")
    download.add_argument(
        "--gated",
        action="store_true",
        help="the dataset is gated (e.g. Idavidrein/gpqa): fail before any download when no hub token is set",
    )

    toy = add_command(
        commands,
        "toy-benchmark",
        run_toy_benchmark,
        "write a benchmark's toy rows: the toy task families asked in its real raw schema (toy scale)",
        outputs=("out",),
    )
    toy.add_argument("--benchmark", required=True, help="benchmark id of the registry")
    toy.add_argument("--rows", type=int, required=True, help="rows to write (at least 1)")
    toy.add_argument(
        "--seed", type=int, required=True, help="seed of the drawn tasks (non-negative; not the corpora's)"
    )
    toy.add_argument("--out", required=True, help="output raw parquet")

    items = add_command(
        commands,
        "items",
        run_items,
        "normalise a benchmark's raw rows into the item schema, multiple-choice options shuffled once",
        inputs=("raw",),
        outputs=("out",),
    )
    items.add_argument("--benchmark", required=True, help="benchmark id of the registry")
    items.add_argument("--raw", required=True, help="raw parquet (hub download, toy rows or fixture)")
    items.add_argument("--spec", required=True, type=json_argument, help="the benchmark's registry entry")
    items.add_argument("--shuffle-seed", type=int, required=True, help="option shuffle seed (F.3: 42)")
    items.add_argument(
        "--limit", type=int, help="keep only the first N items in source order (toy scale; default: all)"
    )
    items.add_argument("--out", required=True, help="output items parquet")

    suite = add_command(
        commands,
        "suite",
        run_suite,
        "join every benchmark's items into the one file the evaluations read",
        inputs=("items",),
        outputs=("out",),
    )
    suite.add_argument("--items", nargs="+", required=True, help="items parquet files, in benchmark order")
    suite.add_argument("--out", required=True, help="output items parquet (every benchmark)")

    generate = add_command(
        commands,
        "generate",
        run_generate,
        "sample every benchmark item once per repeat seed from a checkpoint",
        inputs=("checkpoint", "items"),
        folders=("checkpoint",),
        outputs=("out",),
    )
    generate.add_argument("--checkpoint", required=True, help="checkpoint directory (base or fine-tuned)")
    generate.add_argument("--items", nargs="+", required=True, help="items parquet files")
    generate.add_argument(
        "--sampling",
        required=True,
        type=json_argument,
        help="evaluation settings (JSON: temperature, top_p, max_new_tokens, repeats, base_seed)",
    )
    generate.add_argument("--backend", choices=BACKENDS, required=True, help="hf (CPU) or vllm (GPUs)")
    generate.add_argument("--batch-size", type=int, default=16, help="hf: prompts per generate call")
    generate.add_argument("--data-parallel", type=int, default=1, help="vllm: engines, one GPU each")
    generate.add_argument(
        "--engine", type=json_argument, default={}, help="vllm: extra LLM() arguments (JSON)"
    )
    generate.add_argument(
        "--shard-prompts",
        type=int,
        default=1024,
        help="prompts per shard, the unit a killed run loses and its rerun keeps (default 1024)",
    )
    generate.add_argument(
        "--out",
        required=True,
        help="output generations parquet; shards of an unfinished run wait in <out>.parts/",
    )
    generate.set_defaults(claimed_digests=_hashed_inputs)

    shard = add_command(
        commands,
        "generate-shard",
        run_generate_shard,
        "one data-parallel vLLM engine (started by 'generate --backend vllm')",
        inputs=(
            "prompts",
            "shards",
        ),  # not the checkpoint: 'generate' verified it, one full read per GPU saved
    )
    shard.add_argument("--checkpoint", required=True, help="checkpoint directory")
    shard.add_argument(
        "--work", required=True, help="the run's shard folder (its key.json: sampling, engine)"
    )
    shard.add_argument("--prompts", required=True, help="JSON list of rendered prompts")
    shard.add_argument("--shards", required=True, help="JSON list of the shard files to generate")
    shard.add_argument("--claims", required=True, help="folder where engines claim shards (one file each)")

    score = add_command(
        commands,
        "score",
        run_score,
        "grade stored generations and summarise avg@k per benchmark",
        inputs=("items", "generations"),
        outputs=("scores", "summary"),
    )
    score.add_argument("--items", nargs="+", required=True, help="items parquet files")
    score.add_argument("--generations", required=True, help="generations parquet")
    score.add_argument("--repeats", type=int, required=True, help="repeats per item (avg@k's k)")
    score.add_argument(
        "--limits",
        type=json_argument,
        required=True,
        help="sandbox limits (JSON: timeout_s, memory_mb, ...) for code benchmarks, and allow_unisolated "
        "(true: run code with only a process group and rlimits where no namespace isolation works; "
        "default false: refuse)",
    )
    score.add_argument("--workers", type=int, default=2, help="parallel sandboxed programs")
    score.add_argument("--math-timeout", type=float, default=5.0, help="seconds per math-verify check")
    score.add_argument(
        "--max-response-chars",
        type=int,
        help="a longer response scores 0 without extraction (default: grading.MAX_RESPONSE_CHARS)",
    )
    score.add_argument(
        "--identity", type=json_argument, required=True, help="model, corpus, condition and seed of the run"
    )
    score.add_argument("--scores", required=True, help="output parquet: one score per item and repeat")
    score.add_argument("--summary", required=True, help="output JSON: avg@k per benchmark")

    likelihood = add_command(
        commands,
        "likelihood",
        run_likelihood,
        "teacher-forced gold-answer log-likelihood per item, under the model's own or an overridden routing",
        inputs=("checkpoint", "items"),
        folders=("checkpoint",),
        outputs=("out", "summary"),
    )
    likelihood.add_argument("--checkpoint", required=True, help="checkpoint directory (base or fine-tuned)")
    likelihood.add_argument("--items", nargs="+", required=True, help="items parquet files")
    likelihood.add_argument(
        "--routings",
        nargs="+",
        choices=ROUTINGS,
        default=["own"],
        help="own: stock gates; own_prior_hard: every token forced to the top-k of its span's mean "
        "routing (RPB-hard with the item's own prior); global_hard: the same after a per-layer "
        "expert permutation (default: own)",
    )
    likelihood.add_argument(
        "--seed", type=int, default=0, help="seed of global_hard's expert permutations (non-negative)"
    )
    likelihood.add_argument(
        "--gold",
        choices=("answer_line", "toy"),
        default="answer_line",
        help="gold response: the template's final answer line (any scale) or the toy corpora's "
        "worked response (toy benchmarks only)",
    )
    likelihood.add_argument(
        "--families", type=json_argument, required=True, help="benchmark id -> family (JSON object)"
    )
    likelihood.add_argument(
        "--identity", type=json_argument, required=True, help="model, corpus, condition and seed of the run"
    )
    likelihood.add_argument("--out", required=True, help="output parquet: one row per item and routing")
    likelihood.add_argument(
        "--summary", required=True, help="output JSON: mean and SE per routing, benchmark and domain"
    )
