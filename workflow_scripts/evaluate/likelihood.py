"""Teacher-forced answer log-likelihood: a deterministic, low-noise score beside sampled accuracy.

For every benchmark item, the mean log-probability per token of a fixed gold response
(``gold_response``) after the item's rendered prompt, under the model's own routing or under a
routing override of the router interventions (§3.1): ``own_prior_hard`` routes every prompt and
answer token through the top-k of the item's own span-mean routing (RPB-hard with the item's own
base prior), ``global_hard`` through the top-k of that prior with expert identities permuted per
layer (the global-hard control of §5.2.2). Both go through ``routing.hf`` (hard mode); nothing is
sampled, so two runs on one checkpoint agree exactly and the spread is over items only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

#: Bump when a gold response, the encoding or the routing overrides change: scores can move.
LIKELIHOOD_VERSION = "1"
ROUTINGS = ("own", "own_prior_hard", "global_hard")
ITEM_LIKELIHOOD_COLUMNS = ("benchmark", "item_id", "routing", "tokens", "loglik_sum", "loglik_mean")


def gold_response(item: Mapping[str, Any]) -> str | None:
    """The gold response an item is scored on, in the answer format its template asks for.

    math: ``The answer is $\\boxed{A}$.``; multiple choice: ``Answer: X``; HumanEval: the
    prompt's function completed by the canonical solution, fenced; MBPP: the reference code,
    fenced; LiveBench: math as math, other categories ``The answer is **A**.``. ``None`` for an
    item without a gold text (LiveBench coding, whose gold is its tests): it is not scored.
    The toy scale scores the toy corpora's whole worked response instead
    (``toy_benchmarks.toy_gold_response``): the answer line alone would start off the toy
    models' distribution, and any flattening of it (a scrambled routing) would then score better.
    """
    grader, answer = item["grader"], str(item["answer"])
    metadata = item["metadata"]
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    if grader == "math":
        return f"The answer is $\\boxed{{{answer}}}$."
    if grader == "multiple_choice":
        return f"Answer: {answer}"
    if grader == "humaneval":
        return f"```python\n{metadata['prompt']}{metadata['canonical_solution']}```"
    if grader == "mbpp":
        return f"```python\n{metadata['code'].rstrip()}\n```"
    if grader == "livebench":
        if not answer:
            return None
        if metadata.get("category") == "math":
            return f"The answer is $\\boxed{{{answer}}}$."
        return f"The answer is **{answer}**."
    raise ValueError(f"item {item['item_id']}: no gold response for grader {grader!r}")


def encode(tokenizer: Any, prompt: str, response: str) -> tuple[list[int], int]:
    """Token ids of a rendered prompt followed by the response; returns ``(ids, answer_start)``.

    Prompt and response are tokenized separately (no added special tokens, as generation
    tokenizes prompts), so the response tokens are exactly what the model would have to
    generate after the prompt.
    """
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    if not answer_ids:
        raise ValueError("the gold response encodes to no tokens")
    return [*prompt_ids, *answer_ids], len(prompt_ids)


def answer_logprobs(logits: Any, ids: Any, answer_start: int) -> Any:
    """Log-probabilities of the answer tokens ``ids[answer_start:]`` under next-token ``logits``.

    ``logits`` ``(T, V)`` at positions ``0..T-1``; token ``t`` is predicted at position ``t-1``.
    Returns ``(T - answer_start,)`` float64.
    """
    import torch

    logprobs = torch.log_softmax(logits.double(), dim=-1)  # (T, V)
    targets = ids[answer_start:]  # (A,)
    return logprobs[answer_start - 1 : -1].gather(1, targets[:, None]).squeeze(1)  # (A,)


def global_permutations(num_layers: int, num_experts: int, seed: int) -> np.ndarray:
    """``(L, E)`` per-layer expert permutations, layer ``l`` drawn by ``PCG64([seed, l])``.

    The draw of ``priors.shuffle.global_permutations`` (the global-hard control's shuffle), so
    the override here permutes a prior exactly as that control's prior was permuted; a test
    holds the two equal (this stage may not import the priors stage).
    """
    draws = [np.random.Generator(np.random.PCG64([seed, layer])) for layer in range(num_layers)]
    return np.stack([rng.permutation(num_experts) for rng in draws]).astype(np.int64)  # (L, E)


def own_prior(router_logits: Sequence[Any], span_ids: Any) -> Any:
    """Eq. (2) on one sequence: the mean softmax routing over its Q and A tokens, ``(1, 2, L, E)``.

    ``router_logits``: one ``(T, E)`` tensor per MoE layer (the recorder's unbiased logits);
    ``span_ids``: ``(T,)`` with 0 (Q) or 1 (A) for every token. Both spans must be non-empty.
    """
    import torch

    probs = torch.stack([z.float().softmax(dim=-1) for z in router_logits], dim=1)  # (T, L, E)
    rows = [probs[span_ids == span].mean(dim=0) for span in (0, 1)]  # 2 x (L, E)
    return torch.stack(rows)[None]  # (1, 2, L, E)


def item_loglik(
    model: Any, ids: Sequence[int], answer_start: int, routing: str, seed: int
) -> tuple[int, float]:
    """``(answer tokens, summed log-likelihood)`` of one encoded item under ``routing``.

    ``own``: the stock gates. ``own_prior_hard`` / ``global_hard``: a first, stock pass records
    the item's routing; every token of the prompt (span Q, template included) and of the answer
    (span A) is then forced through the top-k of its span's mean routing (``routing.hf`` hard
    mode, the RPB-hard override), for ``global_hard`` after permuting expert ids per layer with
    ``global_permutations(L, E, seed)``.
    """
    import torch

    from workflow_scripts.routing.hf import RoutingContext, attach

    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
    input_ids = torch.tensor([list(ids)], device=model.device)  # (1, T)
    span_ids = (torch.arange(len(ids)) >= answer_start).long()[None]  # (1, T): 0 prompt, 1 answer
    context = RoutingContext(mode="hard")
    handle = attach(model, context)
    try:
        with torch.inference_mode():
            context.set_batch(None, None)
            logits = model(input_ids=input_ids).logits[0]  # (T, V)
            if routing != "own":
                recorded = context.recorder.layer_logits()  # L x (T, E), the stock pass
                prior = own_prior(recorded, span_ids[0].to(model.device))  # (1, 2, L, E)
                if routing == "global_hard":
                    perms = torch.from_numpy(global_permutations(prior.shape[2], prior.shape[3], seed))
                    layers = torch.arange(prior.shape[2], device=prior.device)[:, None]  # (L, 1)
                    prior = prior[:, :, layers, perms.to(prior.device)]  # (1, 2, L, E)
                context.set_prior(prior, span_ids)
                logits = model(input_ids=input_ids).logits[0]  # (T, V)
    finally:
        handle.detach()
    values = answer_logprobs(logits.float().cpu(), input_ids[0].cpu(), answer_start)
    return int(values.numel()), float(values.sum())


def likelihood_rows(
    model: Any,
    tokenizer: Any,
    items: Iterable[Mapping[str, Any]],
    prompts: Sequence[str],
    routings: Sequence[str],
    seed: int,
    gold: Callable[[Mapping[str, Any]], str | None] = gold_response,
) -> list[dict[str, Any]]:
    """One row per (scored item, routing) (``ITEM_LIKELIHOOD_COLUMNS``); items without gold are skipped."""
    model.eval()
    rows = []
    for item, prompt in zip(items, prompts, strict=True):
        response = gold(item)
        if response is None:
            continue
        ids, start = encode(tokenizer, prompt, response)
        for routing in routings:
            tokens, total = item_loglik(model, ids, start, routing, seed)
            rows.append(
                {
                    "benchmark": item["benchmark"],
                    "item_id": item["item_id"],
                    "routing": routing,
                    "tokens": tokens,
                    "loglik_sum": total,
                    "loglik_mean": total / tokens,
                }
            )
    return rows


def mean_se(values: Sequence[float]) -> dict[str, float | int]:
    """Mean, its standard error ``sd (ddof 1) / sqrt(n)`` (NaN for one value) and ``n``."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        raise ValueError("mean_se: no values")
    se = float(array.std(ddof=1) / math.sqrt(array.size)) if array.size > 1 else math.nan
    return {"mean": float(array.mean()), "se": se, "n": int(array.size)}


def summarize(rows: Sequence[Mapping[str, Any]], families: Mapping[str, str]) -> dict[str, Any]:
    """Per routing: mean per-token log-likelihood and SE over items, per benchmark and per domain.

    ``families`` maps benchmark id to its family (``math``, ``code``, ``multi_domain``); a domain
    pools the items of its benchmarks, each item weighted once.
    """
    summary: dict[str, Any] = {}
    for routing in dict.fromkeys(row["routing"] for row in rows):
        mine = [row for row in rows if row["routing"] == routing]
        benchmarks = dict.fromkeys(row["benchmark"] for row in mine)
        unknown = sorted(set(benchmarks) - set(families))
        if unknown:
            raise ValueError(f"no family for benchmarks {unknown}")
        domains = dict.fromkeys(families[name] for name in benchmarks)
        summary[routing] = {
            "benchmarks": {
                name: mean_se([r["loglik_mean"] for r in mine if r["benchmark"] == name])
                for name in benchmarks
            },
            "domains": {
                domain: mean_se([r["loglik_mean"] for r in mine if families[r["benchmark"]] == domain])
                for domain in domains
            },
        }
    return summary
