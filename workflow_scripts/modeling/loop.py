"""The optimisation loop shared by post-training and the toy bases' brief pretraining.

AdamW with warmup + cosine, gradient accumulation normalised so that a step's gradient equals
that of one unsplit global batch, clipping, the expert-bias update rule of Megatron-Core, and
a JSON-lines log; ``train`` has the details.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from workflow_scripts.atomic import write_text
from workflow_scripts.modeling import checkpoint
from workflow_scripts.modeling.batches import IGNORE_INDEX, BatchPlan, Example, MicroBatch, collate
from workflow_scripts.modeling.objective import Objective, routing_statistics
from workflow_scripts.routing.core import expert_bias_update
from workflow_scripts.routing.hf import RoutingContext, attach, find_gates, gate_architecture

_CORRECTION_BIAS = "e_score_correction_bias"


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings; ``max_steps`` (pretraining by steps) overrides ``epochs``."""

    epochs: int
    global_batch_size: int
    micro_batch_size: int
    lr_max: float
    lr_min: float
    warmup_steps: int
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    label_mode: str = "answer"
    checkpoint_every_steps: int = 0
    max_steps: int | None = None
    progress_every: int = 10


def learning_rate(step: int, total: int, warmup: int, lr_max: float, lr_min: float) -> float:
    """LR of 0-based step ``step``: linear warmup to ``lr_max`` over ``warmup`` steps, cosine to ``lr_min``.

    Warmup step ``s < warmup`` gets ``lr_max * (s + 1) / warmup``; step ``warmup`` gets ``lr_max``
    and the last step (``total - 1``) gets ``lr_min``.
    """
    if step < warmup:
        return lr_max * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - 1 - warmup)
    return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    """AdamW; biases and norm weights (1-D parameters) without weight decay, as in Megatron."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr_max, betas=(config.beta1, config.beta2))


def _check_prior(prior: np.ndarray | None, objective: Objective, num_rows: int, gates: list) -> None:
    if not objective.needs_prior:
        return
    if prior is None:
        raise ValueError(f"intervention {objective.intervention!r} needs a prior")
    num_experts = gates[0][1].weight.shape[0]
    expected = (num_rows, 2, len(gates), num_experts)
    if tuple(prior.shape) != expected:
        raise ValueError(f"prior has shape {tuple(prior.shape)}, expected (N, 2, L, E) = {expected}")


def _frozen_buffers(model: nn.Module) -> dict[str, Tensor]:
    return {name: b.detach().clone() for name, b in model.named_buffers() if name.endswith(_CORRECTION_BIAS)}


def _update_expert_bias(gates: list, loads: Tensor, rate: float) -> None:
    """Apply the bias-update rule to every gate with a correction bias; ``loads`` is ``(L, E)``."""
    for (_, gate), counts in zip(gates, loads, strict=True):
        bias = getattr(gate, _CORRECTION_BIAS, None)
        if bias is not None:
            bias.copy_(expert_bias_update(bias, counts, rate))


def _ce_sum(model: nn.Module, batch: MicroBatch) -> Tensor:
    """Summed next-token cross-entropy over the label tokens (logits at t-1 predict token t)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(),
        batch.labels[:, 1:].flatten(),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


def train(
    model: nn.Module,
    examples: Sequence[Example],
    objective: Objective,
    config: TrainConfig,
    seed: int,
    pad_token_id: int,
    prior: np.ndarray | None = None,
    resume_dir: Path | None = None,
    run_key: str = "",
) -> list[dict[str, Any]]:
    """Train ``model`` in place and return one log record per optimizer step.

    ``prior`` is the raw ``(N, 2, L, E)`` prior whose row ``i`` belongs to ``examples[i]``.
    With ``resume_dir`` a checkpoint is written every ``config.checkpoint_every_steps``
    steps and the newest intact one (``checkpoint.restore``) of the same ``run_key`` is resumed
    from. The routing hook is attached for the run (it also records the unbiased router
    logits) and detached after.

    One optimizer step = one global batch = gradient accumulation over its micro-batches.
    Normalisation across accumulation: the cross-entropy is the mean over the label tokens of
    the whole global batch (each micro-batch contributes its summed token loss divided by the
    global batch's label-token count), so the gradient equals that of one unsplit batch; each
    data-dependent auxiliary term is the mean of its micro-batch values (as Megatron averages
    per-micro-batch aux losses); Router-L2 is added once per step.

    Expert (correction) bias: for a model whose gates carry ``e_score_correction_bias``
    (deepseek_v3) and an objective with ``expert_bias_update_rate > 0``, the bias of every MoE
    layer is updated once per optimizer step from the step's routing counts (tokens of the
    whole global batch, padding excluded, routed to each expert by the gate's actual
    selection), as Megatron-Core does in ``finalize_model_grads``
    (``routing.core.expert_bias_update``). The bias is a persistent buffer, so resume
    checkpoints (the model state dict) and the saved checkpoint carry it. With rate 0 (RPB and
    its variants, Appendix F.6) the loop checks that it did not change.
    """
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    epochs = config.epochs
    if config.max_steps is not None:  # enough epochs in the stream for max_steps full batches
        epochs = math.ceil(config.max_steps * config.global_batch_size / len(examples))
    plan = BatchPlan(len(examples), config.global_batch_size, config.micro_batch_size, seed, epochs)
    total = plan.total_steps if config.max_steps is None else config.max_steps
    gates = find_gates(model)
    _check_prior(prior, objective, len(examples), gates)
    architecture = gate_architecture(gates[0][1])
    base_weights = [gate.weight.detach().float().clone() for _, gate in gates]  # frozen base for Router-L2
    frozen = {} if objective.expert_bias_update_rate else _frozen_buffers(model)
    optimizer = _optimizer(model, config)
    start, records = (
        (0, []) if resume_dir is None else checkpoint.restore(resume_dir, run_key, model, optimizer)
    )
    context = RoutingContext(
        mode=objective.routing_mode or "soft",
        beta=objective.beta,
        bias_in_gate_weights=objective.bias_in_gate_weights,
    )
    model.train()
    with attach(model, context):
        for step in range(start, total):
            began = time.perf_counter()
            lr = learning_rate(step, total, config.warmup_steps, config.lr_max, config.lr_min)
            for group in optimizer.param_groups:
                group["lr"] = lr
            record = _step(
                model,
                examples,
                objective,
                config,
                plan.micro_batches(step),
                context,
                prior,
                architecture,
                gates,
                base_weights,
                optimizer,
                pad_token_id,
            )
            _check_finite(step + 1, record)
            record = {"step": step + 1, "lr": lr, **record, "seconds": time.perf_counter() - began}
            records.append(record)
            _progress(record, total, config.progress_every)
            every = config.checkpoint_every_steps
            if resume_dir is not None and every > 0 and (step + 1) % every == 0 and step + 1 < total:
                checkpoint.save(resume_dir, step + 1, model, optimizer, records, run_key)
    for name, value in frozen.items():
        if not torch.equal(dict(model.named_buffers())[name], value):
            raise RuntimeError(f"{name} changed during training; it must stay frozen")
    return records


