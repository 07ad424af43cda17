"""The product's Megatron training entry under ``torchrun`` at world size > 1, as a cluster runs it.

    torchrun --standalone --nproc-per-node 4 -m tests.megatron_world INPUTS PLAN OUT

Every rank runs ``train.megatron.entry.run_megatron`` (the ``train megatron`` command without its
claim check, which a random prior cannot pass) once per job of ``PLAN``: Megatron-Bridge's own
``finetune()``, its ``train_step``, Megatron's distributed optimizer from ``get_megatron_optimizer``
and ``optimizer.step()``, the product's pre-wrap hook, forward step and Router-L2 patch, Bridge's
checkpoints and the product's resume and finish. Nothing of the product is called directly.

A test callback added to ``finetune()`` records at each step's end (after ``optimizer.step()``)
the reduced loss and, gathered over the data-parallel shards of the distributed optimizer, every
router's fp32 main gradient and main weight; before the first step, the routers' base weights.
A job with ``kill_after`` raises at that step's end, as a preemption ends a run between
checkpoints, and the next job of the same work folder resumes it. Rank 0 writes the records
(``torch.save``) to OUT. The CPU adaptations come from ``tests/megatron_cpu_shim`` on
``PYTHONPATH`` (``tests.finetune_cpu``).

PLAN is a JSON list of jobs: ``{"name", "work", "condition", "training", "prior"?, "kill_after"?}``.
INPUTS is the folder ``prepare`` wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The toy Moonlight's rows: two optimizer steps of 8-row global batches per epoch.
ROWS = 16


class Preempted(RuntimeError):
    """Raised by the recorder where a job is to be killed."""


def prepare(root: Path, spec: Any) -> dict[str, str]:
    """The inputs of every job: a toy Moonlight base with its family's chat template, split, priors, dataset.

    The Megatron import of the base is the caller's (``tests.bridge_cpu run train megatron-import``).
    """
    import pandas as pd

    from tests.chat_families import FAMILIES, family_tokenizer
    from tests.dag import toy_rows
    from workflow_scripts.modeling.toy import build_toy_model, save_toy_base
    from workflow_scripts.train.megatron.dataset import write_chat_dataset

    root.mkdir(parents=True, exist_ok=True)
    prompts, answers = toy_rows(ROWS)
    tokenizer = family_tokenizer(FAMILIES["moonlight"], prompts + answers)
    save_toy_base(build_toy_model("deepseek_v3", spec, tokenizer, 0), tokenizer, root / "base")
    pd.DataFrame({"row_id": range(ROWS), "prompt": prompts, "answer": answers}).to_parquet(
        root / "split.parquet", index=False
    )
    write_chat_dataset(prompts, answers, root / "dataset")
    rng = np.random.default_rng(0)
    prior = rng.dirichlet(np.ones(spec.num_experts), size=(ROWS, 2, spec.num_moe_layers)).astype(np.float32)
    np.save(root / "prior.npy", prior)
    np.save(root / "prior_shuffled.npy", prior[..., rng.permutation(spec.num_experts)])
    (root / "prior_meta.json").write_text(json.dumps({"clip_eps": 0.05, "clip_c": 5.0}))
    return {name: str(root / name) for name in ("base", "split.parquet", "dataset", "megatron_base")}


def gathered(routers: list[Any], optimizer: Any, field: str) -> list[Any]:
    """Each router's fp32 main ``field`` (``"grad"`` or ``"data"``), whole, from the data-parallel shards."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    from workflow_scripts.train.megatron.entry import router_main_parameters

    optimizers = getattr(optimizer, "chained_optimizers", [optimizer])
    group = parallel_state.get_data_parallel_group(with_context_parallel=True)
    whole = []
    for router in routers:
        flat = torch.zeros(router.weight.numel(), dtype=torch.float64)
        for part in optimizers:
            ((main, span),) = router_main_parameters(part, [router])
            if main is not None:
                values = main.grad if field == "grad" else main.detach()
                flat[span if span is not None else slice(None)] += values.reshape(-1).double()
        dist.all_reduce(flat, group=group)
        whole.append(flat.view(router.weight.shape).clone())
    return whole


