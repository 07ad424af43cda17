"""Rehearsal bases cut from hub checkpoints to their first MoE layers (issue 31, item 2).

The end-to-end tests build each family's real architecture with the project's toy builder and its
tokenizer as the hub ships it, saved in several shards, serve it from the hub stand-in
(tests/hub_server.py, through ``HF_ENDPOINT``) and run ``models download --moe-layers 2`` in a
subprocess with the real ``huggingface_hub`` client. The cut model's logits are checked against
the uncut model's hidden state after the last kept layer, put through the final norm and the head
in plain torch. The fast tests cut hand-written configs (the hub's keys per family) and
safetensors files written here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tests.dag import JOB_ENV, ROOT, TINY_SPEC, printed_job, toy_rows
from tests.hub_server import HubServer, Repo, commit_of
from workflow_scripts.errors import UserInputError
from workflow_scripts.models import cut
from workflow_scripts.records import path_digest

#: Leading dense layers per family, as the paper's bases have them (Qwen3-30B-A3B-Base: none).
DENSE = {"deepseek_v3": 1, "deepseek_v2": 1, "qwen3_moe": 0}
REPOS = {
    "deepseek_v3": "moonshotai/Moonlight-16B-A3B",
    "deepseek_v2": "deepseek-ai/DeepSeek-V2-Lite",
    "qwen3_moe": "Qwen/Qwen3-30B-A3B-Base",
}
_LAYER = re.compile(r"model\.layers\.(\d+)\.")


# ---------------------------------------------------------------- configs, as the hub ships them


def hub_config(architecture: str) -> dict:
    """The layer keys of each base's config.json on the hub (Moonlight, DeepSeek-V2-Lite, Qwen3-30B)."""
    if architecture == "qwen3_moe":
        return {
            "model_type": "qwen3_moe",
            "num_hidden_layers": 48,
            "num_experts": 128,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "max_window_layers": 48,
            "layer_types": ["full_attention"] * 48,
            "use_sliding_window": False,
        }
    return {
        "model_type": architecture,
        "num_hidden_layers": 27,
        "n_routed_experts": 64,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "num_nextn_predict_layers": 1 if architecture == "deepseek_v3" else None,
        "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekConfig"},
    }


@pytest.mark.parametrize(("architecture", "layers", "moe"), [("deepseek_v3", 3, 26), ("deepseek_v2", 3, 26),
                                                            ("qwen3_moe", 2, 48)])  # fmt: skip
def test_the_config_keeps_the_dense_layers_and_two_moe_layers(architecture, layers, moe, tmp_path):
    config = {key: value for key, value in hub_config(architecture).items() if value is not None}
    (tmp_path / cut.CONFIG).write_text(json.dumps(config))
    plan = cut.plan_cut(tmp_path, 2)
    assert plan == cut.Cut(layers=layers, moe_layers=2, source_layers=config["num_hidden_layers"],
                           source_moe_layers=moe)  # fmt: skip
    done = cut.cut_config(config, plan.layers)
    assert done["num_hidden_layers"] == layers
    assert cut.moe_layers_of(done) == list(range(DENSE[architecture], layers))
    if architecture == "qwen3_moe":
        assert (done["layer_types"], done["max_window_layers"], done["mlp_only_layers"]) == (
            ["full_attention"] * 2, 2, [])  # fmt: skip
    else:
        assert done["auto_map"] == config["auto_map"] and done["moe_layer_freq"] == 1
    if architecture == "deepseek_v3":
        assert done["num_nextn_predict_layers"] == 0


