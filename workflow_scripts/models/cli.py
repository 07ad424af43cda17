"""``python -m workflow_scripts models <command>``: base checkpoints at both scales.

    python -m workflow_scripts models download --repo moonshotai/Moonlight-16B-A3B --revision <commit> \\
        --out results/models/moonlight/base --manifest results/models/moonlight/manifest.json \\
        [--moe-layers 2]
    python -m workflow_scripts models toy-base --architecture deepseek_v3 --spec '{...}' \\
        --pretrain '{...}' --out results/models/moonlight/base \\
        --report results/models/moonlight/routing_report.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflow_scripts import families
from workflow_scripts.atomic import write_json
from workflow_scripts.commands import add_command, add_stage, json_argument
from workflow_scripts.errors import UserInputError

if TYPE_CHECKING:
    from workflow_scripts.models.cut import Cut


def run_download(args: argparse.Namespace) -> None:
    """Materialise a hub checkpoint at a commit (hub.lock.yaml), and record it and its remote code.

    The commit pins the weights and the code ``trust_remote_code`` runs alike: the pipeline loads
    the folder with ``local_files_only``, and a checkpoint whose ``auto_map`` would import code
    from another repository is refused (``remote_code.foreign_code``).
    """
    try:
        import huggingface_hub
    except ImportError as error:
        raise UserInputError(
            f"models download needs 'huggingface_hub' ({error}); install envs/data.yaml"
        ) from error
    from workflow_scripts.hub import require_commit
    from workflow_scripts.models.remote_code import foreign_code, remote_code
    from workflow_scripts.records import path_digest

    require_commit(args.repo, args.revision)
    # One quick call first: a commit the repository lacks, or the hub out of reach, fails here in
    # one line, not after the snapshot download's retries.
    huggingface_hub.HfApi().model_info(args.repo, revision=args.revision)
    target = Path(args.out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        cut = _snapshot(huggingface_hub, args, tmp)
        shutil.rmtree(tmp / ".cache", ignore_errors=True)
        if foreign := foreign_code(tmp):
            raise UserInputError(
                f"{args.repo} at {args.revision}: its auto_map imports code from another repository, "
                f"which its commit does not pin ({'; '.join(foreign)}); copy that code into a fork of "
                "the checkpoint and download the fork"
            )
        code = remote_code(tmp)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    manifest = {
        "repo": args.repo,
        "revision_resolved": args.revision,
        "remote_code": code,
        "checkpoint": path_digest(target),
    }
    write_json(args.manifest, manifest if cut is None else {**manifest, "cut": dataclasses.asdict(cut)})


def _snapshot(hub: Any, args: argparse.Namespace, folder: Path) -> Cut | None:
    """Download the checkpoint into ``folder``; with ``--moe-layers`` only what the cut keeps, then cut.

    A cut fetches the metadata first (config, index, tokenizer, remote code), then only the
    shards its kept tensors live in: a rehearsal base costs a few of the source's gigabytes.
    """
    if args.moe_layers is None:
        hub.snapshot_download(args.repo, revision=args.revision, local_dir=folder)
        return None
    from workflow_scripts.models import cut

    source = f"{args.repo} at {args.revision}"
    metadata = list(cut.METADATA_PATTERNS)
    hub.snapshot_download(args.repo, revision=args.revision, local_dir=folder, allow_patterns=metadata)
    kept = cut.plan_cut(folder, args.moe_layers, source)
    shards = cut.needed_shards(folder, kept.layers)
    hub.snapshot_download(args.repo, revision=args.revision, local_dir=folder, allow_patterns=shards)
    return cut.cut_checkpoint(folder, args.moe_layers, source)


def run_toy_base(args: argparse.Namespace) -> None:
    """Build a toy base, pretrain it briefly with load balancing, report its routing structure."""
    with tempfile.TemporaryDirectory(prefix="toy-tokenizer-") as folder:
        _build_toy_base(args, Path(folder))


def toy_tokenizer(architecture: str, texts: list[str], vocab_size: int, folder: Path) -> tuple[Any, int]:
    """The toy's tokenizer, its hub model's kind, and its model's ``vocab_size``.

    Each toy ships its family's tokenizer files as its hub does, written into ``folder`` over a
    BPE of ``vocab_size`` tokens learned from ``texts`` and loaded from there: Moonlight's
    remote-code tiktoken tokenizer (``deepseek_v3``: 256 + 2 special ids above the ranks, two
    more than the model's rows), DeepSeek-V2-Lite's ``LlamaTokenizerFast`` files (``deepseek_v2``:
    bos and eos above the BPE) and Qwen3's ``Qwen2Tokenizer`` files (``qwen3_moe``: 26 added
    tokens above it); the model has more rows than the latter two have tokens, as theirs do.
    Either way the toys' texts take about as many tokens, which the toy's sequence length and
    generation budget are sized for.
    """
    module = families.family(architecture).tokenizers()
    tokenizer = module.toy_tokenizer(texts, vocab_size, folder)
    return tokenizer, module.model_vocab_size(tokenizer)


def _build_toy_base(args: argparse.Namespace, folder: Path) -> None:
    """``run_toy_base`` with ``folder`` holding the tokenizer's files until the base is saved."""
    import torch

    from workflow_scripts.modeling.batches import encode_rows
    from workflow_scripts.modeling.loop import TrainConfig, train
    from workflow_scripts.modeling.objective import Objective
    from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, save_toy_base
    from workflow_scripts.models.pretrain_corpus import split_report_rows, synthetic_rows
    from workflow_scripts.models.routing_report import routing_structure, selected_experts

    settings = args.pretrain
    try:
        spec = ToyModelSpec.from_dict(args.spec)
    except (TypeError, ValueError) as error:
        raise UserInputError(f"--spec: {error}") from error
    torch.use_deterministic_algorithms(True)
    rows = synthetic_rows(settings["corpus_rows"], settings["corpus_seed"])
    train_rows, held_out = split_report_rows(rows, settings["report_rows"])
    texts = [*rows["prompt"], *rows["answer"]]
    tokenizer, vocab_size = toy_tokenizer(args.architecture, texts, settings["vocab_size"], folder)
    model = build_toy_model(args.architecture, spec, tokenizer, settings["seed"], vocab_size)
    length = settings["sequence_length"]
    held = {d: list(zip(frame["prompt"], frame["answer"], strict=True)) for d, frame in held_out.items()}

    def structure() -> dict:
        topk = {d: selected_experts(model, tokenizer, pairs, length) for d, pairs in held.items()}
        return routing_structure(topk, spec.num_experts)

    before = structure()
    config = TrainConfig(
        epochs=1,
        global_batch_size=settings["batch_size"],
        micro_batch_size=settings["batch_size"],
        lr_max=settings["lr"],
        lr_min=settings["lr"] / 10,
        warmup_steps=settings["warmup_steps"],
        label_mode="all",
        max_steps=settings["steps"],
    )
    objective = Objective.from_condition(
        {
            "intervention": "load_balancing",
            "params": {"coefficient": settings["lbl_coefficient"]},
            "term": settings["lbl_term"],
        }
    )
    examples = encode_rows(tokenizer, train_rows["prompt"].tolist(), train_rows["answer"].tolist(), length)
    records = train(model, examples, objective, config, settings["seed"], tokenizer.pad_token_id)
    after = structure()
    save_toy_base(model, tokenizer, args.out)
    write_json(
        args.report,
        {
            "architecture": args.architecture,
            "spec": spec.to_dict(),
            "pretraining": {
                "steps": len(records),
                "first_ce": records[0]["ce"],
                "last_ce": records[-1]["ce"],
            },
            "random_init": before,
            "pretrained": after,
        },
    )


