"""Bridge's own SFT data path with the paper families' real chat templates (Megatron environment).

Each family's toy base (its architecture, its real chat template and special tokens) gets the
product's ``ConfigContainer`` (``settings.bridge_config``), the chat template the training
entry point sets (``dataset.bridge_chat_template``), Bridge's tokenizer, ``GPTSFTDatasetBuilder``
and the chat dataset's ``collate_fn``: the rows the forward step sees are Bridge's, not built
by hand. Moonlight runs twice: with a fast stand-in tokenizer and with the kind its hub ships
(``moonlight_remote``: remote code, Python backend, two ids longer than the model), which
cannot take a generation block.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron environment (docs/training.md)")
pytestmark = pytest.mark.megatron

from tests import bridge_cpu  # noqa: E402

bridge_cpu.install()  # Bridge imports Transformer Engine unguarded in one place: stubbed first

import numpy as np  # noqa: E402
import torch  # noqa: E402
from megatron.bridge.data.builders.gpt_sft import GPTSFTDatasetBuilder  # noqa: E402
from megatron.bridge.training.tokenizers.tokenizer import build_tokenizer  # noqa: E402

from tests.chat_families import FAMILIES, family_tokenizer, moonlight_remote_tokenizer  # noqa: E402
from tests.dag import TRAIN_SPEC as SPEC  # noqa: E402
from tests.dag import toy_rows  # noqa: E402
from tests.megatron_settings_table import paper_config  # noqa: E402
from workflow_scripts.modeling.batches import Example, labels_for  # noqa: E402
from workflow_scripts.modeling.moonlight import model_vocab_size  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.modeling.tokenizer import answer_span_mask  # noqa: E402
from workflow_scripts.modeling.toy import build_toy_model, save_toy_base  # noqa: E402
from workflow_scripts.records import path_digest  # noqa: E402
from workflow_scripts.train.megatron import resume  # noqa: E402
from workflow_scripts.train.megatron.dataset import bridge_chat_template, write_chat_dataset  # noqa: E402
from workflow_scripts.train.megatron.settings import bridge_config  # noqa: E402
from workflow_scripts.train.megatron.spans import batch_span_ids, row_ids, span_table  # noqa: E402

#: The toy architecture standing in for each family's paper model; ``moonlight_remote`` is Moonlight
#: with its hub's kind of tokenizer.
ARCHITECTURES = {
    "moonlight": "deepseek_v3",
    "moonlight_remote": "deepseek_v3",
    "deepseek_v2_lite": "deepseek_v2",
    "qwen3_30b_a3b": "qwen3_moe",
}
ROWS = 6
SEQUENCE_LENGTH = 64


def toy_training() -> dict:
    """The paper's training section at toy size: one rank, short sequences, small batches."""
    training = json.loads(json.dumps(paper_config()["training"]))
    training.update(
        sequence_length=SEQUENCE_LENGTH, global_batch_size=4, micro_batch_size=2, precision="fp32"
    )
    training["parallelism"].update(
        nodes=1, gpus_per_node=1, tensor=1, expert=1, sequence_parallel=False, recompute_modules=[]
    )
    return training


class FamilyRun:
    """One family's toy base, chat dataset, product config and the Bridge dataset built from them."""

    def __init__(self, family: str, root: Path) -> None:
        self.prompts, self.answers = toy_rows(ROWS)
        self.prompts[2] = self.prompts[2] + " " + " ".join(["long"] * 40)  # cut at the sequence length
        if family == "moonlight_remote":
            self.tokenizer = moonlight_remote_tokenizer(self.prompts + self.answers, root / "tokenizer")
            self.rows = model_vocab_size(self.tokenizer)
        else:
            self.tokenizer = family_tokenizer(FAMILIES[family], self.prompts + self.answers)
            self.rows = len(self.tokenizer)
        self.base = root / "base"
        model = build_toy_model(ARCHITECTURES[family], SPEC, self.tokenizer, 0, self.rows)
        save_toy_base(model, self.tokenizer, self.base)
        self.dataset_dir = root / "dataset"
        write_chat_dataset(self.prompts, self.answers, self.dataset_dir)
        self.work = root / "work"
        objective = Objective.from_condition({"intervention": "none"})
        (root / "megatron_base").mkdir()  # the import's folder, which validate() asks to exist
        self.cfg = bridge_config(
            self.base, root / "megatron_base", self.dataset_dir, self.work / "checkpoints",
            objective, toy_training(), ROWS, 42, None,
        )  # fmt: skip

    def dataset(self, chat_template: str | None):
        """Bridge's training dataset, its tokenizer rendering with ``chat_template`` (None: the model's),
        from the config as ``finetune()`` has it when it builds the tokenizer: validated."""
        self.cfg.tokenizer.chat_template = chat_template
        self.cfg.validate()
        (train, _, _) = GPTSFTDatasetBuilder(self.cfg.dataset, build_tokenizer(self.cfg.tokenizer)).build()
        return train

    def product_dataset(self):
        """Bridge's dataset with the template the training entry point sets."""
        return self.dataset(bridge_chat_template(self.tokenizer, self.prompts, self.answers))


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def family(request, tmp_path_factory) -> FamilyRun:
    return FamilyRun(request.param, tmp_path_factory.mktemp(request.param))


