"""The first GPU check of the paper-scale path: Bridge's real ``finetune()`` on a toy Moonlight, end to end.

    bash tests/gpu/check_bridge_finetune.sh [--container envs/megatron.sif] [--dry-run]

On one GPU with Transformer Engine (about 15 minutes, most of it imports and model builds),
every step is the product's own command line, as ``rules/train.smk`` runs it, for RPB and for
Router-L2 (whose anchor Megatron reaches only from ``optimizer.step()``):

1. ``models toy-base`` builds the toy Moonlight of the registry (``profiles/local/toy.yaml``);
   ``priors compute`` takes its Q/A prior over a small arithmetic split (train env);
2. ``train chat-dataset`` and ``train megatron-import`` (the Megatron env or image);
3. ``train megatron-claim`` + ``train megatron-launch -- train megatron`` under each
   condition, killed (SIGKILL to the whole process group) as soon as its first checkpoint is
   complete, then claimed and launched again: it must resume from that checkpoint and finish;
   the same run in a second work folder, never interrupted: the resumed run's losses after
   the checkpoint and its final logits must equal that run's (weights, optimizer moments,
   schedule, RNG and data position all restored);
4. ``train megatron-export`` of each; the logits of the final Megatron checkpoint (Bridge's
   loader, Megatron env) against the exported HF checkpoint's (transformers, as the probes load it).

What one GPU cannot show: anything of several ranks (data-parallel shards of the distributed
optimizer, tensor and sequence parallelism, expert parallelism, NCCL), multi-node rendezvous
and the paper's shapes and memory; ``tests/test_megatron_world.py`` runs the ranks on CPU.

It prints one PASS/FAIL line per step with its numbers and exits non-zero on any FAIL.
``--dry-run`` prints the commands and runs nothing. ``--cpu`` runs the same commands on
CPU with the test-only adaptations of ``tests/megatron_cpu_shim`` on the jobs' ``PYTHONPATH``:
that is a test of this script and of the CPU path, never a GPU result, and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "tests" / "megatron_cpu_shim"
MODEL, SEED = "moonlight", 42
#: The conditions trained: the prior's router hook, and Router-L2's optimizer hook.
CONDITIONS = ("rpb", "router_l2")
#: Rows of the arithmetic split, and the training section's schedule over them: 3 epochs of
#: 8-row global batches are 24 optimizer steps, a checkpoint every 8 (the kill lands after the first).
ROWS, GLOBAL_BATCH, EPOCHS, CHECKPOINT_EVERY = 64, 8, 3, 8
SEQUENCE_LENGTH = 256
#: Toy pretraining steps: a few, so that the prior is not the uniform one (its values are not checked).
PRETRAIN_STEPS = 10
#: Largest |logit difference| accepted between the Megatron model and its HF export, by precision:
#: fp32 is the conversion's own error; bf16 weights through TE's and transformers' kernels round differently.
LOGIT_TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2}
#: Largest relative difference of a logged loss between the resumed and the uninterrupted run:
#: fp32 on CPU is deterministic; GPU kernels (atomics in TE, all-to-all order) are not, and bf16 rounds.
LOSS_TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2}


@dataclass(frozen=True)
class TrainingRun:
    """One training's folders: its work folder (checkpoints), final checkpoint, record and provenance."""

    work: Path
    trained: Path
    record: Path
    provenance: Path

    @classmethod
    def named(cls, folder: Path, name: str) -> TrainingRun:
        return cls(
            folder / f"run_{name}",
            folder / name,
            folder / f"{name}.record.json",
            folder / f"{name}.provenance.json",
        )


