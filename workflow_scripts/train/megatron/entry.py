"""Megatron-Bridge post-training of one (model, corpus, condition, seed), launched by torchrun on every GPU.

    torchrun --nnodes 16 --nproc-per-node 8 ... -m workflow_scripts train megatron \\
        --hf-base results/models/moonlight/base --megatron-base results/megatron/moonlight/base \\
        --dataset results/megatron/datasets/math20k --split results/data/math20k/train.parquet \\
        --condition '{...}' --training '{...}' --moe-layers 26 --seed 42 \\
        --work results/megatron/runs/moonlight/math20k/rpb/s42 --out .../s42.megatron --record .../s42.json \\
        [--prior prior.npy --prior-meta meta.json [--shuffle-record prior_validation.json]]

Config: Bridge's generic SFT recipe (``recipes.common._sft_common``) with the provider
``AutoBridge`` builds from the pinned local base (Bridge's per-model SFT recipes fetch their
own hub revision at config time and set a parallel layout and packing the registry
overrides anyway), then every value of ``settings``. A pre-wrap hook swaps the routers to
``PriorBiasedRouter``; the ``forward_step`` of ``step`` feeds them per micro-batch.
Resume: from the newest complete checkpoint under ``--work`` (``resume``). The finished
run's last checkpoint moves to ``--out``; ``export`` turns it into the hook-free HF
checkpoint that probes and evaluations read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import write_json
from workflow_scripts.errors import UserInputError
from workflow_scripts.train.megatron import resume, settings
from workflow_scripts.train.megatron.vocabulary import bridge_accepts_reserved_ids, check_vocabulary


def pre_wrap_hook(context: Any, router_l2: float, anchor_path: Path, start: int) -> Any:
    """Bridge's pre-wrap hook: swap the routers and, under Router-L2, install their anchor.

    The hook runs on freshly initialised weights, before Bridge loads the base checkpoint:
    the anchor takes its base weights at the first gradient (``RouterAnchor``). Bridge's
    parameter mapping picks a module's parallel type by class name, so the swapped class is
    registered as the stock router's (replicated) for any conversion of the trained model.
    """
    from megatron.bridge.models.conversion.param_mapping import AutoMapping

    from workflow_scripts.routing.megatron import RouterAnchor, install

    AutoMapping.register_module_type("PriorBiasedRouter", "replicated")

    def swap_routers(chunks: list[Any]) -> list[Any]:
        routers = install(chunks, context)
        install_router_anchor(RouterAnchor(routers, router_l2, anchor_path, start) if router_l2 else None)
        return chunks

    return swap_routers


def router_main_parameters(optimizer: Any, routers: list[Any]) -> list[tuple[Any, slice | None]]:
    """Each router's fp32 main parameter in ``optimizer`` and the flat range it covers; ``(None, None)``
    where this optimizer holds no part of it.

    Megatron's distributed optimizer pairs every model parameter whose range this rank owns with
    a flat fp32 shard: a copy for bf16 parameters, a view of the weight itself for fp32 ones
    (which have no ``main_param``). The other optimizers hold the whole main parameter:
    ``main_param`` under mixed precision, the weight itself in fp32.
    """
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    if isinstance(optimizer, DistributedOptimizer):
        shards = {
            id(model_param): shard
            for models, mains in (
                (optimizer.model_float16_groups, optimizer.shard_fp32_from_float16_groups),
                (optimizer.model_fp32_groups, optimizer.shard_fp32_groups),
            )
            for model_group, main_group in zip(models, mains, strict=True)
            for model_param, shard in zip(model_group, main_group, strict=True)
        }
        found: list[tuple[Any, slice | None]] = []
        for router in routers:
            shard = shards.get(id(router.weight))
            if shard is None:
                found.append((None, None))
                continue
            param_range = optimizer._get_model_param_range_map(router.weight)["param"]
            found.append((shard, slice(param_range.start, param_range.end)))
        return found
    owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
    found = []
    for router in routers:
        main = getattr(router.weight, "main_param", None)
        main = router.weight if main is None else main
        found.append((main, None) if id(main) in owned else (None, None))
    return found


#: The Router-L2 anchor of the run this process trains (``None``: no Router-L2).
_active_anchor: list[Any] = [None]


def install_router_anchor(anchor: Any | None) -> None:
    """Add ``anchor``'s Router-L2 gradient to the fp32 main gradients after every ``prepare_grads``.

    Patches, once per process, the ``prepare_grads`` of Megatron's optimizers, which
    ``optimizer.step()`` calls (a ``ChainedOptimizer`` calls each of its own); the patch
    applies the process's current anchor (``None``: none, for a run without Router-L2).
    Every rank takes the base weights at its first call, whether or not it owns a router
    shard; the optimizer that owns a router's main parameter adds its gradient.
    """
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.core.optimizer.optimizer import FP32Optimizer, MixedPrecisionOptimizer

    _active_anchor[0] = anchor

    def wrap(original: Any) -> Any:
        def prepare_grads(self: Any) -> bool:
            found_inf = original(self)
            current = _active_anchor[0]
            if current is None:
                return found_inf
            current.capture_or_load()
            if getattr(self, "is_stub_optimizer", False):
                return found_inf
            chosen = router_main_parameters(self, current.routers)
            if any(main is not None for main, _ in chosen):
                current.add_gradients(chosen)
            return found_inf

        prepare_grads.adds_router_l2 = True
        return prepare_grads

    for cls in (MixedPrecisionOptimizer, DistributedOptimizer, FP32Optimizer):
        own = vars(cls).get("prepare_grads")
        if own is not None and not getattr(own, "adds_router_l2", False):
            cls.prepare_grads = wrap(own)


def use_prebuilt_dataset_helpers() -> None:
    """Keep Bridge's start-up from rebuilding Megatron-Core's dataset helpers when they are built.

    Bridge's ``initialize`` runs ``make`` in ``megatron/core/datasets`` on every node and exits
    when it fails; the megatron-core wheel ships ``helpers_cpp`` compiled but no Makefile, so
    every training would stop in its first minute. Where the compiled module imports, the
    build is skipped; elsewhere (a source install) Bridge compiles as it would.
    """
    import importlib.util

    import megatron.bridge.training.initialize as bridge_initialize

    if importlib.util.find_spec("megatron.core.datasets.helpers_cpp") is not None:
        bridge_initialize.compile_helpers = lambda: None


def final_checkpoint_without_optimizer() -> Any:
    """A Bridge callback: the last step's checkpoint is saved without the optimizer state.

    Only that checkpoint becomes the run's output (``resume.finish``), which export and the
    provenance keep for good; the distributed optimizer's moments and fp32 main weights would
    triple it (0.2-0.4 TB a paper-scale run). Earlier checkpoints keep them for resuming, and
    a rerun after the last one only finishes. Bridge fires ``on_train_step_end`` after the
    optimizer step and before the step's checkpoint, and reads ``save_optim`` at each save.
    """
    from megatron.bridge.training.callbacks import Callback

    class FinalCheckpointWithoutOptimizer(Callback):
        def on_train_step_end(self, context: Any) -> None:
            state = context.state
            if state.train_state.step + 1 >= state.cfg.train.train_iters:
                state.cfg.checkpoint.save_optim = False

    return FinalCheckpointWithoutOptimizer()


def checkpoint_digests() -> Any:
    """A Bridge callback: after each checkpoint save, the sha256 of its every file into its digest list.

    Bridge fires ``on_checkpoint_save`` on every rank after the save's last barrier (every shard,
    ``train_state.pt`` and ``run_config.yaml`` written) and before it deletes the previous
    checkpoint. Rank 0 lists the files and splits them (``resume.shares``), each rank hashes
    about a ``1/world`` of the bytes, so that a paper-scale save (0.2-0.4 TB) adds seconds, not
    the minutes one rank would keep the others waiting in a collective; rank 0 writes the list
    last, atomically. A kill before that leaves the checkpoint without a list, which ``resume``
    does not count as complete.
    """
    import torch.distributed as dist
    from megatron.bridge.training.callbacks import Callback

    from workflow_scripts.records.sha256sums import digests_of, write_list

    class CheckpointDigests(Callback):
        def on_checkpoint_save(self, context: Any) -> None:
            state = context.state
            folder = resume.iteration_dir(Path(state.cfg.checkpoint.save), state.train_state.step)
            distributed = dist.is_initialized()
            rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
            # Rank 0's listing and split for all: ranks on other nodes may see the folder later.
            split = [resume.shares(folder, resume.checkpoint_files(folder), world) if rank == 0 else None]
            if distributed:
                dist.broadcast_object_list(split, src=0)
            mine = digests_of(folder, split[0][rank])
            parts: list[Any] = [mine]
            if distributed:
                parts = [None] * world
                dist.all_gather_object(parts, mine)
            if rank == 0:
                write_list(folder / resume.DIGEST_LIST, {k: v for part in parts for k, v in part.items()})

    return CheckpointDigests()


def free_port() -> str:
    """A free TCP port: Bridge's one-process conversions default to 12355, which two jobs on a node share."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def run_megatron(args: argparse.Namespace) -> None:
    """Train under the condition; rank 0 then moves the final checkpoint and writes the record."""
    import numpy as np
    import pandas as pd
    from megatron.bridge.training.finetune import finetune

    from workflow_scripts.file_formats.prior import load_prior
    from workflow_scripts.modeling.tokenizer import load_tokenizer
    from workflow_scripts.train.condition import objective_for
    from workflow_scripts.train.megatron.dataset import bridge_chat_template
    from workflow_scripts.train.megatron.spans import span_table
    from workflow_scripts.train.megatron.step import make_forward_step, routing_context

    # The prior's chain (split, base, template -> prior) was checked by the claim, once per job.
    objective, _ = objective_for(args)
    tokenizer = load_tokenizer(args.hf_base)
    rows = check_vocabulary(
        tokenizer, json.loads((Path(args.hf_base) / "config.json").read_text()), Path(args.hf_base)
    )
    split = pd.read_parquet(args.split, columns=["prompt", "answer"])
    prior = load_prior(args.prior) if args.prior else None
    if prior is not None and prior.shape[2] != args.moe_layers:
        raise UserInputError(f"--prior has L = {prior.shape[2]} MoE layers, the model {args.moe_layers}")
    max_length = int(args.training["sequence_length"])
    prompts, answers = split["prompt"].tolist(), split["answer"].tolist()
    table = span_table(tokenizer, prompts, answers, max_length, rows)

    work = Path(args.work)
    save_dir = work / resume.CHECKPOINTS
    steps = settings.run_steps(args.training, len(split))
    start = resume.latest_complete(save_dir)
    rank0 = int(os.environ.get("RANK", "0")) == 0
    if rank0:
        resume.record_start(work, start)
    cfg = settings.bridge_config(
        Path(args.hf_base),
        Path(args.megatron_base),
        Path(args.dataset),
        save_dir,
        objective,
        args.training,
        len(split),
        args.seed,
        start,
    )
    stop = settings.rehearsed_preemption(args.training, steps, start)
    cfg.train.exit_interval = stop
    cfg.tokenizer.chat_template = bridge_chat_template(tokenizer, prompts, answers)
    context = routing_context(objective, num_moe_layers=args.moe_layers)
    hook = pre_wrap_hook(context, objective.router_l2, work / "router_base.pt", start or 0)
    cfg.model.register_pre_wrap_hook(hook)
    use_prebuilt_dataset_helpers()
    bridge_accepts_reserved_ids(rows)
    if start != steps:  # else a kill after the last checkpoint: only finishing is left
        forward_step = make_forward_step(context, None if prior is None else np.asarray(prior), table)
        try:
            finetune(
                cfg, forward_step, callbacks=[final_checkpoint_without_optimizer(), checkpoint_digests()]
            )
        except SystemExit as exited:  # Bridge leaves with sys.exit(0) at its exit_interval
            if stop is None or exited.code not in (0, None):
                raise
    if stop is not None:
        saved = resume.latest_complete(save_dir)
        raise UserInputError(
            f"stopped after step {saved} of {steps} with its checkpoint saved, as training.preempt "
            f"rehearses a preemption at step {stop}: the job's retry resumes from it"
        )
    if rank0:
        final = resume.latest_complete(save_dir)
        if final != steps:
            raise RuntimeError(f"training ended at checkpoint {final}, expected step {steps}")
        resume.finish(save_dir, Path(args.out), final)
        log = json.loads((work / "resume_log.json").read_text())
        write_json(args.record, {"steps": steps, "resumed_from": log, "megatron_checkpoint": args.out})
        shutil.rmtree(work, ignore_errors=True)