def collated(dataset) -> dict:
    """All rows through Bridge's ``collate_fn``, in split order."""
    return dataset.collate_fn([dataset[i] for i in range(len(dataset))])


def test_deepseek_v2_template_needs_the_generation_block_the_product_sets(tmp_path):
    run = FamilyRun("deepseek_v2_lite", tmp_path)
    with pytest.raises(ValueError, match="generation"):
        run.dataset(None)[0]
    template = bridge_chat_template(run.tokenizer, run.prompts, run.answers)
    assert "{% generation %}" in template
    assert len(run.dataset(template)) == ROWS


def test_bridge_trains_on_the_local_backends_answer_tokens(family):
    """Bridge's loss mask is the local backend's answer labels (answer plus closing token)."""
    batch = collated(family.product_dataset())
    for sample, row in enumerate(row_ids(batch["metadata"], ROWS)):
        ids, spans = answer_span_mask(family.tokenizer, family.prompts[row], family.answers[row])
        labelled = np.asarray(labels_for(Example(ids, spans), "answer")) != -100
        inputs = min(len(ids) - 1, SEQUENCE_LENGTH)
        want = labelled[1 : inputs + 1]  # Bridge's mask is shifted to the labels
        got = batch["loss_mask"][sample, :inputs].numpy().astype(bool)
        assert np.array_equal(got, want), f"row {row}: {np.flatnonzero(got != want)}"


def test_span_ids_of_bridges_batch_are_the_local_backends(family):
    """The forward step's spans agree with Bridge's eos-padded inputs, whatever the template ends in."""
    batch = collated(family.product_dataset())
    rows = row_ids(batch["metadata"], ROWS)
    table = span_table(family.tokenizer, family.prompts, family.answers, SEQUENCE_LENGTH, family.rows)
    spans = batch_span_ids(batch["tokens"], rows, table)
    for sample, row in enumerate(rows):
        ids, want = answer_span_mask(family.tokenizer, family.prompts[row], family.answers[row])
        inputs = min(len(ids) - 1, SEQUENCE_LENGTH)
        assert torch.equal(batch["tokens"][sample, :inputs], torch.tensor(ids[:inputs]))
        assert spans[sample, :inputs].tolist() == want[:inputs]
        assert (spans[sample, inputs:] == -1).all()


def test_building_bridges_dataset_leaves_the_dataset_folder_and_the_run_key_unchanged(tmp_path):
    """Bridge's JSONL index goes beside the checkpoints: a resumed run keeps its checkpoints."""
    run = FamilyRun("qwen3_30b_a3b", tmp_path)
    before = sorted(p.name for p in run.dataset_dir.iterdir()), path_digest(run.dataset_dir)
    key = json.dumps({"dataset": before[1]["sha256"]})
    resume.claim(run.work, key)
    checkpoint = resume.iteration_dir(run.work / "checkpoints", 1)
    checkpoint.mkdir(parents=True)
    run.product_dataset()
    assert list((run.work / "dataset_index").rglob("training.jsonl.idx.npy"))
    after = sorted(p.name for p in run.dataset_dir.iterdir()), path_digest(run.dataset_dir)
    assert after == before
    assert not resume.claim(run.work, json.dumps({"dataset": after[1]["sha256"]}))
    assert checkpoint.is_dir()


def test_a_python_backend_tokenizer_keeps_its_own_template_which_a_generation_block_would_break(tmp_path):
    """Bridge's generation-block mask calls ``char_to_token``, which a Python-backend tokenizer lacks."""
    run = FamilyRun("moonlight_remote", tmp_path)
    assert not run.tokenizer.is_fast
    assert bridge_chat_template(run.tokenizer, run.prompts, run.answers) == run.tokenizer.chat_template
    block = "{% for m in messages %}{% generation %}{{ m['content'] }}{% endgeneration %}{% endfor %}"
    with pytest.raises(ValueError, match="char_to_token"):
        run.dataset(block)[0]