@dataclass
class Report:
    """PASS/FAIL lines of the check, in order."""

    lines: list[tuple[bool, str, str]] = field(default_factory=list)

    def add(self, ok: bool, step: str, detail: str) -> bool:
        self.lines.append((ok, step, detail))
        print(f"[{'PASS' if ok else 'FAIL'}] {step}: {detail}", flush=True)
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.lines) and all(ok for ok, _, _ in self.lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="results/gpu_check", help="folder for every file of the check")
    parser.add_argument(
        "--train-python",
        default=sys.executable,
        help="interpreter of the train env (toy base, prior, HF logits); default: this one",
    )
    parser.add_argument(
        "--megatron-python",
        default="python",
        help="interpreter of the Megatron env (Bridge, Transformer Engine); its folder goes first on "
        "PATH so that the launch finds its torchrun. Ignored with --container",
    )
    parser.add_argument(
        "--container",
        help="apptainer image of the Megatron rules (config training.container, e.g. envs/megatron.sif): "
        "one-process steps run in it, the launch wraps torchrun in it, as the rules do",
    )
    parser.add_argument(
        "--cpu", action="store_true", help="run on CPU with the test adaptations (not a GPU check)"
    )
    parser.add_argument(
        "--precision",
        choices=sorted(LOGIT_TOLERANCE),
        help="training precision; default bf16 (fp32 with --cpu)",
    )
    parser.add_argument("--logit-tolerance", type=float, help="max |logit difference|; default by precision")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per training launch")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    if args.container:  # the steps run in the work folder
        args.container = str(Path(args.container).resolve())
    args.precision = args.precision or ("fp32" if args.cpu else "bf16")
    if args.logit_tolerance is None:
        args.logit_tolerance = LOGIT_TOLERANCE[args.precision]
    return args


def training_section(config: dict, precision: str) -> dict:
    """The registry's training slice (``MEGATRON_TRAINING``) for one GPU and the check's short schedule."""
    from workflow_scripts.train.megatron.settings import run_steps

    training = {k: v for k, v in config["training"].items() if k not in ("backend", "container")}
    training.update(
        epochs=EPOCHS,
        global_batch_size=GLOBAL_BATCH,
        micro_batch_size=1,
        sequence_length=SEQUENCE_LENGTH,
        precision=precision,
        checkpoint_every_steps=CHECKPOINT_EVERY,
    )
    training["schedule"] = {**training["schedule"], "warmup_steps": 2}
    training["parallelism"] = {
        "nodes": 1,
        "gpus_per_node": 1,
        "tensor": 1,
        "pipeline": 1,
        "context": 1,
        "expert": 1,
        "expert_tensor": 1,
        "sequence_parallel": False,
        "recompute_modules": [],
    }
    assert run_steps(training, ROWS) > CHECKPOINT_EVERY, "the kill needs a checkpoint before the last step"
    return training


def arithmetic_split(rows: int) -> dict[str, list]:
    """A small (row_id, prompt, answer) split the toy tokenizer reads: sums with their worked answer."""
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 100, size=(rows, 2))
    return {
        "row_id": list(range(rows)),
        "prompt": [f"What is {a} + {b}?" for a, b in pairs],
        "answer": [f"{a} + {b} = {a + b}." for a, b in pairs],
    }