def check_convertible(hf_config: dict[str, Any]) -> None:
    """Refuse a base that Megatron-Bridge 0.6.2 converts wrongly without saying so.

    Its Qwen3-MoE provider makes every layer an MoE layer (``mlp_only_layers`` and
    ``decoder_sparse_step`` are ignored): dense layers' weights are not mapped, and the
    imported model computes garbage (NaN logits on a toy with one dense layer). The paper's
    Qwen3-30B-A3B has none.
    """
    dense = hf_config.get("mlp_only_layers") or hf_config.get("decoder_sparse_step", 1) != 1
    if hf_config.get("model_type") == "qwen3_moe" and dense:
        raise UserInputError(
            "Megatron-Bridge 0.6.2 converts Qwen3-MoE with MoE in every layer; this base has dense "
            f"layers (mlp_only_layers {hf_config.get('mlp_only_layers')}, decoder_sparse_step "
            f"{hf_config.get('decoder_sparse_step', 1)})"
        )


def import_base(args: argparse.Namespace) -> None:
    """HF -> Megatron, once per base model, into a staging folder.

    Bridge's ``AutoBridge.import_ckpt`` step by step, with the tokenizer (whose files the
    checkpoint keeps) loaded with ``trust_remote_code``: Moonlight's is remote code, and
    ``import_ckpt`` would pass the flag to the model's config too, which Bridge's Moonlight
    recipe reads without it.
    """
    from workflow_scripts.modeling.tokenizer import load_tokenizer

    hf_config = json.loads((Path(args.hf_base) / "config.json").read_text())
    check_convertible(hf_config)
    tokenizer = load_tokenizer(args.hf_base)
    check_vocabulary(tokenizer, hf_config, Path(args.hf_base))
    from megatron.bridge import AutoBridge

    os.environ.setdefault("MASTER_PORT", free_port())
    out = Path(args.out)
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    bridge = AutoBridge.from_hf_pretrained(str(args.hf_base))
    model = bridge.to_megatron_model(wrap_with_ddp=False, use_cpu_initialization=True)
    bridge.save_megatron_model(
        model,
        str(staging),
        hf_tokenizer_path=str(args.hf_base),
        hf_tokenizer_kwargs={"trust_remote_code": True},
        low_memory_save=True,
    )
    staging.rename(out)


