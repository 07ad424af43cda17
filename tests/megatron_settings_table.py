"""What Megatron will actually use for a run, read back from the product's Bridge ``ConfigContainer``.

``effective_settings`` reads a config built by ``settings.bridge_config`` the way Bridge
consumes it: the step counts through Bridge's own ``_calculate_scheduler_steps``, learning
rate and weight decay through Megatron-Core's ``OptimizerParamScheduler`` (built by Bridge's
``_get_scheduler`` on a stand-in optimizer, stepped by one global batch per iteration as
Bridge's train loop does), everything else from the config sections and the provider.
``ConfigContainer.validate()`` itself is not run: on CPU it refuses the TE-only features the
paper's layout uses (grouped GEMM for ``moe_act`` recompute, fused permutation).

``python -m tests.megatron_settings_table`` (Megatron environment) prints the table of docs/training.md.
"""

from __future__ import annotations

import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests import bridge_cpu

ROOT = Path(__file__).resolve().parents[1]
#: Registry architecture of each paper model: its toy base stands in for the provider.
ARCHITECTURES = {"moonlight": "deepseek_v3", "deepseek_v2_lite": "deepseek_v2", "qwen3_30b": "qwen3_moe"}
#: Rows of the split (F.2: 20,000 per corpus).
NUM_ROWS = 20_000
SEED = 42


def paper_config() -> dict[str, Any]:
    """The paper-scale registry (``config.yaml`` is the paper's; the toy scale overlays it)."""
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def toy_bases(root: Path) -> dict[str, Path]:
    """A tiny HF base of every paper model's architecture under ``root``."""
    from tests.dag import TRAIN_SPEC as SPEC
    from tests.dag import toy_tokenizer
    from workflow_scripts.modeling.toy import build_toy_model, save_toy_base

    tokenizer = toy_tokenizer()
    bases = {}
    for model, architecture in ARCHITECTURES.items():
        bases[model] = root / architecture
        if not bases[model].is_dir():
            save_toy_base(build_toy_model(architecture, SPEC, tokenizer, 0), tokenizer, bases[model])
    return bases


def build(base: Path, condition: str, config: dict[str, Any], work: Path) -> Any:
    """The product's ``ConfigContainer`` of one run of ``condition``, with the objective the training
    entry point builds from what the rule passes it (``registry.job_condition``)."""
    from workflow_scripts.modeling.objective import Objective
    from workflow_scripts.registry import job_condition
    from workflow_scripts.train.condition import expert_bias_update_rate
    from workflow_scripts.train.megatron.settings import bridge_config

    training = config["training"]
    objective = Objective.from_condition(
        job_condition(config, condition),
        float(config["prior"]["clip_eps"]),
        float(config["prior"]["clip_c"]),
        bool(config["prior"]["bias_in_gate_weights"]),
        expert_bias_update_rate(training),
    )
    folders = (work / "megatron_base", work / "dataset", work / "checkpoints")
    return bridge_config(base, *folders, objective, training, NUM_ROWS, SEED, None)


class _StandInOptimizer:
    """The two parameter groups Megatron builds (decayed weights, undecayed biases and norms)."""

    def __init__(self) -> None:
        self.param_groups = [
            {"params": [], "wd_mult": 1.0, "lr_mult": 1.0},
            {"params": [], "wd_mult": 0.0, "lr_mult": 1.0},
        ]


def schedule(cfg: Any) -> list[tuple[float, float]]:
    """``(lr, weight decay of the decayed group)`` of every iteration, as Megatron sets them."""
    from megatron.bridge.training.optim import _get_scheduler

    cfg._calculate_scheduler_steps()
    optimizer = _StandInOptimizer()
    scheduler = _get_scheduler(cfg.optimizer, cfg.scheduler, optimizer)
    values = []
    for _ in range(cfg.train.train_iters):
        group = optimizer.param_groups[0]
        assert optimizer.param_groups[1]["weight_decay"] == 0.0
        values.append((group["lr"], group["weight_decay"]))
        scheduler.step(increment=cfg.train.global_batch_size)
    return values


