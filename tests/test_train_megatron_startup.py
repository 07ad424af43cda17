"""What a cluster training meets before its first step: Bridge's start-up, tokenizer and ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")

from tests import bridge_cpu  # noqa: E402

bridge_cpu.install()  # Bridge imports Transformer Engine unguarded in one place: stubbed first
from tests.megatron_settings_table import build, paper_config, toy_bases  # noqa: E402
from workflow_scripts.train.megatron import entry  # noqa: E402

pytestmark = pytest.mark.megatron


def test_bridge_start_up_does_not_rebuild_the_wheels_prebuilt_dataset_helpers(monkeypatch):
    """The wheel has helpers_cpp built and no Makefile: Bridge's ``make`` there exits the job."""
    import megatron.bridge.training.initialize as bridge_initialize
    import megatron.core.datasets as datasets

    folder = Path(datasets.__file__).parent
    assert not (folder / "Makefile").exists() and list(folder.glob("helpers_cpp*.so"))
    monkeypatch.setattr(bridge_initialize, "compile_helpers", bridge_initialize.compile_helpers)
    with pytest.raises(SystemExit):
        bridge_initialize.compile_helpers()  # what every rank-0 of a node would do today
    entry.use_prebuilt_dataset_helpers()
    bridge_initialize.compile_helpers()  # now a no-op: the helpers import as built


def test_bridge_loads_the_tokenizer_with_remote_code_allowed(tmp_path):
    """Moonlight's tokenizer is remote code: Bridge's tokenizer config must allow it."""
    config = paper_config()
    bases = toy_bases(tmp_path / "bases")
    cfg = build(bases["moonlight"], config["conditions"]["rpb"], config, tmp_path)
    assert cfg.tokenizer.hf_tokenizer_kwargs["trust_remote_code"] is True


def test_conversions_take_a_free_port():
    port = int(entry.free_port())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # free when handed out
