"""Bridge's real checkpoints carry a digest list, and a damaged one is never resumed from.

Two ranks (data parallel 2) run the product's ``train megatron`` entry under ``torchrun`` with
Bridge's own ``finetune()`` and checkpoints (``tests/megatron_world.py``, CPU adaptations from
``tests/megatron_cpu_shim``): an uninterrupted run, and a run preempted one step past its
checkpoint. 64 bytes are flipped in a shard of that checkpoint; the check the launch runs
before any rank starts (``resume.set_aside_damaged``) moves it aside, and the rerun starts from
the base and ends as the uninterrupted run does. Run by ``tests/run_megatron_cpu.sh`` (-m megatron).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")
pytestmark = [pytest.mark.megatron, pytest.mark.slow]

from tests.test_megatron_world import close, job, launch, training  # noqa: E402
from workflow_scripts.train.megatron import resume  # noqa: E402

WORLD = 2


def test_a_damaged_bridge_checkpoint_is_moved_aside_and_the_rerun_ends_as_an_uninterrupted_run(
    tmp_path, capsys
):
    import subprocess
    import sys

    from tests import bridge_cpu
    from tests.dag import ROOT
    from tests.dag import TRAIN_SPEC as SPEC
    from tests.megatron_world import prepare

    bridge_cpu.install()
    inputs = tmp_path / "inputs"
    paths = prepare(inputs, SPEC)
    imported = subprocess.run(
        [sys.executable, "-m", "tests.bridge_cpu", "run", "train", "megatron-import", "--hf-base",
         paths["base"], "--out", paths["megatron_base"], "--provenance", str(tmp_path / "import.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr[-4000:]
    runs, sft = tmp_path / "runs", "sft"
    section = training(WORLD, 1, "fp32", epochs=2)  # 4 steps, a checkpoint every 2
    first = launch(
        WORLD,
        inputs,
        [
            job(runs, "uninterrupted", sft, section, "uninterrupted"),
            job(runs, "killed", sft, section, "resumed", kill_after=3),
        ],
        tmp_path / "first.pt",
    )
    full, killed = first["uninterrupted"], first["killed"]
    assert full["finished"] and not killed["finished"]
    work = runs / "resumed"
    kept = resume.iteration_dir(work / resume.CHECKPOINTS, 2)
    assert resume.latest_complete(work / resume.CHECKPOINTS) == 2
    listed = (kept / resume.DIGEST_LIST).read_text().splitlines()
    assert sorted(line.split("  ", 1)[1] for line in listed) == resume.checkpoint_files(kept)
    assert any(line.endswith(".distcp") for line in listed) and resume.damage(kept) is None
    final = runs / "uninterrupted.out" / "iter_0000004"
    assert resume.damage(final) is None, "the output carries its digest list"

    shard = max(kept.glob("*.distcp"), key=lambda path: path.stat().st_size)
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    shard.write_bytes(bytes(data))
    assert resume.set_aside_damaged(work) is None
    stderr = capsys.readouterr().err
    assert f"not resuming from {kept}: 1 file(s) differ from their recorded sha256 ({shard.name}:" in stderr
    assert "the run starts from the base" in stderr

    rerun = launch(WORLD, inputs, [job(runs, "resumed", sft, section, "resumed")], tmp_path / "second.pt")
    resumed = rerun["resumed"]
    assert resumed["finished"] and [s["step"] for s in resumed["steps"]] == [1, 2, 3, 4]
    assert json.loads((runs / "resumed.json").read_text())["resumed_from"] == [0, 0]
    for ours, reference in zip(resumed["steps"], full["steps"], strict=True):
        assert abs(ours["loss"] - reference["loss"]) <= 1e-6 * abs(reference["loss"]), ours["step"]
        for a, b in zip(ours["mains"], reference["mains"], strict=True):
            assert close(a, b, 1e-6), (ours["step"], float((a - b).abs().max()))
    assert resume.damage(runs / "resumed.out" / "iter_0000004") is None