class Check:
    """The check's paths and the commands it runs, each the product's CLI as its rule runs it."""

    def __init__(self, args: argparse.Namespace) -> None:
        from workflow_scripts.registry import (
            job_condition,
            load_config,
            shipped_config_files,
            toy_model_sizes,
        )

        self.args = args
        config = load_config(shipped_config_files(ROOT, toy=True))
        model = config["models"][MODEL]
        self.architecture = model["architecture"]
        self.spec = toy_model_sizes(model)
        self.moe_layers = int(model["moe_layers"])
        self.pretrain = {**config["toy_base"], "steps": PRETRAIN_STEPS}
        self.pretrain.pop("lbl_coefficient_by_model", None)
        self.conditions = {
            name: job_condition(config, name) for name in CONDITIONS
        }  # as the rule passes them
        self.training = training_section(config, args.precision)
        self.prior_batch = int(config["prior"]["batch_size"])
        work = Path(args.work).resolve()
        self.work = work
        self.base, self.split = work / "base", work / "split.parquet"
        self.prior, self.prior_meta = work / "prior" / "prior.npy", work / "prior" / "meta.json"
        self.dataset, self.megatron_base = work / "dataset", work / "megatron_base"
        self.logs = work / "logs"

    def resumed(self, name: str) -> TrainingRun:
        return TrainingRun.named(self.work, f"{name}_trained")

    def uninterrupted(self, name: str) -> TrainingRun:
        return TrainingRun.named(self.work, f"{name}_uninterrupted")

    def exported(self, name: str) -> Path:
        return self.work / f"{name}_exported"

    # ----------------------------------------------------------------- environments
    def env(self) -> dict[str, str]:
        """The jobs' environment: the repository (and with --cpu the shim) first on PYTHONPATH."""
        env = dict(os.environ)
        paths = ([str(SHIM)] if self.args.cpu else []) + [str(ROOT), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        if not self.args.container and os.sep in self.args.megatron_python:
            env["PATH"] = os.pathsep.join([str(Path(self.args.megatron_python).parent), env["PATH"]])
        return env

    def train_cmd(self, *argv: str) -> list[str]:
        return [*shlex.split(self.args.train_python), "-m", "workflow_scripts", *argv]

    def megatron_cmd(self, *argv: str, gpu: bool = True) -> list[str]:
        """A one-process Megatron step, in the image (``--nv`` where it uses the GPU) or the env."""
        if self.args.container:
            image = ["apptainer", "exec", *(["--nv"] if gpu else []), self.args.container, "python"]
            return [*image, "-m", "workflow_scripts", *argv]
        return [*shlex.split(self.args.megatron_python), "-m", "workflow_scripts", *argv]

    def module_cmd(self, python: list[str], *argv: str) -> list[str]:
        return [*python, "-m", "tests.gpu.check_bridge_finetune", *argv]

    # ----------------------------------------------------------------- commands
    def run_arguments(self, run: TrainingRun, name: str) -> list[str]:
        """``params.run`` of rules/train.smk for this run of condition ``name``."""
        condition = self.conditions[name]
        prior = (
            ["--prior", str(self.prior), "--prior-meta", str(self.prior_meta)] if "prior" in condition else []
        )
        return [
            "--hf-base",
            str(self.base),
            "--megatron-base",
            str(self.megatron_base),
            "--dataset",
            str(self.dataset),
            "--split",
            str(self.split),
            "--condition",
            json.dumps(condition, sort_keys=True),
            "--training",
            json.dumps(self.training, sort_keys=True),
            "--seed",
            str(SEED),
            *prior,
            "--bias-in-gate-weights",
            "true",
            "--work",
            str(run.work),
        ]

    def preparation(self) -> list[tuple[str, list[str]]]:
        """Split, toy base, prior, chat dataset, Megatron import: (step, argv)."""
        return [
            ("split", self.module_cmd(shlex.split(self.args.train_python), "split", str(self.split))),
            (
                "toy base",
                self.train_cmd(
                    "models",
                    "toy-base",
                    "--architecture",
                    self.architecture,
                    "--spec",
                    json.dumps(self.spec),
                    "--pretrain",
                    json.dumps(self.pretrain),
                    "--out",
                    str(self.base),
                    "--report",
                    str(self.work / "base.report.json"),
                ),
            ),
            (
                "prior",
                self.train_cmd(
                    "priors",
                    "compute",
                    "--model",
                    str(self.base),
                    "--split",
                    str(self.split),
                    "--prior",
                    str(self.prior),
                    "--meta",
                    str(self.prior_meta),
                    "--stats",
                    str(self.work / "prior" / "stats.json"),
                    "--batch-size",
                    str(self.prior_batch),
                    "--max-length",
                    str(SEQUENCE_LENGTH),
                ),
            ),
            (
                "chat dataset",
                self.megatron_cmd(
                    "train", "chat-dataset", "--split", str(self.split), "--out", str(self.dataset), gpu=False
                ),
            ),
            (
                "megatron import",
                self.megatron_cmd(
                    "train",
                    "megatron-import",
                    "--hf-base",
                    str(self.base),
                    "--out",
                    str(self.megatron_base),
                    "--provenance",
                    str(self.work / "megatron_base.provenance.json"),
                ),
            ),
        ]

    def claim(self, run: TrainingRun, name: str) -> list[str]:
        return self.megatron_cmd("train", "megatron-claim", *self.run_arguments(run, name), gpu=False)

    def launch(self, run: TrainingRun, name: str) -> list[str]:
        """``megatron-launch`` without SLURM: one ``torchrun --standalone`` on this GPU."""
        container = ["--container", self.args.container] if self.args.container else []
        launcher = [sys.executable] if self.args.container else shlex.split(self.args.megatron_python)
        return [
            *launcher,
            "-m",
            "workflow_scripts",
            "train",
            "megatron-launch",
            "--nodes",
            "1",
            "--gpus-per-node",
            "1",
            *container,
            "--",
            "train",
            "megatron",
            *self.run_arguments(run, name),
            "--moe-layers",
            str(self.moe_layers),
            "--out",
            str(run.trained),
            "--record",
            str(run.record),
            "--provenance",
            str(run.provenance),
        ]

    def export(self, name: str) -> list[str]:
        return self.megatron_cmd(
            "train",
            "megatron-export",
            "--hf-base",
            str(self.base),
            "--megatron",
            str(self.resumed(name).trained),
            "--out",
            str(self.exported(name)),
            "--provenance",
            str(self.work / f"{name}_exported.provenance.json"),
        )

    def logits(self, name: str) -> tuple[list[str], list[str], list[str]]:
        """Commands writing the logits of the resumed run, its HF export and the uninterrupted run."""
        ids = str(self.work / "ids.npy")
        if self.args.container:
            megatron = ["apptainer", "exec", "--nv", self.args.container, "python"]
        else:
            megatron = shlex.split(self.args.megatron_python)
        return (
            self.module_cmd(
                megatron,
                "megatron-logits",
                str(self.base),
                str(self.resumed(name).trained),
                ids,
                str(self.work / f"{name}_logits_megatron.npy"),
            ),
            self.module_cmd(
                shlex.split(self.args.train_python),
                "hf-logits",
                str(self.exported(name)),
                ids,
                str(self.work / f"{name}_logits_hf.npy"),
            ),
            self.module_cmd(
                megatron,
                "megatron-logits",
                str(self.base),
                str(self.uninterrupted(name).trained),
                ids,
                str(self.work / f"{name}_logits_uninterrupted.npy"),
            ),
        )

    # ----------------------------------------------------------------- running
    def call(self, step: str, argv: list[str], report: Report) -> bool:
        """Run one command with its log in ``logs/``; a failure is a FAIL line naming the log.

        Commands run in the work folder: Bridge writes TensorBoard events to ``./nemo_experiments``.
        """
        log = self.logs / (slug(step) + ".log")
        start = time.monotonic()
        with log.open("w") as out:
            status = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, env=self.env(), cwd=self.work
            ).returncode
        seconds = time.monotonic() - start
        if status:
            return report.add(False, step, f"exit {status} after {seconds:.0f} s, see {log}\n{tail(log)}")
        return report.add(True, step, f"{seconds:.0f} s")

    def launch_until(
        self, step: str, run: TrainingRun, name: str, kill_at_first_checkpoint: bool, report: Report
    ) -> int | None:
        """Claim and launch; with ``kill_at_first_checkpoint`` SIGKILL the run once a checkpoint is complete.

        Returns the iteration the kill followed (or 0 when the run ran to its end), None on failure.
        """
        from workflow_scripts.train.megatron.resume import latest_complete

        if not self.call(f"{step} claim", self.claim(run, name), report):
            return None
        log = self.logs / (slug(step) + ".log")
        start = time.monotonic()
        with log.open("w") as out:
            process = subprocess.Popen(
                self.launch(run, name),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self.work,
                start_new_session=True,
            )
            killed_at = 0
            while process.poll() is None:
                if time.monotonic() - start > self.args.timeout:
                    kill_tree(process.pid)
                    process.wait()
                    report.add(False, step, f"no end after {self.args.timeout:.0f} s, see {log}")
                    return None
                found = latest_complete(run.work / "checkpoints") if kill_at_first_checkpoint else None
                if found:
                    kill_tree(process.pid)  # a preemption: launcher, torchrun and its rank at once
                    process.wait()
                    killed_at = found
                    break
                time.sleep(0.05)
        seconds = time.monotonic() - start
        if kill_at_first_checkpoint:
            if not killed_at:
                ended = f"exit {process.returncode} before a complete checkpoint, see {log}"
                report.add(False, step, f"{ended}\n{tail(log)}")
                return None
            time.sleep(5)  # a rank the kill missed would go on writing
            if run.trained.exists() or run.record.exists():
                report.add(False, step, f"the killed run went on to write {run.trained}, see {log}")
                return None
            report.add(True, step, f"killed after checkpoint {killed_at} at {seconds:.0f} s; {losses(log)}")
            return killed_at
        if process.returncode:
            ended = f"exit {process.returncode} after {seconds:.0f} s, see {log}"
            report.add(False, step, f"{ended}\n{tail(log)}")
            return None
        report.add(True, step, f"finished in {seconds:.0f} s; {losses(log)}")
        return 0

    def dry_run(self) -> None:
        print(f"# work folder {self.work}; PYTHONPATH {self.env()['PYTHONPATH']}")
        for step, argv in self.preparation():
            print(f"# {step}\n{shlex.join(argv)}")
        for name in CONDITIONS:
            for run, what in (
                (self.resumed(name), "killed at its first complete checkpoint, then again to the end"),
                (self.uninterrupted(name), "the same run uninterrupted, in its own folders"),
            ):
                claim, launch = shlex.join(self.claim(run, name)), shlex.join(self.launch(run, name))
                print(f"# {name} training, {what}\n{claim}\n{launch}")
            print(f"# {name} export\n{shlex.join(self.export(name))}")
            for argv in self.logits(name):
                print(shlex.join(argv))

    def run(self) -> Report:
        report = Report()
        self.logs.mkdir(parents=True, exist_ok=True)
        for step, argv in self.preparation():
            if not self.call(step, argv, report):
                return report
        for name in CONDITIONS:
            self.check_condition(name, report)
        return report

    def check_condition(self, name: str, report: Report) -> None:
        """Kill and resume, the uninterrupted twin, export and logits of one condition's run."""
        from workflow_scripts.train.megatron.settings import run_steps

        resumed, uninterrupted = self.resumed(name), self.uninterrupted(name)
        killed_at = self.launch_until(f"{name} train (to be killed)", resumed, name, True, report)
        if (
            killed_at is None
            or self.launch_until(f"{name} train (resumed)", resumed, name, False, report) is None
        ):
            return
        if self.launch_until(f"{name} train (uninterrupted)", uninterrupted, name, False, report) is None:
            return
        steps = run_steps(self.training, ROWS)
        record = json.loads(resumed.record.read_text())
        resumed_ok = record["steps"] == steps and record["resumed_from"][-1] == killed_at
        detail = f"record steps {record['steps']} (expected {steps}), resumed_from {record['resumed_from']}"
        report.add(resumed_ok, f"{name} resume", detail)
        if not self.call(f"{name} export", self.export(name), report):
            return
        compare_losses(
            logged_losses(self.logs / f"{name}_train_resumed.log"),
            logged_losses(self.logs / f"{name}_train_uninterrupted.log"),
            killed_at,
            LOSS_TOLERANCE[self.args.precision],
            report,
            name,
        )
        megatron_side, hf_side, uninterrupted_side = self.logits(name)  # the HF side writes the ids all read
        if not (
            self.call(f"{name} hf logits", hf_side, report)
            and self.call(f"{name} megatron logits", megatron_side, report)
        ):
            return
        trained = np.load(self.work / f"{name}_logits_megatron.npy")
        compare(
            trained, np.load(self.work / f"{name}_logits_hf.npy"), self.args.logit_tolerance, report, name
        )
        if self.call(f"{name} uninterrupted logits", uninterrupted_side, report):
            other = np.load(self.work / f"{name}_logits_uninterrupted.npy")
            difference = float(np.abs(trained - other).max())
            report.add(
                difference <= self.args.logit_tolerance,
                f"{name} resumed = uninterrupted logits",
                f"max |resumed - uninterrupted| {difference:.3g} (tolerance {self.args.logit_tolerance:g})",
            )


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and every process below it, as a preemption ends a job's processes.

    torchrun starts its ranks in sessions of their own, so killing the launcher's process group
    alone would leave the rank training on.
    """
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def slug(step: str) -> str:
    """A step's log file name: ``train (resumed) claim`` -> ``train_resumed_claim``."""
    return "_".join("".join(c if c.isalnum() else " " for c in step).split())


