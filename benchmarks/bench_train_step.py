"""Benchmark: optimizer-step time of each router intervention over plain SFT (goal <= 1.05x).

Builds the toy model of each architecture from the toy overlay (``profiles/local/toy.yaml``
sizes with the registry's E, k and MoE layers, as ``rules/common.smk`` does), a tokenizer and
rows from the toy pretraining generator, and a random Dirichlet prior, then runs the project's
own ``train`` loop (``workflow_scripts.modeling.loop``) with the toy ``training`` section, once per
intervention family of ``config.yaml``'s ``conditions``. The first condition of each
intervention stands for the rest: the beta / coefficient / lambda sweeps run the same code, and
the shuffled-prior controls (within_soft, within_hard, global_hard) are RPB and RPB-hard reading
another prior file.

A step is timed from the end of one ``optimizer.step()`` to the end of the next (a global
optimizer post-hook), on the wall clock and on the process CPU clock; the CPU clock is what the
verdict uses by default, because on a shared machine other processes inflate wall times. The
first ``--warmup`` steps of each run are dropped, runs are interleaved over conditions in a
rotating order and repeated; medians decide the verdict, the best (minimum) CPU time is shown
as the least disturbed estimate, and SFT is timed a second time as a control whose ratio shows
how much of a ratio is noise.

    python benchmarks/bench_train_step.py                          # three architectures, 1 thread
    python benchmarks/bench_train_step.py --architecture qwen3_moe --spec '{"hidden_size": 128}'
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from single_core import CLOCKS, add_clock_arguments  # noqa: E402
from toy_models import add_model_arguments, architectures, toy_spec  # noqa: E402

from workflow_scripts import registry  # noqa: E402
from workflow_scripts.modeling.batches import Example, encode_rows  # noqa: E402
from workflow_scripts.modeling.loop import TrainConfig, train  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.modeling.tokenizer import train_tokenizer  # noqa: E402
from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model  # noqa: E402
from workflow_scripts.models.pretrain_corpus import synthetic_rows  # noqa: E402
from workflow_scripts.registry import load_config, shipped_config_files  # noqa: E402
from workflow_scripts.train.cli import train_config  # noqa: E402

GOAL = 1.05
CONTROL = "sft (control)"


def one_per_intervention(conditions: dict[str, Any]) -> dict[str, list[str]]:
    """``{first condition id: every condition id with the same intervention}`` in registry order."""
    groups: dict[str, list[str]] = {}
    for name, condition in conditions.items():
        first = next((k for k in groups if conditions[k]["intervention"] == condition["intervention"]), name)
        groups.setdefault(first, []).append(name)
    return groups


def step_seconds(
    architecture: str,
    spec: ToyModelSpec,
    tokenizer: Any,
    examples: list[Example],
    objective: Objective,
    config: TrainConfig,
    prior: np.ndarray,
    warmup: int,
) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each step of one fresh ``train`` run after the first ``warmup`` steps."""
    model = build_toy_model(architecture, spec, tokenizer, seed=0)
    ends: list[tuple[float, float]] = []
    hook = register_optimizer_step_post_hook(
        lambda *_: ends.append((time.perf_counter(), time.process_time()))
    )
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the loop's progress lines
            train(model, examples, objective, config, 0, tokenizer.pad_token_id, prior)
    finally:
        hook.remove()
    kept = ends[max(warmup, 1) - 1 :]  # a step runs from the previous step's end to its own
    return [(b[0] - a[0], b[1] - a[1]) for a, b in zip(kept, kept[1:], strict=False)]


def time_conditions(
    architecture: str,
    spec: ToyModelSpec,
    tokenizer: Any,
    examples: list[Example],
    objectives: dict[str, Objective],
    config: TrainConfig,
    prior: np.ndarray,
    warmup: int,
    repeats: int,
) -> dict[str, list[tuple[float, float]]]:
    """Step samples of every condition and of the SFT control, from interleaved, rotated runs."""
    timed = [*objectives.items(), (CONTROL, objectives["sft"])]
    step_seconds(architecture, spec, tokenizer, examples, objectives["sft"], config, prior, 0)  # warm-up
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in timed}
    for repeat in range(repeats):
        shift = repeat % len(timed)  # rotate the order so no condition always runs first
        for name, objective in timed[shift:] + timed[:shift]:
            samples[name] += step_seconds(
                architecture, spec, tokenizer, examples, objective, config, prior, warmup
            )
    return samples


