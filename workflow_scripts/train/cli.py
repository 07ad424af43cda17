"""``python -m workflow_scripts train run``: post-train one (model, corpus, condition, seed) locally.

    python -m workflow_scripts train run --base results/models/moonlight/base \\
        --split results/data/math20k/train.parquet --condition '{"intervention": "rpb", ...}' \\
        --training '{"backend": "hf", ...}' --seed 42 --out results/checkpoints/.../s42 \\
        --log results/checkpoints/.../s42.log.jsonl [--prior prior.npy --prior-meta meta.json] \\
        [--shuffle-record prior_validation.json] [--architecture deepseek_v3]

A prior must be the file its records name: the base prior the sha256 in its meta.json, a
shuffled prior the sha256 its shuffle wrote into prior_validation.json (``--shuffle-record``;
without it, the ``prior_validation.json`` beside the prior file, which the same shuffle job
writes). The seed fully determines the run. A killed run resumes from ``<out>.resume/``; the final
checkpoint is saved without the training-time routing hook.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import write_json
from workflow_scripts.commands import add_command, add_stage, input_kinds, json_argument
from workflow_scripts.errors import UserInputError
from workflow_scripts.layout import PRIOR_VALIDATION
from workflow_scripts.train.condition import objective_for


def train_config(training: Mapping[str, Any]) -> Any:
    """The ``training`` slice (the schema's required keys, validated) as a ``TrainConfig``: the one
    builder of that slice here; settings the hf backend lacks are errors."""
    from workflow_scripts.modeling.batches import LABEL_MODES
    from workflow_scripts.modeling.loop import TrainConfig

    backend = training["backend"]
    if backend != "hf":
        raise UserInputError(f"training.backend is {backend!r}; this command is the local backend 'hf'")
    if training["packing"]:
        raise UserInputError("training.packing: true is not supported by the hf backend (rows are padded)")
    if training["precision"] != "fp32":
        raise UserInputError(f"training.precision {training['precision']!r}: the hf backend trains in fp32")
    if training["loss_on"] not in LABEL_MODES:
        raise UserInputError(
            f"training.loss_on must be one of {list(LABEL_MODES)}, got {training['loss_on']!r}"
        )
    optimizer = training["optimizer"]
    schedule = training["schedule"]
    if optimizer["name"] not in ("adam", "adamw"):
        raise UserInputError(f"training.optimizer.name {optimizer['name']!r}: the hf backend runs AdamW")
    if schedule["name"] != "cosine":
        raise UserInputError(
            f"training.schedule.name {schedule['name']!r}: the hf backend runs warmup + cosine"
        )
    return TrainConfig(
        epochs=int(training["epochs"]),
        global_batch_size=int(training["global_batch_size"]),
        micro_batch_size=int(training["micro_batch_size"]),
        lr_max=float(schedule["lr_max"]),
        lr_min=float(schedule["lr_min"]),
        warmup_steps=int(schedule["warmup_steps"]),
        beta1=float(optimizer["beta1"]),
        beta2=float(optimizer["beta2"]),
        weight_decay=float(optimizer["weight_decay"]),
        grad_clip=float(optimizer["grad_clip"]),
        label_mode=training["loss_on"],
        checkpoint_every_steps=int(training["checkpoint_every_steps"]),
    )


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    torch.use_deterministic_algorithms(True)


def shuffle_record(args: argparse.Namespace) -> dict[str, Any] | None:
    """The shuffle's record (``--shuffle-record``, else ``prior_validation.json`` beside the prior)."""
    path = args.shuffle_record
    if path is None:
        sibling = Path(args.prior).parent / PRIOR_VALIDATION
        if not sibling.is_file():
            return None
        path = sibling
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UserInputError(f"--shuffle-record {path}: {error}") from error


def run_train(args: argparse.Namespace) -> None:
    """Load the base, train under the condition, save the hook-free checkpoint and the log."""
    import pandas as pd

    from workflow_scripts.file_formats.prior import check_prior_file, check_prior_matches, load_prior
    from workflow_scripts.modeling import checkpoint
    from workflow_scripts.modeling.batches import encode_rows, rows_without_answer
    from workflow_scripts.modeling.loop import train, write_log
    from workflow_scripts.modeling.toy import load_local, save_toy_base
    from workflow_scripts.routing.hf import find_gates

    config = train_config(args.training)
    objective, meta = objective_for(args)
    _seed_everything(args.seed)
    model, tokenizer = load_local(args.base)
    if args.architecture is not None and model.config.model_type != args.architecture:
        raise UserInputError(
            f"--architecture {args.architecture} but {args.base} is {model.config.model_type}"
        )
    if args.prior_meta:
        check_prior_matches(meta, args.split, args.base, tokenizer.chat_template)
        check_prior_file(meta, args.prior, args.condition.get("prior"), shuffle_record(args))
    split = pd.read_parquet(args.split, columns=["prompt", "answer"])
    max_length = int(args.training["sequence_length"])
    examples = encode_rows(tokenizer, split["prompt"].tolist(), split["answer"].tolist(), max_length)
    if examples and rows_without_answer(examples) == len(examples):
        raise UserInputError(
            f"config key training.sequence_length: {max_length} tokens keep no answer token of any of the "
            f"{len(examples)} rows of {args.split}: the prompts alone fill it; raise it"
        )
    prior = load_prior(args.prior) if args.prior else None
    run_key = resume_key(args, ("base", "split", "prior", "prior_meta"))
    resume_dir = checkpoint.resume_dir_for(args.out)
    try:
        records = train(
            model, examples, objective, config, args.seed, tokenizer.pad_token_id, prior, resume_dir, run_key
        )
    except ValueError as error:
        raise UserInputError(str(error)) from error
    assert all("forward" not in vars(gate) for _, gate in find_gates(model)), "routing hook still attached"
    save_toy_base(model, tokenizer, args.out)
    write_log(args.log, records)
    checkpoint.remove(resume_dir)


#: The settings a run key holds besides its inputs' contents (both backends).
RUN_SETTINGS = ("condition", "training", "seed", "bias_in_gate_weights")


def resume_key(args: argparse.Namespace, inputs: tuple[str, ...]) -> str:
    """The run key of both backends: the condition's settings and seed, and the named inputs' contents."""
    from workflow_scripts.modeling.run_key import run_key

    return run_key({k: getattr(args, k) for k in RUN_SETTINGS}, {k: getattr(args, k) for k in inputs})


def _condition_arguments(command: argparse.ArgumentParser) -> None:
    """Arguments both backends read: the condition, training section, seed, prior and its records."""
    command.add_argument("--split", required=True, help="training split parquet (prompt, answer)")
    command.add_argument("--condition", required=True, type=json_argument, help="registry condition (JSON)")
    command.add_argument(
        "--training", required=True, type=json_argument, help="config 'training' section (JSON)"
    )
    command.add_argument("--seed", required=True, type=int, help="training seed (weights init is the base's)")
    command.add_argument("--prior", help="prior .npy (N, 2, L, E), row i = split row i")
    command.add_argument("--prior-meta", help="the prior's meta.json")
    command.add_argument(
        "--shuffle-record",
        help="prior_validation.json of the shuffle that wrote a shuffled --prior (its sha256); "
        "default: the one beside --prior, if any",
    )
    command.add_argument(
        "--bias-in-gate-weights",
        choices=("true", "false"),
        default="true",
        help="config prior.bias_in_gate_weights: whether RPB's biased logits also give the gate weights",
    )


def _entry(name: str) -> Any:
    """A command of the Megatron entry point, imported only when it runs (it needs Megatron-Bridge)."""

    def run(args: argparse.Namespace) -> None:
        from workflow_scripts.train.megatron import entry

        getattr(entry, name)(args)

    return run


MEGATRON_INPUTS = ("hf_base", "megatron_base", "dataset", "split", "prior", "prior_meta")
# Everything the training reads: its claim hashes these once, its provenance record lists them.
MEGATRON_RUN_INPUTS = (*MEGATRON_INPUTS, "shuffle_record")
MEGATRON_FOLDERS = ("hf_base", "megatron_base", "dataset")


def _megatron_inputs(command: argparse.ArgumentParser) -> None:
    """What a Megatron run reads, and its work folder: the training and its claim take the same."""
    command.add_argument("--hf-base", required=True, help="HF base checkpoint (tokenizer, provider)")
    command.add_argument("--megatron-base", required=True, help="the base imported to Megatron format")
    command.add_argument("--dataset", required=True, help="folder with the chat dataset's training.jsonl")
    _condition_arguments(command)
    command.add_argument("--work", required=True, help="resumable run folder (checkpoints, resume log)")


def _given_inputs(args: argparse.Namespace) -> dict[str, str]:
    return {name: getattr(args, name) for name in MEGATRON_RUN_INPUTS if getattr(args, name) is not None}


def _claim(args: argparse.Namespace) -> None:
    """Check and hash the run's inputs once, check the prior's chain, bind the work folder to them.

    Runs in one process before the launch, so that no rank hashes tens of GB (or every rank
    the base) while the others wait in a process group whose timeout is minutes.
    """
    from workflow_scripts.file_formats.prior import check_prior_file, check_prior_matches
    from workflow_scripts.modeling.run_key import key_of
    from workflow_scripts.records.verify import verify_inputs
    from workflow_scripts.train.megatron.resume import claim, record_digests

    _, meta = objective_for(args)  # a wrong condition or prior fails here, before any rank starts
    kinds = input_kinds(MEGATRON_FOLDERS)
    digests = verify_inputs(_given_inputs(args), digest_all=True, kinds=kinds, labels=args.option_labels)
    if args.prior_meta:
        from workflow_scripts.modeling.tokenizer import load_tokenizer

        template = load_tokenizer(args.hf_base).chat_template
        split_sha256, model_sha256 = digests["split"]["sha256"], digests["hf_base"]["sha256"]
        check_prior_matches(meta, args.split, args.hf_base, template, split_sha256, model_sha256)
        check_prior_file(meta, args.prior, args.condition.get("prior"), shuffle_record(args))
    settings = {k: getattr(args, k) for k in RUN_SETTINGS}
    key = key_of(settings, {name: digests.get(name) for name in MEGATRON_INPUTS})
    claim(Path(args.work), key)
    record_digests(Path(args.work), digests)
    if args.out:  # the workflow's record that the claim ran (rules/train.smk megatron_claim)
        write_json(args.out, {"work": args.work, "key": key, "digests": digests})


def _claimed_digests(args: argparse.Namespace) -> dict[str, Any]:
    """The training's input digests: the ones its claim took (``workflow_scripts.cli``)."""
    from workflow_scripts.train.megatron.resume import claimed_digests

    return claimed_digests(Path(args.work), _given_inputs(args))


def _launch(args: argparse.Namespace) -> None:
    from workflow_scripts.train.megatron.launch import run_launch

    run_launch(args)


def _rendezvous(args: argparse.Namespace) -> None:
    from workflow_scripts.train.megatron.launch import rendezvous_report

    rendezvous_report(args.out)


def write_chat_dataset(args: argparse.Namespace) -> None:
    import pandas as pd

    from workflow_scripts.train.megatron.dataset import write_chat_dataset as write

    split = pd.read_parquet(args.split, columns=["prompt", "answer"])
    write(split["prompt"].tolist(), split["answer"].tolist(), args.out)


def register(stages: argparse._SubParsersAction) -> None:
    commands = add_stage(stages, "train", "post-training: local (transformers) and cluster (Megatron-Bridge)")
    run = add_command(
        commands,
        "run",
        run_train,
        "post-train a base checkpoint under one condition and seed (transformers, CPU)",
        inputs=("base", "split", "prior", "prior_meta", "shuffle_record"),
        folders=("base",),
        outputs=("out", "log"),
    )
    run.add_argument("--base", required=True, help="base checkpoint directory")
    _condition_arguments(run)
    run.add_argument("--out", required=True, help="output checkpoint directory")
    run.add_argument("--log", required=True, help="JSON-lines training log")
    run.add_argument("--architecture", help="expected model_type of the base (checked)")

    megatron = add_command(
        commands,
        "megatron",
        _entry("run_megatron"),
        "post-train with Megatron-Bridge (one process per GPU, under torchrun)",
        inputs=MEGATRON_RUN_INPUTS,
        folders=MEGATRON_FOLDERS,
        outputs=("out", "record"),
    )
    megatron.set_defaults(claimed_digests=_claimed_digests)
    _megatron_inputs(megatron)
    megatron.add_argument("--moe-layers", required=True, type=int, help="MoE layers L of the model")
    megatron.add_argument("--out", required=True, help="final Megatron checkpoint folder")
    megatron.add_argument("--record", required=True, help="run record JSON (steps, resumed_from)")

    claim = add_command(
        commands,
        "megatron-claim",
        _claim,
        "bind a Megatron run's work folder to its settings and inputs, discarding one of another run",
    )
    _megatron_inputs(claim)
    claim.add_argument("--out", help="claim record (JSON): work folder, run key, input digests")

    launch = add_command(
        commands,
        "megatron-launch",
        _launch,
        "start a Megatron run on every node of the SLURM allocation (srun + torchrun, c10d rendezvous)",
    )
    launch.add_argument("--nodes", required=True, type=int, help="nodes of the run (training.parallelism)")
    launch.add_argument("--gpus-per-node", required=True, type=int, help="processes per node, one per GPU")
    launch.add_argument("--launcher", default="srun", help="starts one task per node (srun)")
    launch.add_argument(
        "--port",
        type=int,
        default=None,
        help="rendezvous port on the head node (default: 29500 plus the SLURM job id modulo 2000)",
    )
    launch.add_argument(
        "--container",
        help="apptainer image the ranks run in (config training.container); srun stays outside it",
    )
    launch.add_argument("entry", nargs=argparse.REMAINDER, help="-- then the workflow_scripts command to run")

    rendezvous = add_command(
        commands,
        "megatron-rendezvous",
        _rendezvous,
        "under megatron-launch: join the job's process group and report every rank (a launch check)",
        outputs=("out",),
    )
    rendezvous.add_argument("--out", required=True, help="report: one line per rank, the rendezvous address")

    chat = add_command(
        commands,
        "chat-dataset",
        write_chat_dataset,
        "write a training split as Megatron-Bridge's chat JSONL with prior row ids",
        inputs=("split",),
        outputs=("out",),
    )
    chat.add_argument("--split", required=True, help="training split parquet (prompt, answer)")
    chat.add_argument("--out", required=True, help="output folder (training.jsonl)")

    imported = add_command(
        commands,
        "megatron-import",
        _entry("import_base"),
        "convert an HF base checkpoint to Megatron format (once per model)",
        inputs=("hf_base",),
        folders=("hf_base",),
        outputs=("out",),
    )
    imported.add_argument("--hf-base", required=True, help="HF base checkpoint directory")
    imported.add_argument("--out", required=True, help="Megatron checkpoint folder")

    exported = add_command(
        commands,
        "megatron-export",
        _entry("export_hf"),
        "export a finished Megatron run as a hook-free HF checkpoint",
        inputs=("hf_base", "megatron"),
        folders=("hf_base", "megatron"),
        outputs=("out",),
    )
    exported.add_argument("--hf-base", required=True, help="HF base checkpoint (architecture, tokenizer)")
    exported.add_argument("--megatron", required=True, help="final Megatron checkpoint folder of the run")
    exported.add_argument("--out", required=True, help="HF checkpoint directory")