@pytest.mark.parametrize(
    ("edit", "moe", "layers"),
    [
        ({"model_type": "deepseek_v2", "moe_layer_freq": 2}, [2, 4, 6], 5),  # the remote code's rule
        ({"model_type": "qwen3_moe", "decoder_sparse_step": 2}, [1, 3, 5, 7], 4),
        ({"model_type": "qwen3_moe", "mlp_only_layers": [0, 2, 5]}, [1, 3, 4, 6, 7], 4),
    ],
)
def test_interleaved_dense_layers_are_kept_up_to_the_second_moe_layer(edit, moe, layers):
    config = {"num_hidden_layers": 8, "first_k_dense_replace": 1, "n_routed_experts": 4, **edit}
    assert cut.moe_layers_of(config) == moe
    done = cut.cut_config(config, layers)
    assert cut.moe_layers_of(done) == moe[:2]
    assert done.get("mlp_only_layers", [0, 2]) == [0, 2]


def test_too_few_moe_layers_are_refused_naming_the_checkpoint(tmp_path):
    config = {**hub_config("deepseek_v2"), "num_hidden_layers": 3}
    (tmp_path / cut.CONFIG).write_text(json.dumps(config))
    message = rf"{tmp_path}: cannot keep 3 MoE layers of a checkpoint that has 2 \(3 decoder layers, "
    with pytest.raises(UserInputError, match=message + "model_type 'deepseek_v2'"):
        cut.cut_checkpoint(tmp_path, 3)
    assert json.loads((tmp_path / cut.CONFIG).read_text()) == config


def test_an_architecture_without_a_moe_rule_is_refused(tmp_path):
    (tmp_path / cut.CONFIG).write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 4}))
    with pytest.raises(UserInputError, match="cannot cut a 'llama' checkpoint"):
        cut.plan_cut(tmp_path, 1)


# ---------------------------------------------------------------- safetensors, byte for byte


def write_checkpoint(folder: Path, sharded: bool) -> dict[str, np.ndarray]:
    """A DeepSeek-V3-style checkpoint: 4 layers (the first dense), an MTP layer after them (index 4)."""
    rng = np.random.default_rng(0)
    config = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "first_k_dense_replace": 1,
              "n_routed_experts": 4, "num_nextn_predict_layers": 1}  # fmt: skip
    (folder / cut.CONFIG).write_text(json.dumps(config))
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    names += [f"model.layers.{i}.{part}" for i in range(5) for part in ("mlp.w", "self_attn.w", "norm.w")]
    dtypes = (np.float32, np.float16, np.int64)
    tensors = {name: rng.normal(size=(i % 3 + 1, 5)).astype(dtypes[i % 3]) for i, name in enumerate(names)}
    if not sharded:
        save_file(tensors, folder / cut.SINGLE, metadata={"format": "pt"})
        return tensors
    # Shard 1: embedding and layers 0-1; 2: layer 2 and the norm and head; 3: layer 3; 4: the MTP layer.
    shards = {"model-1.safetensors": ["model.embed_tokens.weight"], "model-2.safetensors": names[1:3]}
    for i, file in ((0, "model-1"), (1, "model-1"), (2, "model-2"), (3, "model-3"), (4, "model-4")):
        shards.setdefault(f"{file}.safetensors", []).extend(
            n for n in names if n.startswith(f"model.layers.{i}.")
        )
    weight_map = {}
    for file, members in shards.items():
        save_file({name: tensors[name] for name in members}, folder / file, metadata={"format": "pt"})
        weight_map |= dict.fromkeys(members, file)
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (folder / cut.INDEX).write_text(json.dumps(index))
    return tensors


