"""Cut a hub MoE checkpoint to its leading dense layers and its first N MoE layers.

The rehearsal runs the paper's DAG on the real bases' architectures, tokenizers and chat
templates at a size one node trains in minutes (issue 31): the checkpoint keeps every layer up to
its N-th MoE layer, its embedding, final norm and head. config.json's layer count and per-layer
keys follow, DeepSeek-V3-style multi-token-prediction layers go (``num_nextn_predict_layers``
0: their tensors sit after the last decoder layer), the safetensors keep only the kept tensors
and the index names them; every other file (tokenizer, chat template, generation config, remote
code and ``auto_map``) is left as the hub ships it.

Which layers are MoE is each family's modeling code's rule (transformers 5.x config classes, and
the DeepSeek remote code for ``moe_layer_freq``). The safetensors are rewritten byte for byte,
without torch: the download environment has none, and the tensors' bytes stay the hub's.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.atomic import atomic_path, write_json
from workflow_scripts.errors import UserInputError
from workflow_scripts.families import FAMILIES

CONFIG = "config.json"
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
#: Files a cut's download fetches before any shard (``snapshot_download`` allow patterns): the
#: config and index, tokenizer files (JSON, BPE merges, tiktoken/sentencepiece models), chat
#: templates, remote code, the licence.
METADATA_PATTERNS = ("*.json", "*.py", "*.txt", "*.model", "*.tiktoken", "*.jinja", "LICENSE*")
#: Keys counting multi-token-prediction layers (``num_mtp_layers`` is transformers 5.x's alias).
MTP_KEYS = ("num_nextn_predict_layers", "num_mtp_layers")
_LAYER = re.compile(r"model\.layers\.(\d+)\.")
_COPY_CHUNK = 64 << 20


@dataclass(frozen=True)
class Cut:
    """The decoder layers and MoE layers a cut keeps, and the source checkpoint's counts."""

    layers: int
    moe_layers: int
    source_layers: int
    source_moe_layers: int


def moe_layers_of(config: Mapping[str, Any]) -> list[int]:
    """Indices of the MoE decoder layers of a checkpoint's config.json, as its family builds them.

    DeepSeek-V2/V3: layers from ``first_k_dense_replace`` on whose index ``moe_layer_freq``
    divides; Qwen3-MoE: layers not in ``mlp_only_layers`` whose index + 1 ``decoder_sparse_step``
    divides. Defaults are transformers' config classes'.
    """
    model_type = config.get("model_type")
    layers = range(config["num_hidden_layers"])
    if model_type in ("deepseek_v2", "deepseek_v3"):
        if not config.get("n_routed_experts"):
            return []
        first = config.get("first_k_dense_replace", FAMILIES[model_type].first_dense_default)
        frequency = config.get("moe_layer_freq", 1)
        return [i for i in layers if i >= first and i % frequency == 0]
    if model_type == "qwen3_moe":
        dense = set(config.get("mlp_only_layers") or ())
        step = config.get("decoder_sparse_step", 1)
        if not config.get("num_experts", 128):
            return []
        return [i for i in layers if i not in dense and (i + 1) % step == 0]
    raise UserInputError(
        f"cannot cut a {model_type!r} checkpoint (known: deepseek_v2, deepseek_v3, qwen3_moe)"
    )


def plan_cut(folder: str | Path, moe_layers: int, name: str | None = None) -> Cut:
    """What cutting ``folder`` to ``moe_layers`` MoE layers keeps; refuses a checkpoint with fewer.

    ``name``: how errors name the checkpoint (a download's repository and commit); the folder by default.
    """
    config = read_json(Path(folder) / CONFIG)
    found = moe_layers_of(config)
    if moe_layers < 1 or len(found) < moe_layers:
        raise UserInputError(
            f"{name or folder}: cannot keep {moe_layers} MoE layers of a checkpoint that has {len(found)} "
            f"({config['num_hidden_layers']} decoder layers, model_type {config.get('model_type')!r})"
        )
    return Cut(found[moe_layers - 1] + 1, moe_layers, config["num_hidden_layers"], len(found))


