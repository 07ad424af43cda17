"""The frozen-base routing prior of RPB: eq. (2) of the paper over a whole split (Appendix F.7).

For every row ``x`` of a split, span ``s`` (0 = Q, 1 = A), MoE layer ``l`` and expert ``e``::

    pi[x, s, l, e] = mean over the tokens t of span s of x of  softmax_e(z_base[t, l])

The gate is the SOFTMAX of the frozen base router's logits for every architecture, also for
the sigmoid-scored DeepSeek-V3 router (the paper's ``p_base``), in float32. Rows are span-labelled
and cut exactly as training cuts them, so the prior describes the tokens the model is trained on.
How a reader checks and opens a prior is :mod:`workflow_scripts.file_formats.prior`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workflow_scripts.atomic import atomic_path
from workflow_scripts.file_formats.prior import template_sha256

if TYPE_CHECKING:
    import torch

SPAN_DEFINITION = (
    "Q = prompt tokens, A = answer tokens after the chat template; template/special tokens excluded"
)
META_FORMAT = "rpb-prior-meta/1"
_PROGRESS_EVERY_BATCHES = 10


def span_means(probs: torch.Tensor, span_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean router probabilities over each sample's Q tokens and A tokens (eq. (2)).

    Vectorised as one batched matrix product of the one-hot span matrix ``(B, T, 2)`` with
    the probabilities: ``sums[b, s] = sum_t onehot[b, t, s] * probs[b, t]``. Tokens with a
    negative span id (template, special, padding) take part in neither span; their
    probabilities are zeroed first, so padding cannot leak in even if it holds NaNs.

    Empty spans: a span with no tokens (an empty prompt, or an answer truncated away by
    ``max_length``) has no base routing to average. Its row is the uniform distribution ``1/E``
    (whose eq. (3) bias is exactly zero: such a span gets no prior bias), and its token count is
    0; ``prior_meta`` records every row's Q/A token counts and how many spans are empty, so this
    is visible.

    Args:
        probs: per-token router probabilities, ``(B, T, L, E)``, floating point.
        span_ids: ``(B, T)`` integer span per token: 0 (Q), 1 (A), -1 (no span).

    Returns:
        ``(means, counts)``: ``(B, 2, L, E)`` in the dtype of ``probs`` and ``(B, 2)`` int64
        token counts (Q, A).
    """
    import torch

    if probs.dim() != 4:
        raise ValueError(f"probs must have shape (B, T, L, E), got {tuple(probs.shape)}")
    batch, length, _, num_experts = probs.shape
    if tuple(span_ids.shape) != (batch, length):
        raise ValueError(f"span_ids has shape {tuple(span_ids.shape)}, expected {(batch, length)}")
    spans = span_ids.to(probs.device).long()
    onehot = spans.unsqueeze(-1) == torch.arange(2, device=probs.device)  # (B, T, 2)
    counts = onehot.sum(dim=1)  # (B, 2), int64
    in_span = (spans >= 0)[:, :, None, None]  # (B, T, 1, 1)
    kept = probs.masked_fill(~in_span, 0.0)  # (B, T, L, E)
    sums = torch.einsum("bts,btle->bsle", onehot.to(probs.dtype), kept)  # (B, 2, L, E)
    present = (counts > 0)[:, :, None, None]  # (B, 2, 1, 1)
    means = sums / counts.clamp(min=1).to(probs.dtype)[:, :, None, None]  # (B, 2, L, E)
    means = torch.where(present, means, torch.full_like(means, 1.0 / num_experts))
    return means, counts