@pytest.mark.parametrize("sharded", [True, False])
def test_the_weights_keep_the_first_layers_tensors_unchanged(tmp_path, sharded):
    tensors = write_checkpoint(tmp_path, sharded)
    if sharded:
        assert cut.needed_shards(tmp_path, 3) == ["model-1.safetensors", "model-2.safetensors"]
        (tmp_path / "model-3.safetensors").unlink()  # a cut download never fetches it
    assert cut.cut_checkpoint(tmp_path, 2) == cut.Cut(
        layers=3, moe_layers=2, source_layers=4, source_moe_layers=3
    )
    expected = {name: t for name, t in tensors.items() if not (m := _LAYER.match(name)) or int(m[1]) < 3}
    files = sorted(path.name for path in tmp_path.glob("*.safetensors"))
    found = {name: t for file in files for name, t in load_file(tmp_path / file).items()}
    assert found.keys() == expected.keys()
    for name, tensor in expected.items():
        assert found[name].dtype == tensor.dtype and np.array_equal(found[name], tensor), name
    config = json.loads((tmp_path / cut.CONFIG).read_text())
    assert (config["num_hidden_layers"], config["num_nextn_predict_layers"]) == (3, 0)
    if sharded:
        assert files == ["model-1.safetensors", "model-2.safetensors"]
        index = json.loads((tmp_path / cut.INDEX).read_text())
        assert index["weight_map"] == {name: weight_map_file(name) for name in expected}
        assert index["metadata"]["total_size"] == sum(t.nbytes for t in expected.values())
    else:
        assert files == [cut.SINGLE] and not (tmp_path / cut.INDEX).exists()


def weight_map_file(name: str) -> str:
    match = _LAYER.match(name)
    first = name == "model.embed_tokens.weight" or (match is not None and int(match[1]) < 2)
    return "model-1.safetensors" if first else "model-2.safetensors"


def test_a_missing_shard_the_cut_needs_is_named(tmp_path):
    write_checkpoint(tmp_path, sharded=True)
    (tmp_path / "model-2.safetensors").unlink()
    with pytest.raises(UserInputError, match=rf"{tmp_path}: the cut needs model-2.safetensors"):
        cut.cut_checkpoint(tmp_path, 2)


# ---------------------------------------------------------------- the real download, per family


@pytest.fixture(scope="module", params=sorted(DENSE))
def served(request, tmp_path_factory):
    """A family's toy base (its dense layers, 3 MoE layers) in shards: (architecture, folder, model)."""
    from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model, save_toy_base
    from workflow_scripts.models.cli import toy_tokenizer

    architecture = request.param
    folder = tmp_path_factory.mktemp(architecture)
    prompts, answers = toy_rows()
    tokenizer, vocab = toy_tokenizer(architecture, prompts + answers, 300, folder / "tokenizer")
    dense = DENSE[architecture]
    spec = ToyModelSpec(**{**TINY_SPEC, "num_layers": dense + 3, "first_dense_layers": dense})
    model = build_toy_model(architecture, spec, tokenizer, seed=0, vocab_size=vocab).eval()
    save_toy_base(model, tokenizer, folder / "repo", max_shard_size="40KB")
    return architecture, folder / "repo", model