def effective_settings(cfg: Any) -> dict[str, Any]:
    """Every value of a run Megatron will use, keyed by the name the docs/training.md table shows."""
    model, steps = cfg.model, schedule(cfg)
    decays = {wd for _, wd in steps}
    warmup = cfg.scheduler.lr_warmup_iters
    return {
        "optimizer steps": cfg.train.train_iters,
        "global batch / micro-batch": (cfg.train.global_batch_size, cfg.train.micro_batch_size),
        "sequence length (model, dataset)": (model.seq_length, cfg.dataset.seq_length),
        "packing": cfg.dataset.enable_offline_packing,
        "last partial batch of an epoch": "dropped" if cfg.dataset.drop_last else "kept",
        "Adam betas": (cfg.optimizer.adam_beta1, cfg.optimizer.adam_beta2),
        "weight decay applied (every step)": decays.pop() if len(decays) == 1 else sorted(decays),
        "gradient clipping": cfg.optimizer.clip_grad,
        "LR schedule": cfg.scheduler.lr_decay_style,
        "warm-up iterations": warmup,
        "LR at iterations 1, warm-up end, last": (steps[0][0], steps[warmup][0], steps[-1][0]),
        "LR max / min": (cfg.optimizer.lr, cfg.optimizer.min_lr),
        "precision": cfg.mixed_precision,
        "loss normalisation": "per token" if model.calculate_per_token_loss else "per micro-batch",
        "TP / PP / CP / EP / ETP": (
            model.tensor_model_parallel_size,
            model.pipeline_model_parallel_size,
            model.context_parallel_size,
            model.expert_model_parallel_size,
            model.expert_tensor_parallel_size,
        ),
        "sequence parallel": model.sequence_parallel,
        "recompute": (model.recompute_granularity, tuple(model.recompute_modules)),
        "checkpoint interval / kept": (cfg.checkpoint.save_interval, cfg.checkpoint.most_recent_k),
        "asynchronous save": cfg.checkpoint.async_save,
    }


def router_settings(cfg: Any) -> tuple[Any, ...]:
    """``(load-balancing type, coefficient, z-loss, expert-bias update rate)`` on the provider."""
    model = cfg.model
    return (
        model.moe_router_load_balancing_type,
        model.moe_aux_loss_coeff,
        model.moe_z_loss_coeff,
        model.moe_router_bias_update_rate,
    )


def _cell(value: Any) -> str:
    if isinstance(value, tuple):
        return " / ".join(_cell(v) for v in value)
    if isinstance(value, float):
        return f"`{value:.6g}`"
    return f"`{value}`"


def table_lines(root: Path) -> Iterator[str]:
    """docs/training.md's tables: run settings (Moonlight's ``lbl``), then router settings per condition."""
    config = paper_config()
    bases = toy_bases(root)
    run = effective_settings(build(bases["moonlight"], "lbl", config, root))
    yield "| Setting | Megatron uses |"
    yield "|---|---|"
    for name, value in run.items():
        yield f"| {name} | {_cell(value)} |"
    yield ""
    yield "| Condition | load balancing | coefficient | z-loss | expert-bias rate |"
    yield "|---|---|---|---|---|"
    for name in config["conditions"]:
        per_model = {router_settings(build(base, name, config, root)) for base in bases.values()}
        assert len(per_model) == 1, f"{name}: router settings differ between models: {per_model}"
        yield f"| {name} | " + " | ".join(_cell(v) for v in per_model.pop()) + " |"


def main() -> None:
    logging.disable(logging.CRITICAL)  # Bridge logs to stdout, where the table goes
    bridge_cpu.install()
    with tempfile.TemporaryDirectory() as tmp:
        sys.stdout.write("\n".join(table_lines(Path(tmp))) + "\n")


if __name__ == "__main__":
    main()