def summary(samples: list[tuple[float, float]]) -> tuple[float, float, float]:
    """Median wall, median CPU and best (minimum) CPU seconds of (wall, CPU) step samples."""
    wall, cpu = zip(*samples, strict=True)
    return statistics.median(wall), statistics.median(cpu), min(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_arguments(parser)
    parser.add_argument("--rows", type=int, default=64, help="training rows (toy corpora: 64)")
    parser.add_argument(
        "--sequence-length", type=int, help="tokens kept per row (default: toy training.sequence_length)"
    )
    parser.add_argument(
        "--batch-size", type=int, help="rows per optimizer step (default: toy training.global_batch_size)"
    )
    parser.add_argument(
        "--micro-batch-size", type=int, help="rows per forward (default: toy training.micro_batch_size)"
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps at the start of each run")
    parser.add_argument("--steps", type=int, default=3, help="timed optimizer steps per run")
    parser.add_argument("--repeats", type=int, default=4, help="runs per condition, interleaved")
    add_clock_arguments(parser)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)  # as `train run` does
    config = load_config(shipped_config_files(ROOT, toy=True))
    training = config["training"]
    base = train_config(training)
    length = args.sequence_length or int(training["sequence_length"])
    global_batch = args.batch_size or base.global_batch_size
    micro_batch = args.micro_batch_size or min(base.micro_batch_size, global_batch)
    run_config = dataclasses.replace(
        base,
        global_batch_size=global_batch,
        micro_batch_size=micro_batch,
        max_steps=args.warmup + args.steps,
        checkpoint_every_steps=0,
    )
    prior_settings = config["prior"]
    groups = one_per_intervention(config["conditions"])
    objectives = {
        name: Objective.from_condition(
            registry.job_condition(config, name),
            prior_settings["clip_eps"],
            prior_settings["clip_c"],
            prior_settings["bias_in_gate_weights"],
        )
        for name in groups
    }
    rows = synthetic_rows({"Math": args.rows // 2, "main": args.rows - args.rows // 2}, seed=0)
    prompts, answers = rows["prompt"].tolist(), rows["answer"].tolist()
    tokenizer = train_tokenizer([*prompts, *answers], int(config["toy_base"]["vocab_size"]))
    examples = encode_rows(tokenizer, prompts, answers, length)
    mean_tokens = np.mean([len(e.input_ids) for e in examples])
    print(f"torch threads={torch.get_num_threads()}; rows={len(examples)} (mean {mean_tokens:.0f} tokens)")
    print(f"global batch {global_batch}, micro-batch {micro_batch}, sequence length <= {length}")
    print(f"{args.warmup} warm-up + {args.steps} timed steps per run, {args.repeats} interleaved runs")
    print(f"verdict on the {args.clock} clock; conditions timed (the others run the same code):")
    for name, members in groups.items():
        print(f"  {name:<10} {objectives[name].intervention:<15} stands for {', '.join(members)}")

    verdicts = []
    for architecture in architectures(args.architecture):
        spec = toy_spec(config, architecture, args.spec)
        rng = np.random.default_rng(0)
        prior = rng.dirichlet(np.ones(spec.num_experts), size=(len(examples), 2, spec.num_moe_layers))
        prior = prior.astype(np.float32)  # (N, 2, L, E)
        samples = time_conditions(
            architecture, spec, tokenizer, examples, objectives, run_config, prior, args.warmup, args.repeats
        )
        sft = summary(samples["sft"])
        print(
            f"\n{architecture}: hidden {spec.hidden_size}, {spec.num_layers} layers "
            f"({spec.num_moe_layers} MoE), E={spec.num_experts}, k={spec.top_k}; "
            f"{len(samples['sft'])} steps per condition; ms/step (ratio to sft)"
        )
        print(f"  {'condition':<13} {'median wall':>17} {'median cpu':>17} {'best cpu':>17}")
        for name, values in samples.items():
            cells = [(value, value / ref) for value, ref in zip(summary(values), sft, strict=True)]
            ratio = cells[CLOCKS[args.clock]][1]
            verdict = f"{'meets' if ratio <= GOAL else 'MISSES'} goal <= {GOAL}x"
            if name == CONTROL:
                verdict = "(SFT timed again: the noise floor of a ratio)"
            else:
                verdicts.append(ratio <= GOAL)
            cells_text = " ".join(f"{value * 1e3:7.1f} ({r:5.3f}x)" for value, r in cells)
            print(f"  {name:<13} {cells_text}  {verdict}")
    print(f"\n{sum(verdicts)}/{len(verdicts)} (architecture, condition) pairs meet the goal <= {GOAL}x")


if __name__ == "__main__":
    main()