def tail(log: Path, lines: int = 15) -> str:
    return "\n".join("    " + line for line in log.read_text(errors="replace").splitlines()[-lines:])


def losses(log: Path) -> str:
    """First and last ``lm loss`` Bridge's training log printed."""
    found = list(logged_losses(log).values())
    if not found:
        return "no lm loss logged"
    return f"lm loss {found[0]:.6g} -> {found[-1]:.6g} over {len(found)} logged iterations"


def logged_losses(log: Path) -> dict[int, float]:
    """``lm loss`` by iteration, from Bridge's log lines (``iteration  9/  24 | ... lm loss: ...``)."""
    import re

    pattern = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?lm loss: ([0-9.E+-]+)")
    return {int(i): float(v) for i, v in pattern.findall(log.read_text(errors="replace"))}


def compare_losses(
    resumed: dict[int, float],
    uninterrupted: dict[int, float],
    killed_at: int,
    tolerance: float,
    report: Report,
    name: str,
) -> None:
    """The resumed run's losses after its checkpoint against the uninterrupted run's, per iteration."""
    after = sorted(i for i in resumed if i > killed_at)
    missing = [i for i in after if i not in uninterrupted]
    worst = max(
        (abs(resumed[i] - uninterrupted[i]) / abs(uninterrupted[i]) for i in after if i not in missing),
        default=None,
    )
    ok = bool(after) and not missing and worst is not None and worst <= tolerance
    detail = (
        f"iterations {after[0]}-{after[-1]}: max relative difference {worst:.3g} (tolerance {tolerance:g})"
        if after and worst is not None
        else f"no comparable losses after iteration {killed_at}"
    )
    report.add(
        ok,
        f"{name} resumed = uninterrupted losses",
        detail + (f"; not logged uninterrupted: {missing}" if missing else ""),
    )


