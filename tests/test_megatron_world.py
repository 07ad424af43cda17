"""Megatron's real training loop at world size 4: every condition kind, Router-L2's anchor and its resume.

Each run is the product's ``train megatron`` entry under ``torchrun`` with Megatron-Bridge's own
``finetune()``: Megatron-Core's distributed optimizer (``get_megatron_optimizer``), Bridge's
``train_step`` calling ``optimizer.step()``, Bridge's checkpoints (``tests/megatron_world.py``
says what the harness adds: a recording callback and a kill). Layouts, on a toy Moonlight
(DeepSeek-V3 architecture, sigmoid router with expert bias) whose data-parallel rank 0 owns no
router shard, as at the paper's shapes:

* ``w1``: one process, the reference (the one-rank Megatron step equals the local backend's:
  tests/test_train_megatron_parity.py);
* ``dp4``: data parallel 4; ``tp2ep2``: data parallel 2 x tensor parallel 2 with sequence
  parallelism, experts split over 2 ranks (expert parallel 2).

For one condition of every kind of the registry, the losses, the routers' fp32 main gradients
(gathered from the optimizer's shards after ``optimizer.step()``) and main weights of ``dp4`` and
``tp2`` equal ``w1``'s, and each condition changes training against SFT. Router-L2 adds exactly
``2 lambda / L (W - W_base)`` to the main gradient (fp32, and bf16 parameters with fp32 main
parameters), and a Router-L2 run killed after a step past its checkpoint resumes to the same
losses and weights as an uninterrupted run. Run by ``tests/run_megatron_cpu.sh`` (-m megatron_world).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")
pytestmark = pytest.mark.megatron_world

import torch  # noqa: E402

from tests import bridge_cpu  # noqa: E402
from tests.dag import ROOT  # noqa: E402
from tests.dag import TRAIN_SPEC as SPEC  # noqa: E402
from tests.megatron_settings_table import paper_config  # noqa: E402
from workflow_scripts import registry  # noqa: E402

SHIM = ROOT / "tests" / "megatron_cpu_shim"
PRIOR_FILES = {
    "base": "prior.npy",
    "shuffled_within": "prior_shuffled.npy",
    "shuffled_global": "prior_shuffled.npy",
}
#: World-4 layouts: (tensor parallel, expert parallel); sequence parallel with tensor parallel.
LAYOUTS = {"dp4": (1, 1), "tp2ep2": (2, 2)}
KILL_AFTER = 3  # of 4 steps, checkpoints every 2: killed one step past its checkpoint


def condition_kinds() -> dict[str, dict]:
    """One registry condition per kind (registry.condition_kinds): the first of each."""
    conditions = paper_config()["conditions"]
    kinds = registry.condition_kinds(conditions)
    return {name: conditions[name] for name in dict.fromkeys(names[0] for names in kinds.values())}


KINDS = condition_kinds()


def training(world: int, tensor: int, precision: str, epochs: int = 1, expert: int = 1) -> dict:
    """The paper's training section at toy size: 8-row global batches of single rows, 64 tokens.

    Without gradient clipping, so the recorded main gradients are the ones Router-L2 changes.
    """
    section = json.loads(json.dumps(paper_config()["training"]))
    for key in ("backend", "container"):
        section.pop(key, None)
    section.update(
        sequence_length=64,
        global_batch_size=8,
        micro_batch_size=1,
        epochs=epochs,
        precision=precision,
        checkpoint_every_steps=2,
    )
    section["optimizer"]["grad_clip"] = 0.0
    section["schedule"] = {"name": "cosine", "lr_max": 1e-3, "lr_min": 1e-4, "warmup_steps": 0}
    section["parallelism"] = {
        "nodes": 1,
        "gpus_per_node": world,
        "tensor": tensor,
        "pipeline": 1,
        "context": 1,
        "expert": expert,
        "expert_tensor": 1,
        "sequence_parallel": tensor > 1,
        "recompute_modules": [],
    }
    return section


def job(runs: Path, name: str, condition_name: str, section: dict, work: str, **extra) -> dict:
    """A launch of condition ``condition_name`` as the rule passes it (``registry.job_condition``)."""
    condition = registry.job_condition(paper_config(), condition_name)
    prior = condition.pop("prior", None)
    return {
        "name": name,
        "work": str(runs / work),
        "condition": condition,
        "training": section,
        "prior": PRIOR_FILES[prior] if prior else None,
        **extra,
    }


def launches(runs: Path) -> list[tuple[int, list[dict]]]:
    """(world size, jobs) of each ``torchrun``: the one-process references, then each world-4 layout,
    then the bf16 runs and the resumes. Every ``finetune()`` leaves its model-parallel groups'
    gloo threads behind (Megatron keeps the groups), so a launch holds a dozen jobs at most."""
    found = [(1, [job(runs, f"w1/{n}", n, training(1, 1, "fp32"), f"w1/{n}") for n in KINDS])]
    for layout, (tensor, expert) in LAYOUTS.items():
        section = training(4, tensor, "fp32", expert=expert)
        found.append((4, [job(runs, f"{layout}/{n}", n, section, f"{layout}/{n}") for n in KINDS]))
    anchored = [job(runs, f"bf16/{n}", n, training(4, 1, "bf16"), f"bf16/{n}") for n in ("sft", "router_l2")]
    for precision in ("fp32", "bf16"):
        long = training(4, 1, precision, epochs=2)
        anchored += [
            job(runs, f"{precision}/uninterrupted", "router_l2", long, f"{precision}/uninterrupted"),
            job(
                runs, f"{precision}/killed", "router_l2", long, f"{precision}/resumed", kill_after=KILL_AFTER
            ),
            job(runs, f"{precision}/resumed", "router_l2", long, f"{precision}/resumed"),
        ]
    return [*found, (4, anchored)]


def launch(world: int, inputs: Path, plan: list[dict], out: Path) -> dict:
    plan_file = out.with_suffix(".plan.json")
    plan_file.write_text(json.dumps(plan))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SHIM), str(ROOT)]),
        "RPB_CPU_RUN_PRECISION": "1",
        "RPB_MOE_LAYERS": str(SPEC.num_moe_layers),
    }
    torchrun = Path(sys.executable).with_name("torchrun")
    command = [str(torchrun), "--standalone", f"--nproc-per-node={world}", "-m", "tests.megatron_world"]
    log = out.with_suffix(".log")
    with log.open("w") as sink:
        done = subprocess.run(
            [*command, str(inputs), str(plan_file), str(out)],
            cwd=out.parent,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=3000,
        )
    assert done.returncode == 0, log.read_text(errors="replace")[-8000:]
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict:
    """Both launches' records by job name, from one set of inputs."""
    from tests.megatron_world import prepare

    bridge_cpu.install()
    root = tmp_path_factory.mktemp("world")
    inputs = root / "inputs"
    paths = prepare(inputs, SPEC)
    imported = subprocess.run(
        [sys.executable, "-m", "tests.bridge_cpu", "run", "train", "megatron-import", "--hf-base",
         paths["base"], "--out", paths["megatron_base"], "--provenance", str(root / "import.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr[-4000:]
    runs = root / "runs"
    found: dict = {"runs": runs}
    for index, (world, plan) in enumerate(launches(runs)):
        found |= launch(world, inputs, plan, root / f"launch{index}.pt")
    return found


def close(a: torch.Tensor, b: torch.Tensor, tolerance: float) -> bool:
    return float((a - b).abs().max()) <= tolerance * max(float(b.abs().max()), 1.0)


def differs(run: dict, reference: dict, field: str, step: int) -> float:
    """Largest difference of ``field`` at ``step`` (1-based) over the layers, relative to the reference's."""
    ours, theirs = run["steps"][step - 1][field], reference["steps"][step - 1][field]
    pairs = zip(ours, theirs, strict=True)
    return max(float((a - b).abs().max()) / max(float(b.abs().max()), 1e-30) for a, b in pairs)


def test_every_condition_kind_trains_at_data_parallel_4_as_on_one_process(records):
    for name in KINDS:
        reference, run = records[f"w1/{name}"], records[f"dp4/{name}"]
        assert run["finished"] and len(run["steps"]) == len(reference["steps"]) == 2, name
        for ours, theirs in zip(run["steps"], reference["steps"], strict=True):
            assert ours["dtype"] == "torch.float32", name
            assert abs(ours["loss"] - theirs["loss"]) <= 1e-5 * abs(theirs["loss"]), (name, ours["step"])
            for field in ("grads", "mains"):
                for layer, (a, b) in enumerate(zip(ours[field], theirs[field], strict=True)):
                    assert close(a, b, 1e-5), (name, ours["step"], field, layer, float((a - b).abs().max()))


#: Tensor parallelism splits attention and expert sums across ranks: fp32 rounding differs, and
#: the router gradient, a sum over tokens with much cancellation, moves by up to ~5e-4 of its
#: largest element. Adam's first step, nearly a sign step, amplifies that for elements whose
#: gradient is close to 0, so the weights are compared through the first step's gradient.
TENSOR_PARALLEL_TOLERANCE = 2e-3
LOAD_BALANCING = [name for name, condition in KINDS.items() if condition["intervention"] == "load_balancing"]
#: The load-balancing loss's share of the gradient (the same layout's SFT gradient subtracted):
#: the tensor-parallel rounding of the task loss's gradient cancels, leaving ~3e-6 of its largest element.
SHARE_TOLERANCE = 1e-4


def test_every_condition_kind_trains_at_tensor_sequence_and_expert_parallel_as_on_one_process(records):
    for name in KINDS:
        reference, run = records[f"w1/{name}"], records[f"tp2ep2/{name}"]
        assert run["finished"] and len(run["steps"]) == 2, name
        for ours, theirs in zip(run["steps"], reference["steps"], strict=True):
            assert abs(ours["loss"] - theirs["loss"]) <= 1e-4 * abs(theirs["loss"]), (name, ours["step"])
        assert differs(run, reference, "grads", 1) <= TENSOR_PARALLEL_TOLERANCE, name


def load_balancing_share(records: dict, layout: str, name: str) -> list[torch.Tensor]:
    """The first step's router gradients of ``name`` less SFT's at the same layout, per layer."""
    first = {run: records[f"{layout}/{run}"]["steps"][0]["grads"] for run in (name, "sft")}
    return [a - b for a, b in zip(first[name], first["sft"], strict=True)]


def test_load_balancing_trains_at_tensor_and_sequence_parallel_as_on_one_process(records):
    """The load-balancing loss's share of the router gradient at TP 2 with SP equals one process's.

    Megatron-Core 0.19.2 weighs that gradient by the tensor-parallel group's token count under a
    padding mask (``tests/test_megatron_load_balancing_tp.py``): twice the one-process share here
    until ``PriorBiasedRouter`` attached the loss with the rank's own count.
    """
    assert LOAD_BALANCING
    for name in LOAD_BALANCING:
        tensor, one = load_balancing_share(records, "tp2ep2", name), load_balancing_share(records, "w1", name)
        for layer, (ours, theirs) in enumerate(zip(tensor, one, strict=True)):
            largest = float(theirs.abs().max())  # ~3e-5 here: relative, unlike close()'s floor of 1
            ratio = float((ours * theirs).sum() / (theirs * theirs).sum())  # 2.000 before the correction
            assert largest > 0, (name, layer)
            assert float((ours - theirs).abs().max()) <= SHARE_TOLERANCE * largest, (name, layer, ratio)


def test_every_condition_kind_changes_training_against_sft(records):
    """Parity alone would pass a condition that silently trained plain SFT on every layout."""
    sft = records["w1/sft"]["steps"]
    for name in KINDS:
        if name == "sft":
            continue
        steps = records[f"w1/{name}"]["steps"]
        moved = max(
            float((a - b).abs().max())
            for ours, theirs in zip(steps, sft, strict=True)
            for a, b in zip(ours["grads"], theirs["grads"], strict=True)
        )
        assert moved > 1e-6, f"{name} trains exactly like SFT"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_router_l2_adds_its_gradient_through_optimizer_step(records, precision):
    """Megatron calls ``prepare_grads`` only inside ``optimizer.step()``, under ``torch.no_grad``.

    Both runs take the same first step (the anchor is zero at the base), so at the second step
    their main gradients differ by exactly Router-L2's, on every shard of the distributed optimizer.
    """
    prefix = "dp4" if precision == "fp32" else "bf16"
    anchored, plain = records[f"{prefix}/router_l2"], records[f"{prefix}/sft"]
    assert anchored["steps"][0]["dtype"] == ("torch.float32" if precision == "fp32" else "torch.bfloat16")
    assert anchored["steps"][0]["owners"][0] is False, "rank 0 owns a router shard: the layout tests less"
    strength = paper_config()["conditions"]["router_l2"]["params"]["lambda"]
    layers = SPEC.num_moe_layers
    for layer in range(layers):
        first = anchored["steps"][0]["mains"][layer]
        assert torch.equal(first, plain["steps"][0]["mains"][layer])
        expected = 2 * strength / layers * (first - anchored["base"][layer])
        added = anchored["steps"][1]["grads"][layer] - plain["steps"][1]["grads"][layer]
        assert float(expected.abs().max()) > 0
        assert close(added, expected, 1e-4), (layer, float((added - expected).abs().max()))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_router_l2_killed_past_its_checkpoint_resumes_identically(records, precision):
    """The base weights rank 0 stored at the first step are read back by every rank on the restart."""
    full, killed, resumed = (
        records[f"{precision}/{name}"] for name in ("uninterrupted", "killed", "resumed")
    )
    assert full["finished"] and not killed["finished"] and resumed["finished"]
    assert [s["step"] for s in killed["steps"]] == [1, 2, KILL_AFTER]
    assert [s["step"] for s in resumed["steps"]] == [KILL_AFTER, 4]
    by_step = {s["step"]: s for s in full["steps"]}
    for step in resumed["steps"]:
        reference = by_step[step["step"]]
        assert abs(step["loss"] - reference["loss"]) <= 1e-6 * abs(reference["loss"]), step["step"]
        for a, b in zip(step["mains"], reference["mains"], strict=True):
            assert close(a, b, 1e-6), (step["step"], float((a - b).abs().max()))


def test_the_final_checkpoint_keeps_no_optimizer_state_and_records_its_starts(records):
    """Only the last checkpoint becomes the output; the distributed optimizer's state would triple it."""
    from torch.distributed.checkpoint import FileSystemReader

    runs = records["runs"]
    assert json.loads((runs / "fp32" / "resumed.json").read_text())["resumed_from"] == [0, 2]
    final = FileSystemReader(str(runs / "fp32" / "resumed.out" / "iter_0000004")).read_metadata()
    keys = list(final.state_dict_metadata)
    assert any(key.endswith("router.weight") for key in keys)
    assert not [key for key in keys if key.startswith("optimizer")], keys
    # The resumed run continued identically from iteration 2: that checkpoint kept the moments.
