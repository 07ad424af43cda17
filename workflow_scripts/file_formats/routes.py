"""A routes file: the stock routing of a checkpoint's probed tokens, as the probe writes it.

The probe stage records one per checkpoint (``probe routes``); the probe's statistics and the
report's figures read it back. A compressed ``.npz`` of the arrays below, with a meta JSON beside it.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.atomic import atomic_path, write_json
from workflow_scripts.errors import UserInputError

_ARRAYS = ("topk", "probs", "row_ids", "positions", "spans", "moe_layers")


@dataclass(frozen=True)
class ProbeTokens:
    """The probed tokens of a pool, in pool order and, within a row, in position order.

    ``inputs`` holds the token ids fed to the model for each probed row (its first
    ``max_length`` tokens), one array per distinct ``row_ids`` value in order of appearance.
    A ``ProbeTokens`` read back by ``load_routes`` has no ``inputs`` (routes files do not
    store token ids) and cannot be recorded again.
    """

    row_ids: np.ndarray  # (N,) int64, the pool's row_id of each probed token
    positions: np.ndarray  # (N,) int32, position of the token in its row's chat rendering
    spans: np.ndarray  # (N,) int8, 0 = Q, 1 = A
    inputs: tuple[np.ndarray, ...] = ()  # per probed row: (T_r,) int64 token ids

    def __len__(self) -> int:
        return int(self.row_ids.shape[0])

    def counts(self) -> dict[str, int]:
        """Probed tokens per span (``Q``, ``A``) and in total."""
        q = int((self.spans == 0).sum())
        return {"Q": q, "A": len(self) - q, "total": len(self)}


@dataclass(frozen=True)
class Routes:
    """Stock routing of the probed tokens at every MoE layer (``find_gates`` order)."""

    topk: np.ndarray  # (L, N, k) int16, selected experts, ascending per token
    probs: np.ndarray  # (L, N, E) float16, softmax of the unbiased router logits (fp32 softmax)
    moe_layers: np.ndarray  # (L,) int64, decoder-layer index of each L entry

    @property
    def num_experts(self) -> int:
        return int(self.probs.shape[-1])

    @property
    def top_k(self) -> int:
        return int(self.topk.shape[-1])


def save_routes(
    path: str | os.PathLike[str],
    routes: Routes,
    tokens: ProbeTokens,
    meta: Mapping[str, Any],
    meta_path: str | os.PathLike[str],
) -> None:
    """Write the routes ``.npz`` (compressed) and its meta JSON, each atomically."""
    if routes.topk.shape[1] != len(tokens) or routes.probs.shape[1] != len(tokens):
        raise ValueError(f"routes hold {routes.topk.shape[1]} tokens, the probe tokens {len(tokens)}")
    with atomic_path(path) as tmp, Path(tmp).open("wb") as handle:
        np.savez_compressed(
            handle,
            topk=routes.topk,
            probs=routes.probs,
            row_ids=tokens.row_ids,
            positions=tokens.positions,
            spans=tokens.spans,
            moe_layers=routes.moe_layers,
        )
    write_json(meta_path, dict(meta))


def load_routes(path: str | os.PathLike[str]) -> tuple[Routes, ProbeTokens]:
    """Read a routes ``.npz`` back; the returned ``ProbeTokens`` has no ``inputs``.

    A file that is no readable ``.npz`` (truncated, not a zip, a member with a bad CRC or
    deflate stream: the arrays are read inside the ``try``) is an error naming it.
    """
    try:
        with np.load(path) as data:
            missing = [name for name in _ARRAYS if name not in data.files]
            if missing:
                raise UserInputError(f"{path}: not a routes file, missing arrays {missing}")
            arrays = {name: data[name] for name in _ARRAYS}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error) as error:
        raise UserInputError(f"{path}: not a readable routes .npz ({error})") from error
    routes = Routes(arrays["topk"], arrays["probs"], arrays["moe_layers"])
    tokens = ProbeTokens(arrays["row_ids"], arrays["positions"], arrays["spans"])
    return routes, tokens
