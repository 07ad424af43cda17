"""The product's Bridge ``ConfigContainer`` against F.6 and the registry, read back as Megatron uses it.

Every (model, condition) config comes from ``settings.bridge_config`` on a toy base of the
model's architecture; ``tests.megatron_settings_table`` reads the values back through Bridge's
step arithmetic and Megatron-Core's parameter scheduler (weight decay included, which the
scheduler rewrites every step). The table in docs/training.md is that module's output.
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")

from tests import bridge_cpu  # noqa: E402

bridge_cpu.install()  # Bridge imports Transformer Engine unguarded in one place: stubbed first
from tests.conftest import ROOT  # noqa: E402
from tests.megatron_settings_table import (  # noqa: E402
    NUM_ROWS,
    build,
    effective_settings,
    paper_config,
    router_settings,
    table_lines,
    toy_bases,
)

pytestmark = pytest.mark.megatron

#: Appendix F.6 (Moonlight; DeepSeek-V2-Lite and Qwen3 "analogous"), typed from the paper.
F6 = {
    "optimizer steps": 782,
    "global batch / micro-batch": (128, 1),
    "sequence length (model, dataset)": (8192, 8192),
    "packing": False,
    "Adam betas": (0.9, 0.95),
    "weight decay applied (every step)": 0.1,
    "gradient clipping": 1.0,
    "LR schedule": "cosine",
    "warm-up iterations": 40,
    "LR max / min": (1e-5, 1e-6),
    "precision": "bf16_mixed",
    "loss normalisation": "per token",
}
#: Appendix F.1: the parallel layout and recomputation of every post-training run.
F1 = {
    "TP / PP / CP / EP / ETP": (2, 1, 1, 8, 1),
    "sequence parallel": True,
    "recompute": ("selective", ("layernorm", "moe", "moe_act", "core_attn")),
}


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return toy_bases(tmp_path_factory.mktemp("bases"))


@pytest.mark.parametrize("model", ["moonlight", "deepseek_v2_lite", "qwen3_30b"])
def test_every_condition_config_gives_megatron_the_values_of_f6_and_the_registry(bases, model, tmp_path):
    config = paper_config()
    training = config["training"]
    for name, condition in config["conditions"].items():
        cfg = build(bases[model], name, config, tmp_path)
        values = effective_settings(cfg)
        for key, expected in {**F6, **F1}.items():
            assert values[key] == expected, (name, key, values[key])
        lr_first, lr_warm, lr_last = values["LR at iterations 1, warm-up end, last"]
        assert lr_first == 0.0 and lr_warm == pytest.approx(1e-5) and lr_last == pytest.approx(1e-6, rel=1e-4)
        # Resume reads only the newest complete checkpoint; older ones are deleted after each save.
        assert values["checkpoint interval / kept"] == (training["checkpoint_every_steps"], 1)
        assert values["asynchronous save"] is False
        intervention = condition["intervention"]
        params = condition.get("params", {})
        balancing, coefficient, z_loss, bias_rate = router_settings(cfg)
        lbl = intervention == "load_balancing"
        expected = ("aux_loss", params["coefficient"]) if lbl else ("none", 0.0)
        assert (balancing, coefficient) == expected, name
        assert z_loss == (params["coefficient"] if intervention == "z_loss" else None), name
        own_rate = "expert_bias_update_rate" in condition.get("settings", {})
        frozen = intervention in {"rpb", "rpb_hard"} or own_rate
        assert bias_rate == (0.0 if frozen else training["expert_bias_update_rate"]), name
        assert cfg.model.moe_router_fusion is False and cfg.model.calculate_per_token_loss is True
        # Megatron-LM's validate_args refuses Transformer Engine's fused cross-entropy, which the
        # Moonlight and DeepSeek-V2 providers ask for.
        assert cfg.model.cross_entropy_loss_fusion and cfg.model.cross_entropy_fusion_impl == "native"
        # A fresh start loads the base, never Bridge's tracker in the work folder.
        assert cfg.checkpoint.load is None and cfg.checkpoint.ckpt_step is None


def test_a_run_killed_during_its_first_save_starts_fresh_and_a_later_one_resumes_its_step(bases, tmp_path):
    """Bridge resumes from its own tracker whenever ``checkpoint.load`` is set and ``ckpt_step`` is None.

    A kill during the first save leaves that tracker pointing at a checkpoint without
    ``run_config.yaml``: the product then passes no load folder at all.
    """
    from workflow_scripts.modeling.objective import Objective
    from workflow_scripts.train.megatron import resume
    from workflow_scripts.train.megatron.settings import bridge_config

    config = paper_config()
    save = tmp_path / "checkpoints"
    killed = resume.iteration_dir(save, 100)
    killed.mkdir(parents=True)
    (killed / "train_state.pt").write_bytes(b"x")
    (save / resume.TRACKER).write_text("100\n")
    start = resume.latest_complete(save)
    assert start is None
    folders = (tmp_path / "megatron_base", tmp_path / "dataset", save)
    objective = Objective.from_condition(config["conditions"]["sft"])
    fresh = bridge_config(bases["moonlight"], *folders, objective, config["training"], NUM_ROWS, 42, start)
    assert fresh.checkpoint.load is None and fresh.checkpoint.save == str(save)
    later = bridge_config(bases["moonlight"], *folders, objective, config["training"], NUM_ROWS, 42, 200)
    assert later.checkpoint.load == str(save) and later.checkpoint.ckpt_step == 200


def test_bridge_keeps_only_the_newest_checkpoint_after_a_save(bases, tmp_path):
    """Bridge's own clean-up with the config's ``most_recent_k`` leaves what resume reads."""
    from megatron.bridge.training.checkpointing import cleanup_old_non_persistent_checkpoint

    config = paper_config()
    cfg = build(bases["moonlight"], "rpb", config, tmp_path)
    save = tmp_path / "checkpoints"
    for iteration in (100, 200, 300):
        (save / f"iter_{iteration:07d}").mkdir(parents=True)
    cleanup_old_non_persistent_checkpoint(str(save), leave_ckpt_num=cfg.checkpoint.most_recent_k)
    assert sorted(p.name for p in save.iterdir()) == ["iter_0000300"]


def test_bridge_samples_five_epochs_cut_per_epoch_plus_two_steps(bases, tmp_path):
    """782 iterations of Bridge's batch sampler: 5 reshuffled epochs of 156 full batches, then 2 more.

    Bridge cuts every epoch separately and drops its last 32 rows (``drop_last``), so a run
    sees 5 x 19,968 + 256 rows; the local backend's continuous stream sees 100,000 (docs/training.md:
    where the two backends differ, epochs).
    """
    from megatron.bridge.data.samplers import MegatronPretrainingBatchSampler

    config = paper_config()
    cfg = build(bases["moonlight"], "sft", config, tmp_path)
    gbs = cfg.train.global_batch_size
    sampler = MegatronPretrainingBatchSampler(
        total_samples=NUM_ROWS,
        consumed_samples=0,
        micro_batch_size=cfg.train.micro_batch_size,
        global_batch_size=gbs,
        data_parallel_rank=0,
        data_parallel_size=1,
        drop_last=cfg.dataset.drop_last,
        seed=cfg.dataset.seed,
    )
    batches: list[list[int]] = []
    while len(batches) < cfg.train.train_iters:  # Bridge's cyclic iterator re-enters the sampler
        batches.extend(list(batch) for batch in sampler)
    per_epoch = NUM_ROWS // gbs
    assert per_epoch == 156 and len(batches) == 6 * per_epoch
    run = batches[: cfg.train.train_iters]
    for epoch in range(5):
        rows = [row for batch in run[epoch * per_epoch : (epoch + 1) * per_epoch] for row in batch]
        assert len(rows) == len(set(rows)) == NUM_ROWS - 32
    assert sum(len(batch) for batch in run) == 5 * (NUM_ROWS - 32) + 2 * gbs


def test_docs_show_the_generated_table(tmp_path):
    page = (ROOT / "docs" / "training.md").read_text()
    missing = [line for line in table_lines(tmp_path) if line and line not in page]
    assert not missing, "docs/training.md's settings table is stale: python -m tests.megatron_settings_table"


@pytest.mark.parametrize("model", ["moonlight", "deepseek_v2_lite", "qwen3_30b"])
def test_toy_precision_trains_in_fp32_and_the_vocabulary_is_the_bases(bases, model, tmp_path):
    """``training.precision: fp32`` reaches the optimizer (the recipe's defaults to bf16), and the
    model keeps the base's vocabulary through Bridge's start-up check with the base's tokenizer."""
    import json

    from megatron.bridge.training.setup import _validate_and_set_vocab_size
    from transformers import AutoTokenizer

    config = paper_config()
    config["training"]["precision"] = "fp32"
    cfg = build(bases[model], "sft", config, tmp_path)
    assert cfg.mixed_precision is None
    assert (cfg.optimizer.bf16, cfg.optimizer.fp16) == (False, False)
    vocab = json.loads((bases[model] / "config.json").read_text())["vocab_size"]
    tokenizer = AutoTokenizer.from_pretrained(bases[model])
    assert cfg.model.vocab_size == vocab and not cfg.tokenizer.use_tokenizer_vocab_size
    assert _validate_and_set_vocab_size(cfg.model.vocab_size, len(tokenizer)) == (vocab, False)
    config["training"]["precision"] = "bf16"
    cfg = build(bases[model], "sft", config, tmp_path)
    assert cfg.mixed_precision == "bf16_mixed" and cfg.optimizer.bf16 is True
