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


def install_router_anchor(anchor: Any, iteration: int) -> None:
    """Add Router-L2's gradient to the fp32 main gradients after every ``prepare_grads``.

    Patches the ``prepare_grads`` of Megatron's mixed-precision optimizers in this process
    (the training entry point only). The optimizer that owns a router's main parameter adds
    it; with the distributed optimizer each rank adds the shard it owns.
    """
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.core.optimizer.optimizer import FP32Optimizer, MixedPrecisionOptimizer

    anchor.capture_or_load(iteration)

    def parts(optimizer: Any) -> list[tuple[Any, slice | None]]:
        owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
        found = []
        for router in anchor.routers:
            main = getattr(router.weight, "main_param", None)
            if main is None and id(router.weight) in owned:  # fp32 training: the weight is the main param
                main = router.weight
            if main is None or id(main) not in owned:
                found.append((None, None))
                continue
            span = None
            if isinstance(optimizer, DistributedOptimizer):
                param_range = optimizer._get_model_param_range_map(router.weight)["param"]
                span = slice(param_range.start, param_range.end)
            found.append((main, span))
        return found

    def wrap(original: Any) -> Any:
        def prepare_grads(self: Any) -> bool:
            found_inf = original(self)
            chosen = parts(self)
            if any(main is not None for main, _ in chosen):
                anchor.add_gradients(chosen)
            return found_inf

        return prepare_grads

    for cls in (MixedPrecisionOptimizer, DistributedOptimizer, FP32Optimizer):
        if "prepare_grads" in vars(cls):
            cls.prepare_grads = wrap(vars(cls)["prepare_grads"])


def run_megatron(args: argparse.Namespace) -> None:
    """Train under the condition; rank 0 then moves the final checkpoint and writes the record."""
    import numpy as np
    import pandas as pd
    from megatron.bridge.training.finetune import finetune
    from transformers import AutoTokenizer

    from workflow_scripts.modeling.tokenizer import answer_span_mask
    from workflow_scripts.priors.compute import load_prior
    from workflow_scripts.routing.megatron import RouterAnchor, install
    from workflow_scripts.train.cli import objective_for
    from workflow_scripts.train.megatron.spans import SpanTable
    from workflow_scripts.train.megatron.step import make_forward_step, routing_context

    # The prior's chain (split, base, template -> prior) was checked by the claim, once per job.
    objective, _ = objective_for(args)
    tokenizer = AutoTokenizer.from_pretrained(args.hf_base, local_files_only=True)
    split = pd.read_parquet(args.split, columns=["prompt", "answer"])
    prior = load_prior(args.prior) if args.prior else None
    if prior is not None and prior.shape[2] != args.moe_layers:
        raise UserInputError(f"--prior has L = {prior.shape[2]} MoE layers, the model {args.moe_layers}")
    max_length = int(args.training["sequence_length"])
    prompts, answers = split["prompt"].tolist(), split["answer"].tolist()
    table = SpanTable(lambda row: answer_span_mask(tokenizer, prompts[row], answers[row], max_length))

    work = Path(args.work)
    save_dir = work / "checkpoints"
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
    context = routing_context(objective, num_moe_layers=args.moe_layers)
    routers: list[Any] = []

    def swap_routers(chunks: list[Any]) -> list[Any]:
        routers.extend(install(chunks, context))
        if objective.router_l2:
            install_router_anchor(
                RouterAnchor(routers, objective.router_l2, work / "router_base.pt"), start or 0
            )
        return chunks

    cfg.model.register_pre_wrap_hook(swap_routers)
    finetune(cfg, make_forward_step(context, None if prior is None else np.asarray(prior), table))
    if rank0:
        steps = settings.run_steps(args.training, len(split))
        final = resume.latest_complete(save_dir)
        if final != steps:
            raise RuntimeError(f"training ended at checkpoint {final}, expected step {steps}")
        resume.finish(save_dir, Path(args.out), final)
        log = json.loads((work / "resume_log.json").read_text())
        write_json(args.record, {"steps": steps, "resumed_from": log, "megatron_checkpoint": args.out})
        shutil.rmtree(work, ignore_errors=True)


def import_base(args: argparse.Namespace) -> None:
    """HF -> Megatron, once per base model (Bridge's ``AutoBridge.import_ckpt``), into a staging folder."""
    from megatron.bridge import AutoBridge

    out = Path(args.out)
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    AutoBridge.import_ckpt(str(args.hf_base), str(staging))
    staging.rename(out)


#: Tokenizer files copied from the base next to an exported checkpoint, so it loads on its own.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


def export_hf(args: argparse.Namespace) -> None:
    """Megatron -> HF: the final checkpoint as a hook-free HF folder (Bridge's ``export_ckpt``)."""
    from megatron.bridge import AutoBridge

    tracker = Path(args.megatron) / resume.TRACKER
    iteration = int(tracker.read_text().strip())
    out = Path(args.out)
    staging = out.with_name(out.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    bridge = AutoBridge.from_hf_pretrained(str(args.hf_base))
    bridge.export_ckpt(str(resume.iteration_dir(Path(args.megatron), iteration)), str(staging))
    for name in TOKENIZER_FILES:
        source = Path(args.hf_base) / name
        if source.is_file() and not (staging / name).exists():
            shutil.copy2(source, staging / name)
    staging.rename(out)
