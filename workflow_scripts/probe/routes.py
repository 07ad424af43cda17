"""Bias-free routes of a checkpoint on a probe pool: the input of every §2 probe statistic.

The co-activation graphs (eq. (1)), top-k overlap, sharpness and the Table 11 span statistics
all come from two per-token quantities recorded here once per checkpoint: ``topk`` ``(L, N, k)``,
the experts the stock gate selected, and ``probs`` ``(L, N, E)``, ``softmax(z)`` of the unbiased
router logits, the prior's ``p_base`` definition for every architecture (also DeepSeek-V3's
sigmoid router). The routes file itself is :mod:`workflow_scripts.file_formats.routes`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from workflow_scripts.file_formats.routes import ProbeTokens, Routes

if TYPE_CHECKING:
    from torch import nn

__all__ = ["probe_tokens", "record_routes", "routes_meta", "tokens_sha256"]

META_FORMAT = "rpb-probe-routes/1"


def probe_tokens(
    tokenizer: Any, rows: Sequence[tuple[int, str, str]], max_length: int, token_budget: int
) -> ProbeTokens:
    """The first ``token_budget`` Q/A tokens of the pool ``rows`` ``(row_id, prompt, answer)``.

    The selection is the same for every checkpoint of one model because it
    depends on the tokenizer, the pool and the two integers only: each pool row, in pool order, is
    chat-rendered and span-labelled with ``answer_span_mask`` and cut to its first ``max_length``
    tokens (as training cuts it); its Q/A tokens (span 0/1; template and special tokens are never
    probed) are taken in position order until ``token_budget`` of them are taken, so the last row
    may be cut at the budget. A pool with fewer span tokens than the budget is probed whole.

    Raises ``ValueError`` on non-positive sizes, repeated
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
    """Stock (bias-free) routes of ``model`` on ``tokens``.

    Bias-free probing (Appendix F.8): it attaches a recorder with an empty
    ``RoutingContext`` (no prior rows: every gate routes exactly as the stock gate), runs the
    model in eval mode under ``torch.inference_mode()``, and detaches. It refuses a model that
    already carries a routing override (``attach`` raises), so a training-time hook left attached
    cannot leak into a probe. Each row is its own forward pass (the pool is ~5,000 tokens), the
    row's first ``max_length`` tokens, without padding.

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
    from workflow_scripts.records import path_digest

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