def _encode_rows(
    tokenizer: Any, rows: Sequence[tuple[str, str]], max_length: int, directory: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encode every row once, chat-rendered, span-labelled and cut to ``max_length`` tokens.

    The kept tokens of all rows are appended, in split order, to two flat files in
    ``directory`` (int32 ids, int8 spans) and memory-mapped back, so memory use does not grow
    with the split (disk: 5 bytes per kept token).

    Returns:
        ``(lengths, ids, spans)``: ``(N,)`` int64 kept length of each row, and the flat ids and
        spans; row ``i`` is ``[starts[i], starts[i] + lengths[i])`` with ``starts`` the
        exclusive cumulative sum of ``lengths``.
    """
    from workflow_scripts.modeling.tokenizer import answer_span_arrays, special_id_array

    special = special_id_array(tokenizer)
    lengths = np.zeros(len(rows), dtype=np.int64)
    ids_path, spans_path = directory / "ids.int32", directory / "spans.int8"
    with ids_path.open("wb") as ids_file, spans_path.open("wb") as spans_file:
        for i, (prompt, answer) in enumerate(rows):
            try:
                ids, spans = answer_span_arrays(tokenizer, prompt, answer, max_length, special)
            except ValueError as error:
                raise ValueError(f"row {i}: {error}") from error
            if ids.size and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
                raise ValueError(f"row {i}: token ids out of the int32 range")
            ids_file.write(ids.astype(np.int32).tobytes())
            spans_file.write(spans.astype(np.int8, copy=False).tobytes())
            lengths[i] = ids.size
    if not lengths.sum():
        return lengths, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int8)
    return (
        lengths,
        np.memmap(ids_path, dtype=np.int32, mode="r"),
        np.memmap(spans_path, dtype=np.int8, mode="r"),
    )


def compute_prior(
    model: Any,
    tokenizer: Any,
    rows: Sequence[tuple[str, str]],
    out_path: str | os.PathLike[str],
    batch_size: int,
    max_length: int,
    progress: bool = True,
) -> dict[str, Any]:
    """One pass of the frozen base over ``rows``, writing the ``(N, 2, L, E)`` prior to ``out_path``.

    The model is put in eval mode and its decoder (``model.base_model``, without the LM head)
    run under ``torch.inference_mode()`` on its own device, with ``output_router_logits=True``
    (one ``(B*T, E)`` logit tensor per MoE layer). Rows are encoded with
    ``answer_span_mask`` and cut to their first ``max_length`` tokens; they are batched in
    order of decreasing length (stable, so ties keep split order) to limit padding, right-
    padded with the pad token (attention mask 0, span -1), and every row's means are written
    at the row's own index. Every row is encoded once, before the pass: its kept ids and spans
    go to a temporary flat int32/int8 file pair next to ``out_path`` (5 bytes per kept token,
    memory-mapped, removed afterwards), so no encoded split is held in memory; only the
    ``(N,)`` lengths and start offsets are.

    Layer axis: ``L`` indexes the MoE layers in ascending decoder-layer order
    (``moe_layer_indices``), which is the order of the model's ``router_logits`` outputs and of
    ``workflow_scripts.routing.hf.find_gates``.

    Output: a float32 ``.npy`` of shape ``(N, 2, L, E)`` whose row ``i`` is the split's row ``i``,
    written batch by batch into a memory-mapped temporary file (memory use does not grow with
    ``N``) and moved into place when complete.

    Args:
        model: a transformers MoE ``*ForCausalLM`` (the frozen base).
        tokenizer: its tokenizer, with the chat template the training run uses.
        rows: ``(prompt, answer)`` pairs in split order.
        out_path: the ``.npy`` to write (atomically).
        batch_size: rows per forward pass.
        max_length: tokens kept per row (the training sequence length).
        progress: print ``rows done / total`` to stderr every few batches.

    Returns:
        ``{"shape": [N, 2, L, E], "moe_layers": [...], "num_experts": E,
        "token_counts": (N, 2) int64 array (Q, A), "seconds": wall time,
        "rows_per_second": throughput}``.
    """
    import torch
    from numpy.lib.format import open_memmap

    from workflow_scripts.modeling.toy import moe_layer_indices

    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if max_length <= 0:
        raise ValueError(f"max_length must be positive, got {max_length}")
    num_rows = len(rows)
    if num_rows == 0:
        raise ValueError("no rows to compute a prior for")
    layers = moe_layer_indices(model)
    if not layers:
        raise ValueError("the model has no MoE layers")
    pad_id = next(
        (t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None),
        0,
    )
    device = model.device
    # The decoder alone: the prior needs router logits only, not the LM head nor the
    # load-balancing loss that some causal-LM heads compute whenever router logits are output.
    decoder = model.base_model
    counts = np.zeros((num_rows, 2), dtype=np.int64)
    started = time.perf_counter()

    model.eval()
    with (
        atomic_path(out_path) as tmp,
        tempfile.TemporaryDirectory(prefix=f"{tmp.name}.tokens.", dir=tmp.parent) as cache,
        torch.inference_mode(),
    ):
        lengths, flat_ids, flat_spans = _encode_rows(tokenizer, rows, max_length, Path(cache))
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        order = np.argsort(-lengths, kind="stable")
        prior = None
        batches = range(0, num_rows, batch_size)
        for number, start in enumerate(batches, start=1):
            index = order[start : start + batch_size]
            batch_lengths = lengths[index]
            width = int(batch_lengths.max())
            ids_np = np.full((len(index), width), pad_id, dtype=np.int64)
            spans_np = np.full((len(index), width), -1, dtype=np.int64)
            for b, (first, length) in enumerate(zip(starts[index], batch_lengths, strict=True)):
                ids_np[b, :length] = flat_ids[first : first + length]
                spans_np[b, :length] = flat_spans[first : first + length]
            input_ids = torch.from_numpy(ids_np)
            attention_mask = torch.from_numpy((np.arange(width) < batch_lengths[:, None]).astype(np.int64))
            span_ids = torch.from_numpy(spans_np)
            outputs = decoder(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                output_router_logits=True,
                use_cache=False,
            )
            router_logits = outputs.router_logits
            if router_logits is None or len(router_logits) != len(layers):
                got = None if router_logits is None else len(router_logits)
                raise ValueError(f"model returned {got} router logit tensors for {len(layers)} MoE layers")
            probs = torch.stack(
                [torch.softmax(z.float(), dim=-1).reshape(len(index), width, -1) for z in router_logits],
                dim=2,
            )  # (B, T, L, E)
            means, batch_counts = span_means(probs, span_ids)
            if prior is None:
                shape = (num_rows, 2, len(layers), probs.shape[-1])
                prior = open_memmap(tmp, mode="w+", dtype=np.float32, shape=shape)
            prior[index] = means.cpu().numpy().astype(np.float32, copy=False)
            counts[index] = batch_counts.cpu().numpy()
            done = min(start + batch_size, num_rows)
            if progress and (number % _PROGRESS_EVERY_BATCHES == 0 or done == num_rows):
                rate = done / max(time.perf_counter() - started, 1e-9)
                print(f"priors: {done}/{num_rows} rows ({rate:.1f} rows/s)", file=sys.stderr, flush=True)
        assert prior is not None
        prior.flush()
        shape = prior.shape
        del prior, flat_ids, flat_spans  # close the maps before the files are moved or removed
    seconds = time.perf_counter() - started
    return {
        "shape": [int(d) for d in shape],
        "moe_layers": [int(i) for i in layers],
        "num_experts": int(shape[-1]),
        "token_counts": counts,
        "seconds": seconds,
        "rows_per_second": num_rows / max(seconds, 1e-9),
    }


def _summary(values: np.ndarray) -> dict[str, Any]:
    return {
        "min": int(values.min()),
        "mean": float(values.mean()),
        "max": int(values.max()),
        "empty": int((values == 0).sum()),
    }


def prior_meta(
    result: Mapping[str, Any],
    row_ids: Sequence[int],
    split_path: str | os.PathLike[str],
    model_dir: str | os.PathLike[str],
    chat_template: str | None,
    max_length: int,
    batch_size: int,
    clip_eps: float,
    clip_c: float,
    architecture: str | None = None,
    prior_path: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The meta.json of a prior: what it was computed from and how to read it.

    Fields: ``format``; ``shape`` ``[N, 2, L, E]`` and ``dtype``; ``spans`` (index -> name)
    and ``span_definition``; ``gate``; ``moe_layers`` (decoder-layer index of each ``L``
    entry) and ``num_experts``; ``max_length`` and ``truncation``; ``batch_size``;
    ``row_ids`` (the split's ``row_id`` of each prior row, in order); ``token_counts``
    (``{"Q": [...], "A": [...]}``, one count per row, 0 = empty span = uniform row) and
    ``token_count_summary`` (min/mean/max/empty per span); ``empty_span_fill``; ``model``
    (``path_digest`` of the checkpoint directory) and ``architecture``; ``split``
    (``path_digest`` of the parquet: path, sha256, bytes); ``chat_template_sha256``;
    ``clip_eps`` and ``clip_c`` (the clamp the bias of eq. (3) is built with); ``prior``
    (``path_digest`` of the written ``.npy``: path, sha256, bytes), when ``prior_path`` is given.

    Args:
        result: the return value of ``compute_prior``.
        row_ids: the split's ``row_id`` column, in split order.
        split_path, model_dir: the inputs, checksummed here.
        chat_template: the tokenizer's chat template text.
        max_length, batch_size: the settings of the pass.
        clip_eps, clip_c: the clamp numerators of eq. (3).
        architecture: the model's ``model_type`` (informational).
        prior_path: the finished ``.npy``, checksummed here (``check_prior_file`` compares).
    """
    from workflow_scripts.records import path_digest

    counts = np.asarray(result["token_counts"])
    if len(row_ids) != counts.shape[0]:
        raise ValueError(f"{len(row_ids)} row ids for a prior of {counts.shape[0]} rows")
    meta = {
        "format": META_FORMAT,
        "shape": list(result["shape"]),
        "dtype": "float32",
        "spans": {"0": "Q", "1": "A"},
        "span_definition": SPAN_DEFINITION,
        "gate": "softmax over the base router logits, float32, every architecture (sigmoid routers too)",
        "moe_layers": list(result["moe_layers"]),
        "num_experts": int(result["num_experts"]),
        "max_length": int(max_length),
        "truncation": "first max_length tokens of the chat rendering, as in training",
        "batch_size": int(batch_size),
        "row_ids": [int(r) for r in row_ids],
        "token_counts": {"Q": counts[:, 0].tolist(), "A": counts[:, 1].tolist()},
        "token_count_summary": {"Q": _summary(counts[:, 0]), "A": _summary(counts[:, 1])},
        "empty_span_fill": "uniform 1/E (zero bias), token count 0",
        "model": path_digest(model_dir),
        "architecture": architecture,
        "split": path_digest(split_path),
        "chat_template_sha256": template_sha256(chat_template),
        "clip_eps": float(clip_eps),
        "clip_c": float(clip_c),
    }
    if prior_path is not None:
        meta["prior"] = path_digest(prior_path)
    return meta


def gather_rows(prior: np.ndarray, positions: Sequence[int] | np.ndarray) -> np.ndarray:
    """The prior rows at ``positions`` (split positions, any order) as an in-memory float32 array.

    Returns ``(len(positions), 2, L, E)``; only those rows are read from a memory map.
    """
    index = np.asarray(positions, dtype=np.int64)
    if index.ndim != 1:
        raise ValueError(f"positions must be one-dimensional, got shape {index.shape}")
    if index.size and (index.min() < 0 or index.max() >= prior.shape[0]):
        raise IndexError(f"positions out of range for a prior of {prior.shape[0]} rows")
    return np.asarray(prior[index], dtype=np.float32)