def run_download(hub: HubServer, repo: str, out: Path, moe_layers: int) -> subprocess.CompletedProcess:
    """``models download --moe-layers`` into ``out`` (base/, manifest.json) from the stand-in hub."""
    command = [sys.executable, "-m", "workflow_scripts", "models", "download", "--repo", repo,
               "--revision", commit_of(repo), "--out", str(out / "base"),
               "--manifest", str(out / "manifest.json"), "--moe-layers", str(moe_layers)]  # fmt: skip
    env = {**JOB_ENV, "HF_ENDPOINT": hub.url, "HF_HOME": str(out / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def shard_layers(folder: Path) -> dict[str, set[int | None]]:
    """Each shard's layers per the index (None: a tensor of no layer)."""
    layers: dict[str, set[int | None]] = {}
    for name, file in json.loads((folder / cut.INDEX).read_text())["weight_map"].items():
        match = _LAYER.match(name)
        layers.setdefault(file, set()).add(int(match[1]) if match else None)
    return layers


@pytest.mark.slow
def test_the_download_fetches_and_keeps_the_dense_layers_and_two_moe_layers(served, tmp_path):
    import torch

    from workflow_scripts.modeling.tokenizer import load_tokenizer
    from workflow_scripts.modeling.toy import load_local, moe_layer_indices

    architecture, source, uncut = served
    repo, kept = REPOS[architecture], DENSE[architecture] + 2
    with HubServer([Repo("model", repo, refs={"main": commit_of(repo)}, files=source)]) as hub:
        done = run_download(hub, repo, tmp_path, 2)
    assert done.returncode == 0, done.stderr[-3000:]
    base = tmp_path / "base"

    # Only the shards of the kept layers were asked for; those of the dropped layer never were.
    layers = shard_layers(source)
    dropped = {file for file, found in layers.items() if all(i is not None and i >= kept for i in found)}
    needed = set(layers) - dropped
    assert dropped and len(needed) > 1, layers  # the test's premise: several shards, one only dropped
    shards = {file for _, file in hub.fetched if file.endswith(".safetensors")}
    assert shards == needed
    assert {path.name for path in base.glob("*.safetensors")} == needed

    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["cut"] == {
        "layers": kept,
        "moe_layers": 2,
        "source_layers": kept + 1,
        "source_moe_layers": 3,
    }
    assert manifest["checkpoint"] == path_digest(base)
    assert json.loads((base / cut.CONFIG).read_text())["num_hidden_layers"] == kept
    # Tokenizer, chat template, generation config and remote code as the hub ships them.
    for file in source.iterdir():
        if file.name not in (cut.CONFIG, cut.INDEX) and file.suffix != ".safetensors":
            assert (base / file.name).read_bytes() == file.read_bytes(), file.name

    model, tokenizer = load_local(base)
    assert len(model.model.layers) == kept
    assert moe_layer_indices(model) == list(range(DENSE[architecture], kept))
    source_tokenizer = load_tokenizer(source)
    messages = [{"role": "user", "content": "add the sum of two numbers"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False) == source_tokenizer.apply_chat_template(
        messages, tokenize=False
    )
    ids = torch.tensor([tokenizer.encode("print a list sort loop value function return answer is 42")])
    with torch.no_grad():
        hidden = uncut(ids, output_hidden_states=True).hidden_states[kept]  # after layer kept - 1
        logits = model(ids).logits
    norm, head = uncut.model.norm.weight, uncut.lm_head.weight
    normed = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + uncut.config.rms_norm_eps) * norm
    torch.testing.assert_close(logits, normed @ head.T, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_a_download_asking_for_more_moe_layers_than_the_checkpoint_has_is_refused(served, tmp_path):
    architecture, source, _ = served
    repo = REPOS[architecture]
    with HubServer([Repo("model", repo, refs={"main": commit_of(repo)}, files=source)]) as hub:
        done = run_download(hub, repo, tmp_path, 4)
    assert done.returncode != 0
    assert f"{repo} at {commit_of(repo)}: cannot keep 4 MoE layers of a checkpoint that has 3" in done.stderr
    assert not any(file.endswith(".safetensors") for _, file in hub.fetched)
    assert not (tmp_path / "base").exists() and not (tmp_path / "manifest.json").exists()


# ---------------------------------------------------------------- the rule


@pytest.mark.slow
def test_the_paper_download_passes_no_cut_and_a_registry_cut_passes_its_moe_layers(tmp_path):
    target = "results/models/moonlight/manifest.json"
    _, paper = printed_job(target, "download_model")
    assert "--moe-layers" not in paper
    assert paper.endswith(
        " --manifest results/models/moonlight/manifest.json > logs/models/download/moonlight.log 2>&1"
    )
    overlay = tmp_path / "cut.yaml"
    overlay.write_text("models:\n  moonlight:\n    moe_layers: 2\n    hub: {keep_moe_layers: 2}\n")
    _, rehearsal = printed_job(target, "download_model", "--configfiles", "config.yaml", str(overlay))
    assert rehearsal == paper.replace(" > logs/", " --moe-layers 2 > logs/")
