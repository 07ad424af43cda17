"""Tiny randomly initialised MoE checkpoints of the paper's three router families.

The paper post-trains Moonlight-16B-A3B (``deepseek_v3``: sigmoid scoring, bias-corrected
aux-loss-free top-k), DeepSeek-V2-Lite (``deepseek_v2``: softmax, greedy top-k) and
Qwen3-30B-A3B-Base (``qwen3_moe``: softmax, renormalised top-k). The toy backend keeps each
family's transformers implementation (config class, router class, state-dict layout) and
shrinks the sizes to a ``ToyModelSpec``; saved configs carry the legacy keys vLLM reads
(``legacy_vllm_keys``). torch and transformers are imported inside functions, so importing
this module is cheap.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workflow_scripts import families
from workflow_scripts.errors import UserInputError

if TYPE_CHECKING:
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class ToyModelSpec:
    """Sizes of a toy MoE model; the defaults are the test-scale model.

    The first ``spec.first_dense_layers`` layers use a dense MLP in every family
    (``first_k_dense_replace`` for DeepSeek, ``mlp_only_layers`` for Qwen3-MoE, whose
    ``decoder_sparse_step`` stays 1). Qwen3-MoE has no shared experts, so
    ``spec.shared_experts`` applies to the two DeepSeek families only.

    Attributes:
        hidden_size: model width.
        num_layers: decoder layers.
        num_experts: routed experts per MoE layer.
        top_k: experts selected per token.
        shared_experts: always-on shared experts (DeepSeek families; ignored by Qwen3-MoE).
        intermediate_size: hidden size of the dense MLP layers.
        moe_intermediate_size: hidden size of one routed (and one shared) expert.
        num_heads: attention heads.
        num_kv_heads: key/value heads (Qwen3-MoE GQA); ``None`` means ``num_heads``.
        max_position_embeddings: maximum sequence length.
        first_dense_layers: leading layers with a dense MLP instead of experts.
        kv_lora_rank: MLA latent rank of the DeepSeek families.
        qk_rope_head_dim: rotary part of the MLA query/key head (DeepSeek families).
        routed_scaling_factor: DeepSeek routed-weight scale; ``None`` uses the family
            default (2.5 for V3, 1.0 for V2).
        rope_theta: rotary base.
    """

    hidden_size: int = 64
    num_layers: int = 4
    num_experts: int = 16
    top_k: int = 4
    shared_experts: int = 1
    intermediate_size: int = 128
    moe_intermediate_size: int = 32
    num_heads: int = 4
    num_kv_heads: int | None = None
    max_position_embeddings: int = 2048
    first_dense_layers: int = 1
    kv_lora_rank: int = 32
    qk_rope_head_dim: int = 8
    routed_scaling_factor: float | None = None
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        positive = (
            "hidden_size",
            "num_layers",
            "num_experts",
            "top_k",
            "intermediate_size",
            "moe_intermediate_size",
            "num_heads",
            "max_position_embeddings",
            "kv_lora_rank",
            "qk_rope_head_dim",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k {self.top_k} exceeds num_experts {self.num_experts}")
        if not 0 <= self.first_dense_layers < self.num_layers:
            raise ValueError(
                f"first_dense_layers must be in [0, {self.num_layers}), got {self.first_dense_layers}"
            )
        if self.shared_experts < 0:
            raise ValueError(f"shared_experts must be >= 0, got {self.shared_experts}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_heads {self.num_heads}"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.kv_heads}")
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim must be even, got {self.qk_rope_head_dim}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ToyModelSpec:
        """Build a spec from a mapping (e.g. a config block); unknown keys are an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown ToyModelSpec keys: {unknown}; known: {sorted(known)}")
        return cls(**dict(values))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def legacy_vllm_keys(architecture: str, spec: ToyModelSpec) -> dict[str, Any]:
    """Config keys older readers (vLLM) expect in config.json that transformers 5.x omits.

    DeepSeek families: ``scoring_func``, ``topk_method`` (``noaux_tc`` for V3, ``greedy``
    for V2), ``moe_layer_freq`` and ``rope_theta``; Qwen3-MoE: ``num_experts`` (5.x
    stores it as ``num_local_experts``) and ``rope_theta``. 5.x itself reads
    ``rope_parameters``.
    """
    family = _family(architecture)
    keys: dict[str, Any] = {"rope_theta": float(spec.rope_theta)}
    if family.topk_method is None:
        keys["num_experts"] = spec.num_experts
    else:
        keys["scoring_func"] = family.score_function
        keys["topk_method"] = family.topk_method
        keys["moe_layer_freq"] = 1
    return keys