def _step(
    model: nn.Module,
    examples: Sequence[Example],
    objective: Objective,
    config: TrainConfig,
    micro_rows: list[np.ndarray],
    context: RoutingContext,
    prior: np.ndarray | None,
    architecture: str,
    gates: list,
    base_weights: list[Tensor],
    optimizer: torch.optim.Optimizer,
    pad_token_id: int,
) -> dict[str, Any]:
    """One optimizer step over a global batch; returns the step's log fields.

    ``expert_load`` is the ``(L, E)`` count of token slots each gate routed to each expert over
    the step's non-pad tokens (its actual selection); the expert-bias update uses these counts.
    """
    batches = [collate(examples, rows, pad_token_id, config.label_mode) for rows in micro_rows]
    label_tokens = sum(int((b.labels[:, 1:] != IGNORE_INDEX).sum()) for b in batches)
    weights = objective.coefficients()
    optimizer.zero_grad(set_to_none=True)
    ce, terms = 0.0, {}
    max_prob, token_count, loads = 0.0, 0.0, 0.0
    for batch in batches:
        prior_rows = (
            None if prior is None else torch.from_numpy(np.asarray(prior[batch.rows], dtype=np.float32))
        )
        if objective.routing_mode is not None:
            context.set_prior(prior_rows, batch.span_ids, objective.clip_eps, objective.clip_c)
        else:
            context.set_batch(None, None)
        ce_sum = _ce_sum(model, batch)
        logits, indices = context.recorder.layer_logits(), context.recorder.layer_indices()
        token_mask = batch.attention_mask.reshape(-1).bool()
        values = objective.data_terms(architecture, logits, indices, token_mask, batch.span_ids, prior_rows)
        aux = sum((weights[name] * value for name, value in values.items()), torch.zeros(()))
        (ce_sum / max(1, label_tokens) + aux / len(batches)).backward()
        ce += ce_sum.item() / max(1, label_tokens)
        for name, value in values.items():
            terms[name] = terms.get(name, 0.0) + value.item() / len(batches)
        layer_max, count, load = routing_statistics(architecture, logits, indices, token_mask)
        max_prob, token_count, loads = max_prob + layer_max, token_count + count, loads + load
    for name, value in objective.parameter_terms([g.weight for _, g in gates], base_weights).items():
        (weights[name] * value).backward()
        terms[name] = value.item()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    optimizer.step()
    if objective.expert_bias_update_rate:
        _update_expert_bias(gates, loads, objective.expert_bias_update_rate)
    load_p = loads / loads.sum(dim=-1, keepdim=True)
    return {
        "loss": ce + sum(weights[name] * value for name, value in terms.items()),
        "ce": ce,
        **terms,
        "grad_norm": grad_norm.item(),
        "router_max_prob": (max_prob / token_count).mean().item(),
        "load_entropy": (-torch.special.xlogy(load_p, load_p).sum(dim=-1)).mean().item(),
        "label_tokens": label_tokens,
        "expert_load": loads.to(torch.int64).tolist(),
    }


class NonFiniteLossError(ValueError):
    """The loss of a step is NaN or infinite: every later step would train a broken model."""


def _check_finite(step: int, record: dict[str, Any]) -> None:
    """Stop at a non-finite loss, naming the step; raised before that step's checkpoint is saved."""
    if not math.isfinite(record["loss"]):
        terms = ", ".join(f"{k} {v}" for k, v in record.items() if isinstance(v, float) and k != "loss")
        raise NonFiniteLossError(
            f"training step {step}: loss is {record['loss']} ({terms}); stopping without saving this "
            "step (check training.schedule.lr_max and the data)"
        )


def _progress(record: dict[str, Any], total: int, every: int) -> None:
    step = record["step"]
    if step == 1 or step == total or step % max(1, every) == 0:
        print(
            f"step {step}/{total} loss {record['loss']:.4f} {record['seconds']:.2f} s/step",
            file=sys.stderr,
            flush=True,
        )


def write_log(path: str | Path, records: Sequence[dict[str, Any]]) -> None:
    """Write the records as JSON lines, atomically."""
    write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