def probe_ids(checkpoint: Path) -> np.ndarray:
    """Token ids ``(2, S)`` of two chat-templated split rows, the text the trained model saw."""
    from workflow_scripts.modeling.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(checkpoint)
    split = arithmetic_split(2)
    rows = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}, {"role": "assistant", "content": a}],
            tokenize=True,
            return_dict=False,
        )
        for p, a in zip(split["prompt"], split["answer"], strict=True)
    ]
    length = min(len(r) for r in rows)
    return np.asarray([r[:length] for r in rows], dtype=np.int64)


def compare(megatron: np.ndarray, hf: np.ndarray, tolerance: float, report: Report, name: str) -> None:
    vocab = min(megatron.shape[-1], hf.shape[-1])  # Megatron pads the vocabulary to a multiple
    diff = np.abs(megatron[..., :vocab].astype(np.float64) - hf[..., :vocab])
    agree = float((megatron[..., :vocab].argmax(-1) == hf[..., :vocab].argmax(-1)).mean())
    report.add(
        bool(diff.max() <= tolerance),
        f"{name} logits",
        f"max |Megatron - HF export| {diff.max():.3g} (tolerance {tolerance:g}), mean {diff.mean():.3g}, "
        f"top-1 agreement {agree:.1%}, logits scale {np.abs(hf).max():.3g}, shape {hf.shape}",
    )


