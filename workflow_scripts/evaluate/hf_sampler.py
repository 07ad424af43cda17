"""KV-cached sampling of one left-padded batch that retires each row at its stop token.

transformers' ``generate`` keeps a finished row in the batch, decoding padding for it until the
last row stops or the token limit is reached; at the toy's sizes a decode step costs about
0.2 ms per row above a fixed 4 ms, and a toy response is half the token limit on average while
nearly every batch holds one that runs to it, so about half of ``generate``'s work decodes rows
already finished. This loop drops a finished row from the batch and its KV cache
(``Cache.batch_select_indices``), as vLLM's scheduler does. Everything else is ``generate``'s
sampler: the same position ids and masks, transformers' own temperature and top-p warpers, one
``torch.multinomial`` draw over the live rows per step. Until a row stops it draws exactly what
``generate`` draws from the same seed; after, the draws of the remaining rows differ (fewer rows
take fewer random numbers), from the same distribution.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch


def _cache_keyword(model: Any) -> str:
    """The keyword ``model.forward`` takes its KV cache by.

    transformers 5.24 (training's) names it ``cache`` and still takes ``past_key_values`` with a
    deprecation warning; 5.19 (the evaluation environment's) knows only ``past_key_values`` and
    would swallow ``cache`` into its ``**kwargs`` unused, so every step would see one token alone.
    """
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _warpers(temperature: float, top_p: float) -> Any:
    """The logits warpers ``generate`` applies for these settings (with ``top_k=0``), in its order."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


def sample_batch(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    stops: Sequence[int],
) -> list[list[int]]:
    """New tokens of each row of a left-padded ``(B, T)`` batch, each ending at its first stop token.

    A row's list ends with the stop token that ended it, or holds ``max_new_tokens`` tokens.
    Draws from torch's global generator; the caller seeds it.
    """
    from transformers import DynamicCache

    warpers = _warpers(temperature, top_p)
    stop_ids = torch.tensor(list(stops), dtype=torch.long)
    cache = DynamicCache(config=model.config)
    cache_argument = {_cache_keyword(model): cache}
    # As generate: positions count real tokens, padding's are 0 (its keys are masked out).
    position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    live = torch.arange(input_ids.shape[0])  # the batch row of each row still decoding
    generated: list[list[int]] = [[] for _ in range(input_ids.shape[0])]
    sequences, step_ids = input_ids, input_ids  # the prompts first, then each step's new tokens
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(
                input_ids=step_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                **cache_argument,
                use_cache=True,
                logits_to_keep=1,
            ).logits
            scores = warpers(sequences, logits[:, -1].to(dtype=torch.float32))
            tokens = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
            for row, token in zip(live.tolist(), tokens.tolist(), strict=True):
                generated[row].append(token)
            going = ~torch.isin(tokens, stop_ids)
            if not going.any():
                break
            if not going.all():
                keep = going.nonzero().squeeze(1)
                cache.batch_select_indices(keep)
                live, tokens, sequences = live[keep], tokens[keep], sequences[keep]
                attention_mask, position_ids = attention_mask[keep], position_ids[keep]
            sequences = torch.cat([sequences, tokens[:, None]], dim=-1)
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(live), 1))], dim=-1)
            position_ids, step_ids = position_ids[:, -1:] + 1, tokens[:, None]
    return generated