def cut_config(config: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """config.json for the first ``layers`` decoder layers, its other keys untouched.

    Per layer: ``layer_types`` (a list per layer, checked against ``num_hidden_layers`` by
    transformers), ``mlp_only_layers`` (indices), ``max_window_layers`` (a count); the MTP
    layer counts become 0.
    """
    cut = dict(config, num_hidden_layers=layers)
    if "layer_types" in cut:
        cut["layer_types"] = list(cut["layer_types"][:layers])
    if "mlp_only_layers" in cut:
        cut["mlp_only_layers"] = [i for i in cut["mlp_only_layers"] if i < layers]
    if "max_window_layers" in cut:
        cut["max_window_layers"] = min(cut["max_window_layers"], layers)
    for key in MTP_KEYS:
        if key in cut:
            cut[key] = 0
    return cut


def kept_tensor(name: str, layers: int) -> bool:
    """Whether a tensor belongs to the cut: not of a decoder (or MTP) layer from ``layers`` on."""
    match = _LAYER.match(name)
    return match is None or int(match[1]) < layers


def weight_map(folder: str | Path) -> dict[str, str]:
    """``{tensor: safetensors file}`` of a checkpoint folder: its index, or its one file's header."""
    folder = Path(folder)
    if (folder / INDEX).is_file():
        return dict(read_json(folder / INDEX)["weight_map"])
    if (folder / SINGLE).is_file():
        return dict.fromkeys(_read_header(folder / SINGLE)[0], SINGLE)
    raise UserInputError(f"{folder}: no {INDEX} or {SINGLE}; a cut needs safetensors weights")


def needed_shards(folder: str | Path, layers: int) -> list[str]:
    """The safetensors files holding a tensor of the first ``layers`` layers (or of no layer).

    Read from the index, so before any shard is downloaded; a checkpoint without one is one file.
    """
    if not (Path(folder) / INDEX).is_file():
        return [SINGLE]
    return sorted({file for name, file in weight_map(folder).items() if kept_tensor(name, layers)})


def cut_checkpoint(folder: str | Path, moe_layers: int, name: str | None = None) -> Cut:
    """Cut the checkpoint in ``folder`` in place to its first ``moe_layers`` MoE layers.

    Only the shards of ``needed_shards`` must be present (a cut download fetches no other); each
    is rewritten with its kept tensors, the others are deleted, and the index (when there is one)
    names the kept tensors and their total size.
    """
    folder = Path(folder)
    cut = plan_cut(folder, moe_layers, name)
    files = weight_map(folder)
    keep = {tensor: file for tensor, file in files.items() if kept_tensor(tensor, cut.layers)}
    missing = sorted({file for file in keep.values() if not (folder / file).is_file()})
    if missing:
        raise UserInputError(f"{name or folder}: the cut needs {', '.join(missing)}, which the folder lacks")
    shards = sorted(set(keep.values()))
    total = sum(_rewrite(folder / file, lambda tensor: kept_tensor(tensor, cut.layers)) for file in shards)
    for file in sorted(set(files.values()) - set(shards)):
        (folder / file).unlink(missing_ok=True)
    if (folder / INDEX).is_file():
        index = read_json(folder / INDEX)
        metadata = dict(index.get("metadata") or {}, total_size=total)
        write_json(folder / INDEX, {**index, "metadata": metadata, "weight_map": keep})
    write_json(folder / CONFIG, cut_config(read_json(folder / CONFIG), cut.layers))
    return cut


def read_json(path: Path) -> Any:
    """A checkpoint's JSON file; a missing or malformed one is an error naming it."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserInputError(f"{path}: unreadable ({error})") from error


def _read_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header and the offset its tensor bytes start at."""
    with path.open("rb") as stream:
        (size,) = struct.unpack("<Q", stream.read(8))
        return json.loads(stream.read(size)), 8 + size


def _rewrite(path: Path, keep: Callable[[str], bool]) -> int:
    """Rewrite a safetensors file with the tensors ``keep`` accepts, bytes unchanged; their size."""
    header, start = _read_header(path)
    metadata = header.pop("__metadata__", None)
    names = sorted((name for name in header if keep(name)), key=lambda name: header[name]["data_offsets"])
    kept: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name in names:
        begin, end = header[name]["data_offsets"]
        kept[name] = {**header[name], "data_offsets": [offset, offset + end - begin]}
        offset += end - begin
    encoded = json.dumps(kept, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # tensor bytes 8-aligned, as safetensors writes them
    with atomic_path(path) as tmp, path.open("rb") as source, tmp.open("wb") as target:
        target.write(struct.pack("<Q", len(encoded)) + encoded)
        for name in names:
            begin, end = header[name]["data_offsets"]
            source.seek(start + begin)
            _copy(source, target, end - begin)
    return offset


def _copy(source: Any, target: Any, size: int) -> None:
    """Copy ``size`` bytes from ``source``'s position to ``target`` in bounded chunks."""
    while size:
        chunk = source.read(min(size, _COPY_CHUNK))
        if not chunk:
            raise UserInputError(f"{source.name}: truncated safetensors file")
        target.write(chunk)
        size -= len(chunk)