def megatron_logits(hf_base: Path, megatron: Path, input_ids: np.ndarray) -> np.ndarray:
    """Float32 logits ``(B, S, V)`` of the newest iteration in ``megatron``, through Bridge's loader."""
    import torch
    from megatron.bridge import AutoBridge
    from megatron.bridge.training.model_load_save import temporary_distributed_context

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with temporary_distributed_context(backend="nccl" if device == "cuda" else "gloo"):
        bridge = AutoBridge.from_hf_pretrained(str(hf_base), trust_remote_code=True)
        (model,) = bridge.load_megatron_model(str(megatron), wrap_with_ddp=False)
        model.eval()
        tokens = torch.from_numpy(input_ids).to(device)  # (B, S)
        positions = torch.arange(tokens.shape[1], device=device).expand_as(tokens)
        with torch.no_grad():  # no mask: causal attention, as the product's forward step runs it
            logits = model(tokens, positions, None)  # (B, S, V)
    return logits.float().cpu().numpy()


def hf_logits(checkpoint: Path, input_ids: np.ndarray) -> np.ndarray:
    """Float32 logits of the exported checkpoint, loaded as the probes load it."""
    import torch

    from workflow_scripts.modeling.toy import load_local

    model, _ = load_local(checkpoint, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(input_ids)).logits.numpy()


def main(argv: Sequence[str]) -> int:
    """The check, or one of its steps in an env: ``split OUT``, ``hf-logits CHECKPOINT IDS OUT``
    (writes IDS too), ``megatron-logits HF_BASE MEGATRON IDS OUT``."""
    command, *paths = argv or [""]
    if command == "split":
        import pandas as pd

        pd.DataFrame(arithmetic_split(ROWS)).to_parquet(paths[0], index=False)
        return 0
    if command == "hf-logits":
        if not Path(paths[1]).exists():
            np.save(paths[1], probe_ids(Path(paths[0])))
        np.save(paths[2], hf_logits(Path(paths[0]), np.load(paths[1])))
        return 0
    if command == "megatron-logits":
        np.save(paths[3], megatron_logits(Path(paths[0]), Path(paths[1]), np.load(paths[2])))
        return 0
    args = parse_args(argv)
    check = Check(args)
    if args.dry_run:
        check.dry_run()
        return 0
    report = check.run()
    where = "CPU with the test adaptations (tests/megatron_cpu_shim): NOT a GPU result" if args.cpu else "GPU"
    print(f"\n{'PASS' if report.passed else 'FAIL'}: Bridge finetune check on {where}, {args.precision}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