#: Name endings of model weights and their shard index: an export writes its own.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json")


def carried_from_base(hf_base: Path, export: Path) -> list[Path]:
    """Files of the base that the export lacks, so that it loads as the base does.

    Bridge writes weights, config and a re-saved tokenizer; a tokenizer that is remote code
    (Moonlight's ``tokenization_moonshot.py`` and ``tiktoken.model``) needs its own files too,
    which no fixed list names. Every top-level file except weights and hidden files.
    """
    return sorted(
        path
        for path in hf_base.iterdir()
        if path.is_file()
        and not path.name.startswith(".")
        and not path.name.endswith(WEIGHT_SUFFIXES)
        and not (export / path.name).exists()
    )


def export_hf(args: argparse.Namespace) -> None:
    """Megatron -> HF: the final checkpoint as a hook-free HF folder (Bridge's ``export_ckpt``).

    Bridge rebuilds a stock model from the checkpoint's ``run_config.yaml`` (the router swap
    leaves the model config untouched, so nothing of ours needs instantiating). The tokenizer
    it re-saves is loaded with ``trust_remote_code`` (Moonlight's is remote code), the model's
    config without, as for the import.
    """
    from megatron.bridge import AutoBridge

    from workflow_scripts.modeling.tokenizer import load_tokenizer

    os.environ.setdefault("MASTER_PORT", free_port())
    tracker = Path(args.megatron) / resume.TRACKER
    iteration = int(tracker.read_text().strip())
    out = Path(args.out)
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    bridge = AutoBridge.from_hf_pretrained(str(args.hf_base))
    bridge.hf_pretrained.tokenizer = load_tokenizer(args.hf_base)
    bridge.export_ckpt(str(resume.iteration_dir(Path(args.megatron), iteration)), str(staging))
    for source in carried_from_base(Path(args.hf_base), staging):
        shutil.copy2(source, staging / source.name)
    staging.rename(out)