def toy_config(
    architecture: str,
    spec: ToyModelSpec,
    vocab_size: int,
    *,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
) -> PretrainedConfig:
    """The transformers config of a toy ``architecture`` model of size ``spec``.

    * ``deepseek_v3``: sigmoid scoring with ``e_score_correction_bias``, one expert group
      (``n_group`` = ``topk_group`` = 1), ``norm_topk_prob``, ``routed_scaling_factor``,
      ``n_shared_experts`` = ``spec.shared_experts``, no multi-token-prediction layers.
    * ``deepseek_v2``: softmax scoring, greedy top-k, no renormalisation.
    * ``qwen3_moe``: softmax scoring, ``decoder_sparse_step`` 1, ``norm_topk_prob``.

    The keys of ``legacy_vllm_keys`` are set as extra attributes, so ``save_pretrained``
    writes them to config.json (``save_toy_base`` also writes the ones transformers
    remaps, i.e. Qwen3-MoE's ``num_experts``).
    """
    family = _family(architecture)
    from transformers import DeepseekV2Config, DeepseekV3Config, Qwen3MoeConfig

    common: dict[str, Any] = {
        "vocab_size": int(vocab_size),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "moe_intermediate_size": spec.moe_intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_experts_per_tok": spec.top_k,
        "max_position_embeddings": spec.max_position_embeddings,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(spec.rope_theta)},
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "pad_token_id": pad_token_id,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,
    }
    if architecture == "qwen3_moe":
        config = Qwen3MoeConfig(
            **common,
            num_key_value_heads=spec.kv_heads,
            head_dim=spec.head_dim,
            num_experts=spec.num_experts,
            decoder_sparse_step=1,
            mlp_only_layers=list(range(spec.first_dense_layers)),
            norm_topk_prob=True,
        )
    else:
        mla: dict[str, Any] = {
            "num_key_value_heads": spec.num_heads,
            "n_routed_experts": spec.num_experts,
            "n_shared_experts": spec.shared_experts,
            "first_k_dense_replace": spec.first_dense_layers,
            "n_group": 1,
            "topk_group": 1,
            "kv_lora_rank": spec.kv_lora_rank,
            "q_lora_rank": None,
            "qk_nope_head_dim": spec.head_dim,
            "qk_rope_head_dim": spec.qk_rope_head_dim,
            "v_head_dim": spec.head_dim,
            "routed_scaling_factor": float(
                family.routed_scaling if spec.routed_scaling_factor is None else spec.routed_scaling_factor
            ),
        }
        if architecture == "deepseek_v3":
            config = DeepseekV3Config(**common, **mla, norm_topk_prob=True, num_nextn_predict_layers=0)
        else:
            config = DeepseekV2Config(**common, **mla, topk_method="greedy", norm_topk_prob=False)
    for key, value in legacy_vllm_keys(architecture, spec).items():
        setattr(config, key, value)
    config.architectures = [family.causal_lm]
    return config