def register(stages: argparse._SubParsersAction) -> None:
    """Add the ``models`` stage and its commands."""
    commands = add_stage(stages, "models", "base checkpoints: pinned hub downloads or toy bases")

    download = add_command(
        commands,
        "download",
        run_download,
        "download a hub checkpoint at a commit",
        outputs=("out", "manifest"),
    )
    download.add_argument("--repo", required=True, help="hub model id, e.g. moonshotai/Moonlight-16B-A3B")
    download.add_argument(
        "--revision",
        required=True,
        help="hub commit, 40 hex digits ('python -m workflow_scripts lock' resolves refs)",
    )
    download.add_argument("--out", required=True, help="checkpoint directory to create")
    download.add_argument(
        "--manifest", required=True, help="output JSON: commit, sha256 of each remote-code file, checksum"
    )
    download.add_argument(
        "--moe-layers",
        type=int,
        help="keep the leading dense layers and this many MoE layers, downloading only their shards",
    )

    toy = add_command(
        commands,
        "toy-base",
        run_toy_base,
        "build a tiny MoE base of one architecture, pretrain it briefly, report its routing structure",
        outputs=("out", "report"),
    )
    toy.add_argument("--architecture", required=True, choices=families.ARCHITECTURES)
    toy.add_argument("--spec", required=True, type=json_argument, help="ToyModelSpec fields (JSON)")
    toy.add_argument(
        "--pretrain", required=True, type=json_argument, help="the toy_base config section (JSON)"
    )
    toy.add_argument("--out", required=True, help="checkpoint directory to create")
    toy.add_argument("--report", required=True, help="output JSON: routing sharpness and divergence")
