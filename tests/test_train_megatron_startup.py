"""What a cluster training meets before its first step: Bridge's start-up, tokenizer and ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")

from tests import bridge_cpu  # noqa: E402

bridge_cpu.install()  # Bridge imports Transformer Engine unguarded in one place: stubbed first
from tests.megatron_settings_table import build, paper_config  # noqa: E402
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


def test_bridge_loads_moonlights_tokenizer_as_its_remote_code(tmp_path):
    """Without ``trust_remote_code`` in Bridge's own config field (its ``hf_tokenizer_kwargs`` are read
    only when the config is made), transformers 5.12.1 converts ``tiktoken.model`` into a fast
    tokenizer whose special ids are not Moonlight's."""
    from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer

    from tests.chat_families import moonlight_remote_tokenizer
    from tests.dag import TRAIN_SPEC, toy_rows
    from workflow_scripts.modeling.moonlight import model_vocab_size
    from workflow_scripts.modeling.toy import build_toy_model, save_toy_base

    prompts, answers = toy_rows()
    tokenizer = moonlight_remote_tokenizer(prompts + answers, tmp_path / "tokenizer")
    model = build_toy_model("deepseek_v3", TRAIN_SPEC, tokenizer, 0, model_vocab_size(tokenizer))
    save_toy_base(model, tokenizer, tmp_path / "base")
    config = paper_config()
    cfg = build(tmp_path / "base", "rpb", config, tmp_path)
    bridges = build_tokenizer(cfg.tokenizer)._tokenizer.tokenizer
    assert type(bridges).__name__ == "TikTokenTokenizer" and not bridges.is_fast
    chat = [{"role": "user", "content": prompts[0]}, {"role": "assistant", "content": answers[0]}]
    rendered = tokenizer.apply_chat_template(chat, tokenize=False)
    assert bridges(rendered, add_special_tokens=False)["input_ids"] == tokenizer.encode(rendered)


def test_conversions_take_a_free_port():
    port = int(entry.free_port())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", port))  # free when handed out
