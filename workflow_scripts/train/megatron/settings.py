"""Every Megatron setting of one post-training run, derived from the registry and nothing else.

The values are plain dictionaries keyed by the field names of Megatron-Bridge's
``ConfigContainer`` sections and Megatron-Core's ``TransformerConfig``, so they can be
built and tested without Megatron; ``bridge_config`` applies them to Bridge's SFT recipe
(it alone imports Bridge). Nothing here is typed twice: epochs, batch sizes, schedule,
optimizer, parallel layout and checkpoint cadence come from ``training``; the router
settings of a condition from its ``Objective`` (the same object the local backend trains with).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.errors import UserInputError
from workflow_scripts.modeling.objective import Objective
from workflow_scripts.registry import total_steps


def router_settings(objective: Objective) -> dict[str, Any]:
    """``TransformerConfig`` router fields of a condition, each set explicitly (F.6).

    The load-balancing type and coefficient are always written, because the providers'
    defaults differ (Moonlight and DeepSeek-V2: ``seq_aux_loss``; Qwen3: ``aux_loss`` 1e-3):
    LBL runs get Megatron's ``aux_loss`` (the Switch loss per micro-batch, which the local
    backend's ``load_balancing_loss`` reproduces), every other condition ``none``. The
    expert-bias update keeps the registry's rate except under RPB and its variants (rate 0,
    ``Objective.from_condition``). Router fusion is off: the prior-biased router calls the
    unfused score function. These two are ``routing.megatron.MEGATRON_NATIVE_TERMS``; the routers
    attach every other router term themselves.
    """
    balancing = objective.weight("load_balancing")
    return {
        "moe_router_load_balancing_type": "aux_loss" if balancing else "none",
        "moe_aux_loss_coeff": balancing,
        "moe_z_loss_coeff": objective.weight("z_loss") or None,
        "moe_router_bias_update_rate": objective.expert_bias_update_rate,
        "moe_router_fusion": False,
        "moe_router_dtype": "fp32",
        "moe_expert_capacity_factor": None,
    }


@dataclass(frozen=True)
class Parallelism:
    """The ``training.parallelism`` block: the layout of one run on ``nodes x gpus_per_node`` GPUs."""

    nodes: int
    gpus_per_node: int
    tensor: int
    pipeline: int
    context: int
    expert: int
    expert_tensor: int
    sequence_parallel: bool
    recompute_modules: tuple[str, ...]

    @classmethod
    def from_config(cls, block: Mapping[str, Any]) -> Parallelism:
        fields = dict(block)
        fields["recompute_modules"] = tuple(fields["recompute_modules"])
        parallelism = cls(**fields)
        parallelism.check()
        return parallelism

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def data_parallel(self) -> int:
        """Data-parallel width (F.1: 128 / (TP 2 x PP 1 x CP 1) = 64)."""
        return self.world_size // (self.tensor * self.pipeline * self.context)

    def check(self) -> None:
        """Raise ``UserInputError`` for layouts this backend cannot run, naming the key."""
        where = "training.parallelism"
        model_parallel = self.tensor * self.pipeline * self.context
        if self.world_size % model_parallel:
            raise UserInputError(f"{where}: {self.world_size} GPUs are not divisible by TP x PP x CP")
        if self.pipeline != 1:
            raise UserInputError(
                f"{where}.pipeline: {self.pipeline}; the prior-biased routers need every MoE layer on one "
                "pipeline stage (the paper uses 1)"
            )
        if self.context != 1:
            raise UserInputError(
                f"{where}.context: {self.context}; span slicing supports context 1 (the paper's)"
            )
        if self.tensor > 1 and not self.sequence_parallel:
            raise UserInputError(f"{where}.sequence_parallel: Megatron MoE with tensor parallelism needs it")
        expert_group = self.expert * self.expert_tensor
        if (self.world_size // self.pipeline) % expert_group:
            raise UserInputError(
                f"{where}.expert: EP x ETP = {expert_group} does not divide the GPUs per stage"
            )

    def model_fields(self) -> dict[str, Any]:
        """Provider / ``TransformerConfig`` fields of the layout."""
        return {
            "tensor_model_parallel_size": self.tensor,
            "pipeline_model_parallel_size": self.pipeline,
            "context_parallel_size": self.context,
            "expert_model_parallel_size": self.expert,
            "expert_tensor_parallel_size": self.expert_tensor,
            "sequence_parallel": self.sequence_parallel,
            "recompute_granularity": "selective" if self.recompute_modules else None,
            "recompute_modules": list(self.recompute_modules),
        }


#: Checkpoints a run keeps while it trains: resume reads only the newest complete one (``resume``).
KEEP_CHECKPOINTS = 1


def run_steps(training: Mapping[str, Any], num_rows: int) -> int:
    """Optimizer steps of a run: ``ceil(epochs * N / GBS)`` (F.6: 782 for 20,000 rows)."""
    return total_steps(num_rows, int(training["global_batch_size"]), int(training["epochs"]))


def rehearsed_preemption(training: Mapping[str, Any], steps: int, resume_step: int | None) -> int | None:
    """The step a fresh run stops at, as a preempted job would (``preempt_after_steps``, which the
    rehearsal's ``training.preempt`` sets for the runs of its conditions): Bridge saves there and
    exits, the job fails, and its retry resumes from that checkpoint. None for a resumed run, or
    when the run is not to be preempted."""
    stop = training.get("preempt_after_steps")
    if stop is None or resume_step is not None:
        return None
    if not 0 < int(stop) < steps:
        raise UserInputError(
            f"training.preempt.after_steps {stop}: a rehearsed preemption needs a step before the run's "
            f"last ({steps})"
        )
    return int(stop)


def run_settings(training: Mapping[str, Any], num_rows: int, seed: int) -> dict[str, dict[str, Any]]:
    """``ConfigContainer`` section -> fields of a run over ``num_rows`` rows, from ``training``.

    Validation is off (``eval_iters`` 0): the paper evaluates after training only. The
    learning rate decays over the whole run, so ``lr_decay_iters`` equals ``train_iters``.
    Weight decay is set on the scheduler too: Megatron's parameter scheduler rewrites every
    group's decay each step from ``start_weight_decay``/``end_weight_decay`` (the SFT
    recipe's 0.033), so ``optimizer.weight_decay`` alone never reaches the optimizer.
    Checkpoints are saved synchronously (``async_save`` off), so a checkpoint is complete
    before the next step starts (``resume``), and only the newest ``KEEP_CHECKPOINTS`` stay:
    Bridge deletes older ones after the new one is written, tracker and ``run_config.yaml``
    included.
    """
    if training.get("packing"):
        raise UserInputError("training.packing: the paper trains without packing, and packing drops metadata")
    if training["loss_on"] != "answer":
        raise UserInputError(f"training.loss_on {training['loss_on']!r}: the chat dataset masks the answer")
    steps = run_steps(training, num_rows)
    optimizer, schedule = training["optimizer"], training["schedule"]
    return {
        "train": {
            "train_iters": steps,
            "global_batch_size": int(training["global_batch_size"]),
            "micro_batch_size": int(training["micro_batch_size"]),
        },
        "validation": {"eval_iters": 0, "eval_interval": steps},
        "optimizer": {
            "optimizer": "adam",
            "lr": float(schedule["lr_max"]),
            "min_lr": float(schedule["lr_min"]),
            "adam_beta1": float(optimizer["beta1"]),
            "adam_beta2": float(optimizer["beta2"]),
            "weight_decay": float(optimizer["weight_decay"]),
            "clip_grad": float(optimizer["grad_clip"]),
            "use_distributed_optimizer": True,
        },
        "scheduler": {
            "lr_decay_style": schedule["name"],
            "lr_warmup_iters": int(schedule["warmup_steps"]),
            "lr_decay_iters": steps,
            "start_weight_decay": float(optimizer["weight_decay"]),
            "end_weight_decay": float(optimizer["weight_decay"]),
            "weight_decay_incr_style": "constant",
        },
        "checkpoint": {
            "save_interval": int(training["checkpoint_every_steps"]),
            "async_save": False,
            "ckpt_format": "torch_dist",
            "most_recent_k": KEEP_CHECKPOINTS,
        },
        "rng": {"seed": int(seed)},
    }


def mixed_precision(training: Mapping[str, Any]) -> str | None:
    """Bridge's ``mixed_precision`` recipe name for ``training.precision`` (``None``: plain fp32)."""
    return "bf16_mixed" if training["precision"] == "bf16" else None


def model_settings(objective: Objective, training: Mapping[str, Any]) -> dict[str, Any]:
    """Provider fields of a run: parallel layout, sequence length, loss normalisation, router settings.

    ``calculate_per_token_loss`` makes the loss the mean over the answer tokens of the whole
    global batch, the local backend's normalisation. The cross-entropy stays fused, with
    Megatron-Core's native kernel: the Moonlight and DeepSeek-V2 providers ask for Transformer
    Engine's, which Megatron-LM refuses for its stability issues (``validate_args``).
    """
    parallelism = Parallelism.from_config(training["parallelism"])
    return {
        **parallelism.model_fields(),
        **router_settings(objective),
        "seq_length": int(training["sequence_length"]),
        "calculate_per_token_loss": True,
        "cuda_graph_impl": "none",
        "cross_entropy_loss_fusion": True,
        "cross_entropy_fusion_impl": "native",
        "moe_shared_expert_overlap": False,
    }


#: Where, beside a run's checkpoint folder, Bridge keeps its index of the chat dataset's JSONL:
#: never in the dataset folder, an input whose digest is part of the run key (``resume.claim``).
DATASET_INDEX_DIR = "dataset_index"


def bridge_config(
    hf_base: Path,
    megatron_base: Path,
    dataset_dir: Path,
    save_dir: Path,
    objective: Objective,
    training: Mapping[str, Any],
    num_rows: int,
    seed: int,
    resume_step: int | None,
) -> Any:
    """The run's Bridge ``ConfigContainer``: generic SFT recipe, local provider, registry settings.

    Bridge's per-model SFT recipes fetch their own hub revision at config time and set a
    parallel layout and packing the registry overrides anyway, so the generic recipe
    (``recipes.common._sft_common``) gets the provider ``AutoBridge`` builds from the pinned
    local base, then every value above. ``save_dir`` is the checkpoint folder inside the run's
    work folder; Bridge's index of the JSONL goes beside it (``DATASET_INDEX_DIR``).
    """
    from megatron.bridge import AutoBridge
    from megatron.bridge.data.builders import ChatSFTPreprocessingConfig, GPTSFTDatasetConfig
    from megatron.bridge.recipes.common import _sft_common

    cfg = _sft_common()
    cfg.model = AutoBridge.from_hf_pretrained(str(hf_base)).to_megatron_provider(load_weights=False)
    for name, value in model_settings(objective, training).items():
        setattr(cfg.model, name, value)
    for section, fields in run_settings(training, num_rows, seed).items():
        for name, value in fields.items():
            setattr(getattr(cfg, section), name, value)
    cfg.mixed_precision = mixed_precision(training)
    if cfg.mixed_precision is None:  # plain fp32: the recipe's optimizer defaults to bf16 otherwise
        cfg.optimizer.bf16 = cfg.optimizer.fp16 = False
    cfg.dataset = GPTSFTDatasetConfig(
        seq_length=int(training["sequence_length"]),
        dataset_root=str(dataset_dir),
        preprocessing=ChatSFTPreprocessingConfig(loss_mode="assistant"),
        enable_offline_packing=False,
        offline_packing_specs=None,
        dataset_kwargs={"index_mapping_dir": str(Path(save_dir).parent / DATASET_INDEX_DIR)},
        do_validation=False,
        do_test=False,
        seed=seed,
    )
    cfg.tokenizer.tokenizer_type = "HuggingFaceTokenizer"
    cfg.tokenizer.tokenizer_model = str(hf_base)
    # Moonlight's tokenizer is remote code: without the flag transformers 5.12.1 converts
    # ``tiktoken.model`` into a fast tokenizer whose BPE merges and special-token ids are not
    # Moonlight's. Bridge loads with the config's field, which ``__post_init__`` sets from
    # ``hf_tokenizer_kwargs``; ``finetune()``'s ``ConfigContainer.validate()`` runs that again, so
    # the flag goes in both, or validate() resets it before the tokenizer is built.
    cfg.tokenizer.hf_tokenizer_kwargs = {**cfg.tokenizer.hf_tokenizer_kwargs, "trust_remote_code": True}
    cfg.tokenizer.trust_remote_code = True
    cfg.checkpoint.pretrained_checkpoint = str(megatron_base)
    cfg.checkpoint.save = str(save_dir)
    # A fresh start loads the base only: Bridge would otherwise resume from its own tracker,
    # which a kill during the first save leaves pointing at an incomplete checkpoint.
    cfg.checkpoint.load = None if resume_step is None else str(save_dir)
    cfg.checkpoint.ckpt_step = resume_step
    # The recipe logs to nemo_experiments/ under the working directory (the checkout): keep the
    # run's TensorBoard events in its own work folder instead.
    cfg.logger.tensorboard_dir = str(Path(save_dir).parent / "tb_logs")
    return cfg
