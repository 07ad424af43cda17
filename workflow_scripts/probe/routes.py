"""Bias-free routes of a checkpoint on a probe pool: the input of every §2 probe statistic.

The co-activation graphs (eq. (1)), top-k overlap, sharpness and the Table 11 span statistics
are all computed from the same two per-token quantities, recorded here once per checkpoint:

* ``topk`` ``(L, N, k)`` int16: the experts the gate actually selected for each probed token
  at each MoE layer, stored as a set (ascending expert id, whatever order the gate returned);
* ``probs`` ``(L, N, E)`` float16: ``softmax(z)`` of the unbiased router logits ``z``,
  computed in float32 and then stored in half precision. This is the same definition as the
  prior's ``p_base`` (``workflow_scripts.priors.compute``) for every architecture, also for
  the sigmoid-scored DeepSeek-V3 router, whose own gate weights are sigmoids.

Token selection (``probe_tokens``), the same for every checkpoint of one model because it
depends on the tokenizer, the pool and the two integers only: each pool row, in pool order, is
chat-rendered and span-labelled with ``answer_span_mask`` and cut to its first ``max_length``
tokens (as training cuts it); its Q/A tokens (span 0/1; template and special tokens are never
probed) are taken in position order until ``token_budget`` of them are taken, so the last row
may be cut at the budget. A pool with fewer span tokens than the budget is probed whole.

Bias-free probing (Appendix F.8): ``record_routes`` attaches a recorder with an empty
``RoutingContext`` (no prior rows: every gate routes exactly as the stock gate), runs the
model in eval mode under ``torch.inference_mode()``, and detaches. It refuses a model that
already carries a routing override (``attach`` raises), so a training-time hook left attached
cannot leak into a probe. Each row is its own forward pass (the pool is ~5,000 tokens), the
row's first ``max_length`` tokens, without padding.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workflow_scripts.atomic import atomic_path, write_json
from workflow_scripts.errors import UserInputError

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "ProbeTokens",
    "Routes",
    "load_routes",
    "probe_tokens",
    "record_routes",
    "routes_meta",
    "save_routes",
    "tokens_sha256",
]

META_FORMAT = "rpb-probe-routes/1"
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


def probe_tokens(
    tokenizer: Any, rows: Sequence[tuple[int, str, str]], max_length: int, token_budget: int
) -> ProbeTokens:
    """The first ``token_budget`` Q/A tokens of the pool ``rows`` ``(row_id, prompt, answer)``.

    See the module notes for the rule. Raises ``ValueError`` on non-positive sizes, repeated
    row ids, a row the chat template cannot render, or a pool without any Q/A token.
    """
    from workflow_scripts.modeling.tokenizer import answer_span_mask

    if max_length <= 0 or token_budget <= 0:
        raise ValueError(f"max_length and token_budget must be positive, got {max_length}, {token_budget}")
    ids = [int(row_id) for row_id, _, _ in rows]
    if len(set(ids)) != len(ids):
        raise ValueError("the pool repeats row ids; every probed token must name a unique row")
    row_ids, positions, spans, inputs = [], [], [], []
    taken = 0
    for row_id, prompt, answer in rows:
        if taken == token_budget:
            break
        try:
            input_ids, span_ids = answer_span_mask(tokenizer, prompt, answer)
        except ValueError as error:
            raise ValueError(f"row_id {row_id}: {error}") from error
        span = np.asarray(span_ids[:max_length], dtype=np.int8)  # (T_r,)
        where = np.flatnonzero(span >= 0)[: token_budget - taken]  # (n_r,)
        if where.size == 0:
            continue
        row_ids.append(np.full(where.size, int(row_id), dtype=np.int64))
        positions.append(where.astype(np.int32))
        spans.append(span[where])
        inputs.append(np.asarray(input_ids[:max_length], dtype=np.int64))
        taken += int(where.size)
    if taken == 0:
        raise ValueError("the pool has no Q/A tokens to probe")
    return ProbeTokens(
        np.concatenate(row_ids), np.concatenate(positions), np.concatenate(spans), tuple(inputs)
    )


def _row_blocks(tokens: ProbeTokens) -> list[slice]:
    """The slice of probed tokens belonging to each entry of ``tokens.inputs``."""
    starts = np.flatnonzero(np.diff(tokens.row_ids, prepend=tokens.row_ids[0] - 1))  # (R,)
    ends = [*starts[1:].tolist(), len(tokens)]
    return [slice(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def record_routes(model: nn.Module, tokenizer: Any, tokens: ProbeTokens) -> Routes:
    """Stock (bias-free) routes of ``model`` on ``tokens``; see the module notes.

    ``tokenizer`` must be the one ``tokens`` were made with (its vocabulary is checked against
    the fed ids). The model is left in eval mode with no routing override attached.

    Raises:
        TypeError: ``model`` has no supported MoE gate.
        RuntimeError: a routing override is already attached to ``model``.
        ValueError: ``tokens`` has no token ids (read from a file) or ids outside the vocabulary.
    """
    import torch

    from workflow_scripts.routing.hf import RoutingContext, attach

    blocks = _row_blocks(tokens) if len(tokens) else []
    if not blocks or len(blocks) != len(tokens.inputs):
        raise ValueError("tokens carry no token ids to run; build them with probe_tokens")
    if max(int(ids.max()) for ids in tokens.inputs) >= len(tokenizer):
        raise ValueError("probe token ids exceed the tokenizer's vocabulary: tokens from another tokenizer")
    model.eval()
    device = model.device
    topk, probs = [], []
    context = RoutingContext()  # no prior rows: stock routing, recorder only
    with attach(model, context) as handle, torch.inference_mode():
        for ids, block in zip(tokens.inputs, blocks, strict=True):
            context.set_batch(None, None)  # clears the recorder
            model(input_ids=torch.from_numpy(ids)[None].to(device), use_cache=False, logits_to_keep=1)
            where = torch.from_numpy(tokens.positions[block].astype(np.int64)).to(device)  # (n_r,)
            recorder = context.recorder
            z = torch.stack([logits[where] for logits in recorder.layer_logits()])  # (L, n_r, E)
            chosen = torch.stack([index[where] for index in recorder.layer_indices()])  # (L, n_r, k)
            probs.append(torch.softmax(z.float(), dim=-1).half().cpu())
            topk.append(chosen.sort(dim=-1).values.to(torch.int16).cpu())
        layers = np.asarray(handle.moe_layers, dtype=np.int64)
    return Routes(torch.cat(topk, dim=1).numpy(), torch.cat(probs, dim=1).numpy(), layers)


def tokens_sha256(tokens: ProbeTokens) -> str:
    """SHA-256 of the probed token identities, to check two routes files probe the same tokens."""
    digest = hashlib.sha256()
    for array, dtype in ((tokens.row_ids, "<i8"), (tokens.positions, "<i4"), (tokens.spans, "i1")):
        digest.update(np.ascontiguousarray(array, dtype=dtype).tobytes())
    return digest.hexdigest()


def routes_meta(
    routes: Routes,
    tokens: ProbeTokens,
    checkpoint: str | os.PathLike[str],
    pool: str | os.PathLike[str],
    token_budget: int,
    max_length: int,
    architecture: str | None = None,
) -> dict[str, Any]:
    """The meta.json of a routes file: inputs' checksums, settings, shapes and token counts."""
    from workflow_scripts.provenance import path_digest

    counts = tokens.counts()
    return {
        "format": META_FORMAT,
        "checkpoint": path_digest(checkpoint),
        "architecture": architecture,
        "pool": path_digest(pool),
        "token_budget": int(token_budget),
        "max_length": int(max_length),
        "budget_reached": counts["total"] == token_budget,
        "rows_probed": int(np.unique(tokens.row_ids).size),
        "num_layers": int(routes.topk.shape[0]),
        "moe_layers": routes.moe_layers.tolist(),
        "num_experts": routes.num_experts,
        "top_k": routes.top_k,
        "token_counts": counts,
        "tokens_sha256": tokens_sha256(tokens),
        "spans": {"0": "Q", "1": "A"},
        "topk": "experts the stock gate selected, ascending per token, int16 (L, N, k)",
        "probs": "softmax over the unbiased router logits in float32, stored float16 (L, N, E)",
    }


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