def owns_a_router(routers: list[Any], optimizer: Any) -> bool:
    from workflow_scripts.train.megatron.entry import router_main_parameters

    optimizers = getattr(optimizer, "chained_optimizers", [optimizer])
    return any(main is not None for part in optimizers for main, _ in router_main_parameters(part, routers))


def scalar(value: Any) -> float:
    """A reduced loss of Bridge's ``loss_dict``: a value, or (sum, count) under per-token loss."""
    flat = value.detach().double().reshape(-1)
    return float(flat[0] / flat[1]) if flat.numel() == 2 else float(flat[0])


def recorder(record: dict[str, Any], kill_after: int | None) -> Any:
    """A Bridge callback filling ``record``: base router weights, then each step's loss, grads, weights."""
    import torch.distributed as dist
    from megatron.bridge.training.callbacks import Callback

    from workflow_scripts.routing.megatron import find_routers

    class Recorder(Callback):
        def on_train_step_start(self, context: Any) -> None:
            if "base" not in record and context.state.train_state.step == 0:
                record["base"] = [r.weight.detach().double().clone() for r in find_routers(context.model)]

        def on_train_step_end(self, context: Any) -> None:
            routers = find_routers(context.model)
            step = context.state.train_state.step + 1
            owners = [None] * dist.get_world_size()
            dist.all_gather_object(owners, owns_a_router(routers, context.optimizer))
            record.setdefault("steps", []).append(
                {
                    "step": step,
                    "loss": scalar(context.loss_dict["lm loss"]),
                    "grads": gathered(routers, context.optimizer, "grad"),
                    "mains": gathered(routers, context.optimizer, "data"),
                    "owners": owners,
                    "dtype": str(routers[0].weight.dtype),
                }
            )
            if step == kill_after:
                raise Preempted(f"killed after step {step}")

    return Recorder()


def run_job(inputs: Path, job: dict[str, Any], moe_layers: int) -> dict[str, Any]:
    """One ``train megatron`` start of ``job`` with the recorder in ``finetune()``; its record."""
    import megatron.bridge.training.finetune as bridge_finetune

    from workflow_scripts.cli import build_parser
    from workflow_scripts.train.megatron import entry

    work = Path(job["work"])
    argv = ["train", "megatron", "--hf-base", str(inputs / "base"), "--megatron-base"]
    argv += [str(inputs / "megatron_base"), "--dataset", str(inputs / "dataset"), "--split"]
    argv += [str(inputs / "split.parquet"), "--condition", json.dumps(job["condition"]), "--training"]
    argv += [
        json.dumps(job["training"]),
        "--seed",
        "42",
        "--work",
        str(work),
        "--moe-layers",
        str(moe_layers),
    ]
    argv += [
        "--out",
        str(work.parent / f"{work.name}.out"),
        "--record",
        str(work.parent / f"{work.name}.json"),
    ]
    argv += ["--provenance", str(work.parent / f"{work.name}.provenance.json")]
    if job.get("prior"):
        argv += ["--prior", str(inputs / job["prior"]), "--prior-meta", str(inputs / "prior_meta.json")]
    args = build_parser().parse_args(argv)
    record: dict[str, Any] = {}
    original = bridge_finetune.finetune

    def finetune(cfg: Any, forward_step: Any, callbacks: list | None = None) -> None:
        cfg.dataset.num_workers = 0  # CPU: a loader worker per rank would import Bridge again
        original(cfg, forward_step, callbacks=[*(callbacks or []), recorder(record, job.get("kill_after"))])

    bridge_finetune.finetune = finetune
    try:
        entry.run_megatron(args)
        record["finished"] = True
    except Preempted:
        record["finished"] = False
    finally:
        bridge_finetune.finetune = original
    return record


def main(argv: list[str]) -> int:
    import os

    import torch
    import torch.distributed as dist

    inputs, plan, out = Path(argv[0]), json.loads(Path(argv[1]).read_text()), Path(argv[2])
    moe_layers = int(os.environ["RPB_MOE_LAYERS"])
    dist.init_process_group("gloo")  # before Bridge: finetune() then leaves it to this process
    records = {}
    for job in plan:
        records[job["name"]] = run_job(inputs, job, moe_layers)
        dist.barrier()
    if dist.get_rank() == 0:
        torch.save(records, out)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
