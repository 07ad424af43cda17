"""Megatron-Bridge executed: the product's import and export of each toy architecture, logits checked.

For Moonlight (``deepseek_v3``), DeepSeek-V2-Lite (``deepseek_v2``) and Qwen3-30B-A3B
(``qwen3_moe``), each with its family's chat template (``tests.chat_families``):

1. the local side writes a toy base (``save_toy_base``, the local backend's transformers);
   Moonlight's tokenizer is remote code there, as on the hub;
2. the product's ``train megatron-import`` turns it into a Megatron checkpoint, invoked with
   the arguments of rule ``megatron_import``, in Megatron-Bridge 0.6.2 with the transformers it
   requires (5.12.1), on CPU through ``tests.bridge_cpu`` (the test-only adaptations); it
   loads the tokenizer with ``trust_remote_code`` (without it, Moonlight's import fails);
3. the Megatron model loaded from that checkpoint gives the base's logits;
4. the product's ``train megatron-export`` (rule ``export_megatron``'s arguments) writes an HF
   checkpoint that the local side loads with the Megatron model's logits, the base's model
   class and state-dict keys (no hook, no swapped router), and the base's chat rendering
   (Moonlight's needs the tokenizer's own files, which the export carries from the base);
5. for Moonlight, a checkpoint trained with the product's routers, saved, resumed in a new
   process and trained on exports with its logits.

The import refuses a Qwen3-MoE base with dense layers, which Bridge would convert wrongly.

Tolerance: float32 throughout; ``ATOL`` bounds the largest absolute logit difference
(measured about 2e-7 on logits of magnitude about 0.6).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")
pytestmark = pytest.mark.megatron

from tests.conftest import ROOT  # noqa: E402
from workflow_scripts.families import ARCHITECTURES  # noqa: E402

ATOL = 1e-5
#: The local backend's transformers (tests/run_megatron_cpu.sh); without it the local side
#: runs on the environment's own transformers.
LOCAL_TRANSFORMERS = ROOT / ".venv-megatron" / "local-transformers"


def _run(module: str, *args: str | Path, local: bool = False) -> None:
    """``python -m module args`` from the checkout; ``local``: the local backend's transformers first."""
    path = [str(LOCAL_TRANSFORMERS)] if local and LOCAL_TRANSFORMERS.is_dir() else []
    with socket.socket() as probe:  # Bridge's one-process group: a free port, not its default 12355
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*path, str(ROOT)]),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    done = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{module} {args[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


def _product(*args: str | Path) -> None:
    """A ``python -m workflow_scripts`` command as its rule runs it, with the CPU adaptations."""
    _run("tests.bridge_cpu", "run", *args)


_CONVERTED: dict[str, dict[str, Path]] = {}


def _convert(arch: str, factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``arch``'s conversion; the first call converts every architecture, side by side.

    Each conversion is a chain of processes that spend most of their time importing torch,
    transformers and Megatron, one core each: run in threads, the three take about half as
    long on two cores as one after another.
    """
    if arch not in _CONVERTED:
        folders = {name: factory.mktemp(name) for name in ARCHITECTURES if name not in _CONVERTED}
        with ThreadPoolExecutor(len(folders)) as pool:
            done = {name: pool.submit(_convert_one, name, work) for name, work in folders.items()}
            _CONVERTED.update({name: future.result() for name, future in done.items()})
    return _CONVERTED[arch]


def _convert_one(arch: str, work: Path) -> dict[str, Path]:
    """Base -> Megatron (product import) -> logits -> HF (product export), in ``work``."""
    paths = {name: work / name for name in ("base", "megatron", "export", "base_view", "export_view")}
    paths["ids"] = work / "ids.npy"
    np.save(paths["ids"], np.random.default_rng(0).integers(0, 256, size=(2, 24)).astype(np.int64))  # (B, S)
    _run("tests.bridge_hf_side", "base", arch, paths["base"], local=True)
    _run("tests.bridge_hf_side", "inspect", paths["base"], paths["ids"], paths["base_view"], local=True)
    _product("train", "megatron-import", "--hf-base", paths["base"], "--out", paths["megatron"],
             "--provenance", work / "megatron.provenance.json")  # fmt: skip
    paths["megatron_logits"] = work / "megatron_logits.npy"
    _run(
        "tests.bridge_cpu", "logits", paths["base"], paths["megatron"], paths["ids"], paths["megatron_logits"]
    )
    _product("train", "megatron-export", "--hf-base", paths["base"], "--megatron", paths["megatron"],
             "--out", paths["export"], "--provenance", work / "export.provenance.json")  # fmt: skip
    _run("tests.bridge_hf_side", "inspect", paths["export"], paths["ids"], paths["export_view"], local=True)
    return paths


@pytest.fixture(scope="module", params=ARCHITECTURES)
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _convert(request.param, tmp_path_factory)


def _max_diff(a: Path, b: Path) -> float:
    return float(np.abs(np.load(a) - np.load(b)).max())


def test_imported_megatron_model_gives_the_bases_logits(converted: dict[str, Path]) -> None:
    diff = _max_diff(converted["megatron_logits"], converted["base_view"] / "logits.npy")
    assert diff <= ATOL, f"Megatron vs transformers logits differ by {diff:.3g}"


def test_export_gives_the_megatron_models_logits_in_the_bases_layout(converted: dict[str, Path]) -> None:
    diff = _max_diff(converted["export_view"] / "logits.npy", converted["megatron_logits"])
    assert diff <= ATOL, f"exported vs Megatron logits differ by {diff:.3g}"
    exported = json.loads((converted["export_view"] / "model.json").read_text())
    assert exported == json.loads((converted["base_view"] / "model.json").read_text())


def test_export_tokenizer_loads_and_renders_like_the_base(converted: dict[str, Path]) -> None:
    """Moonlight's tokenizer is remote code: its module must travel with the export."""
    rendered = (converted["export_view"] / "chat.txt").read_text()
    assert rendered == (converted["base_view"] / "chat.txt").read_text()


def test_a_trained_checkpoint_resumes_and_exports_with_its_logits(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Moonlight: save, end the process, resume from Bridge's checkpoint, train on, export.

    Each ``train`` process loads a Megatron checkpoint, swaps the routers to the product's
    ``PriorBiasedRouter`` (as training's pre-wrap hook does), takes two SGD steps and saves with
    Bridge's checkpoint writer. Model weights only: the optimizer and scheduler state that
    ``finetune()`` also checkpoints need its CUDA-only loop. A trained checkpoint's
    ``run_config.yaml`` names the router context's loss-scale function, which the export must
    be allowed to instantiate.
    """
    paths = _convert("deepseek_v3", tmp_path_factory)
    work = tmp_path_factory.mktemp("resume")
    trained = [paths["megatron"], work / "run1", work / "run2"]
    for previous, following in zip(trained, trained[1:], strict=False):
        _run("tests.bridge_cpu", "train", paths["base"], previous, following, paths["ids"],
             following.with_suffix(".npy"), "2")  # fmt: skip
    _product("train", "megatron-export", "--hf-base", paths["base"], "--megatron", trained[-1],
             "--out", work / "export", "--provenance", work / "export.provenance.json")  # fmt: skip
    _run("tests.bridge_hf_side", "inspect", work / "export", paths["ids"], work / "view", local=True)
    assert _max_diff(work / "run1.npy", paths["megatron_logits"]) > 1e-2, "training changed nothing"
    assert _max_diff(work / "run2.npy", work / "run1.npy") > 1e-2, "the resumed run changed nothing"
    diff = _max_diff(work / "view" / "logits.npy", work / "run2.npy")
    assert diff <= ATOL, f"exported vs trained Megatron logits differ by {diff:.3g}"


def test_import_refuses_a_qwen3_moe_base_with_dense_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bridge 0.6.2 imports it with every layer MoE and exits 0; its model's logits are NaN."""
    from workflow_scripts.cli import main

    base = tmp_path / "base"
    base.mkdir()
    config = {"model_type": "qwen3_moe", "mlp_only_layers": [0], "decoder_sparse_step": 1}
    (base / "config.json").write_text(json.dumps(config))
    out = tmp_path / "megatron"
    argv = [
        "train",
        "megatron-import",
        "--hf-base",
        str(base),
        "--out",
        str(out),
        "--provenance",
        str(tmp_path / "p.json"),
    ]
    assert main(argv) == 2
    assert "dense layers" in capsys.readouterr().err and not out.exists()