def build_toy_model(
    architecture: str,
    spec: ToyModelSpec,
    tokenizer: PreTrainedTokenizerBase,
    seed: int,
    vocab_size: int | None = None,
) -> PreTrainedModel:
    """Randomly initialise a toy ``*ForCausalLM`` (float32) under ``torch.manual_seed(seed)``.

    The vocabulary is ``vocab_size``, by default ``len(tokenizer)`` (Moonlight's is two
    short of its tokenizer's, ``modeling.moonlight.model_vocab_size``), and bos/eos/pad come
    from the tokenizer. Weights are a function of (architecture, spec, vocabulary size, seed)
    only.
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = toy_config(
        architecture,
        spec,
        len(tokenizer) if vocab_size is None else vocab_size,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(model.generation_config, name, getattr(tokenizer, name))
    return model


def router_modules(model: nn.Module) -> dict[int, nn.Module]:
    """``{layer index: gate}`` for every MoE layer of a toy (or full-size) model."""
    layers = model.model.layers if hasattr(model, "model") else model.layers
    return {
        i: layer.mlp.gate
        for i, layer in enumerate(layers)
        if hasattr(layer.mlp, "gate") and hasattr(layer.mlp, "experts")
    }


def moe_layer_indices(model: nn.Module) -> list[int]:
    """Indices of the decoder layers whose MLP is a routed MoE block, ascending."""
    return sorted(router_modules(model))


def save_toy_base(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | os.PathLike[str],
    max_shard_size: int | str | None = None,
) -> Path:
    """Write ``model`` and ``tokenizer`` into ``out_dir``, atomically.

    The model is written with ``save_pretrained`` (in shards of ``max_shard_size``, as the hub's
    checkpoints are, when given; else transformers' default); config.json gets the legacy keys of
    ``legacy_vllm_keys`` (when the config carries them). A tokenizer loaded from a folder is
    written as that folder's files (``tokenizer_files``): a checkpoint ships its base's tokenizer
    as the hub ships it, where transformers' re-save would not (DeepSeek-V2-Lite's
    ``LlamaTokenizerFast`` would become ``TokenizersBackend``, Qwen3's ``vocab.json`` and
    ``merges.txt`` would go); any other tokenizer with ``save_pretrained``. Both are written
    into a temporary sibling directory, which is renamed onto ``out_dir``. An existing
    ``out_dir`` is first moved aside and deleted after the rename, so readers see the old or
    the new checkpoint, never a partial one.
    """
    target = Path(out_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    old: Path | None = None
    try:
        model.save_pretrained(tmp, **({} if max_shard_size is None else {"max_shard_size": max_shard_size}))
        source = Path(getattr(tokenizer, "name_or_path", "") or "")
        files = tokenizer_files(source) if (source / "tokenizer_config.json").is_file() else []
        if files:
            for file in files:
                shutil.copyfile(file, tmp / file.name)
        else:
            tokenizer.save_pretrained(tmp)
        _write_legacy_keys(tmp / "config.json", model.config)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / target.name)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target


#: Files a checkpoint's model owns: ``save_pretrained`` writes them, a tokenizer never does.
MODEL_FILES = ("config.json", "generation_config.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json")


def tokenizer_files(folder: str | os.PathLike[str]) -> list[Path]:
    """The tokenizer's files of a tokenizer or checkpoint folder: every top-level file but the model's.

    No fixed list names them (Moonlight's remote code and rank file, Qwen3's ``vocab.json`` and
    ``merges.txt``, a ``chat_template.jinja``); hidden files are left out.
    """
    return sorted(
        path
        for path in Path(folder).iterdir()
        if path.is_file()
        and not path.name.startswith(".")
        and path.name not in MODEL_FILES
        and not path.name.endswith(WEIGHT_SUFFIXES)
    )


def load_local(
    path: str | os.PathLike[str], **model_kwargs: Any
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a checkpoint directory written by ``save_toy_base`` (or any local one), offline.

    Returns ``(model, tokenizer)``, both read with ``from_pretrained(path,
    local_files_only=True)``, the tokenizer with ``trust_remote_code`` (Moonlight's is the
    remote code its folder ships); ``model_kwargs`` go to the model's ``from_pretrained``
    (default ``dtype="auto"``: the saved float32). A damaged ``.safetensors`` file is an
    error naming it (``check_weight_files``).
    """
    from transformers import AutoModelForCausalLM

    from workflow_scripts.modeling.tokenizer import load_tokenizer

    check_weight_files(path)
    model_kwargs.setdefault("dtype", "auto")
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **model_kwargs)
    tokenizer = load_tokenizer(path)
    return model, tokenizer


def check_weight_files(path: str | os.PathLike[str]) -> None:
    """Open each ``.safetensors`` header of a checkpoint, so a damaged one is an error naming it.

    ``from_pretrained`` reports a truncated shard or a corrupt header without the file's
    name; ``safe_open`` checks the header and that the tensors fill the file, without
    reading them. Changed tensor bytes are what the provenance checksums catch.
    """
    from safetensors import SafetensorError, safe_open

    for file in sorted(Path(path).glob("*.safetensors")):
        try:
            with safe_open(file, framework="np"):
                pass
        except (SafetensorError, OSError) as error:
            raise UserInputError(f"{file}: unreadable checkpoint weights ({error})") from error


def _write_legacy_keys(config_json: Path, config: PretrainedConfig) -> None:
    keys = _legacy_keys_of(config)
    if not keys:
        return
    payload = json.loads(config_json.read_text())
    for key, value in keys.items():
        payload.setdefault(key, value)
    config_json.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def _legacy_keys_of(config: PretrainedConfig) -> dict[str, Any]:
    """Legacy keys for a saved config, read from the config (which may come from a checkpoint)."""
    family = families.FAMILIES.get(getattr(config, "model_type", None))
    if family is None:
        return {}
    rope = getattr(config, "rope_parameters", None) or {}
    theta = getattr(config, "rope_theta", None) or rope.get("rope_theta")
    keys: dict[str, Any] = {} if theta is None else {"rope_theta": float(theta)}
    if family.topk_method is None:
        keys["num_experts"] = int(config.num_experts)
    else:
        keys["scoring_func"] = getattr(config, "scoring_func", family.score_function)
        keys["topk_method"] = getattr(config, "topk_method", family.topk_method)
        keys["moe_layer_freq"] = getattr(config, "moe_layer_freq", 1)
    return keys


def _family(architecture: str) -> families.Family:
    if architecture not in families.FAMILIES:
        raise ValueError(f"unknown architecture {architecture!r}; expected one of {families.ARCHITECTURES}")
    return families.FAMILIES[architecture]
