"""Generation backends: hf sampling determinism on a tiny model, vLLM requests and parsing without a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import PretrainedConfig

from tests.dag import TINY_SPEC
from workflow_scripts.evaluate.generation import (
    MAX_BLOCKS,
    Completion,
    Sampling,
    block_seed,
    chat_prompts,
    generate_hf,
    parse_vllm_outputs,
    rows_for,
    sample_hf,
    stop_ids,
    vllm_sampling_kwargs,
)
from workflow_scripts.modeling.tokenizer import train_tokenizer
from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model

QUESTIONS = ["What is 2 + 3?", "Name a prime.", "def add(a, b):", "Sort the list [3, 1, 2]."]
SAMPLING = Sampling(temperature=0.6, top_p=0.95, max_new_tokens=6, seeds=(42, 43))


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_tokenizer(QUESTIONS * 4 + ["the answer is 5"], 300)
    model = build_toy_model("qwen3_moe", ToyModelSpec(**TINY_SPEC), tokenizer, seed=0)
    messages = [[{"role": "system", "content": "Think."}, {"role": "user", "content": q}] for q in QUESTIONS]
    return model, tokenizer, chat_prompts(tokenizer, messages)


def test_sampling_from_config_seeds_one_repeat_each():
    evaluation = {"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 8192, "repeats": 5, "base_seed": 42}
    sampling = Sampling.from_config(evaluation)
    assert sampling.seeds == (42, 43, 44, 45, 46)
    assert (sampling.temperature, sampling.top_p, sampling.max_new_tokens) == (0.6, 0.95, 8192)


def test_chat_prompts_use_the_models_template(tiny):
    _, tokenizer, prompts = tiny
    assert prompts[0].endswith("<|assistant|>")
    assert "<|system|>Think.<|eos|><|user|>What is 2 + 3?<|eos|>" in prompts[0]


def test_hf_sampling_is_determined_by_the_seed(tiny):
    model, tokenizer, prompts = tiny
    first = generate_hf(model, tokenizer, prompts, SAMPLING, batch_size=3)
    again = generate_hf(model, tokenizer, prompts, SAMPLING, batch_size=3)
    assert first == again
    assert len(first) == 2 and all(len(repeat) == len(prompts) for repeat in first)
    assert first[0] != first[1], "two seeds should sample differently"
    for completion in first[0]:
        assert completion.tokens <= SAMPLING.max_new_tokens
        assert completion.finish_reason in ("stop", "length")


def test_hf_matches_an_unbatched_greedy_reference(tiny):
    """At temperature ~0 sampling is greedy: batched, left-padded output equals one prompt at a time."""
    model, tokenizer, prompts = tiny
    greedy = Sampling(temperature=1e-6, top_p=1.0, max_new_tokens=5, seeds=(0,))
    batched = generate_hf(model, tokenizer, prompts, greedy, batch_size=4)[0]
    for prompt, completion in zip(prompts, batched, strict=True):
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            out = model.generate(input_ids=ids, do_sample=False, max_new_tokens=5, pad_token_id=2)
        new = out[0, ids.shape[1] :].tolist()
        if tokenizer.eos_token_id in new:
            new = new[: new.index(tokenizer.eos_token_id)]
        assert completion.text == tokenizer.decode(new, skip_special_tokens=True)


def test_hf_refuses_prompts_past_the_context(tiny):
    model, tokenizer, _ = tiny
    long_prompt = " ".join(["What is 2 + 3?"] * 60)
    with pytest.raises(ValueError, match="exceeds the model's context"):
        generate_hf(model, tokenizer, [long_prompt], SAMPLING, batch_size=1)


def test_vllm_requests_carry_the_repeat_seed():
    sampling = Sampling(temperature=0.6, top_p=0.95, max_new_tokens=8192, seeds=(42, 43, 44, 45, 46))
    kwargs = [vllm_sampling_kwargs(sampling, r) for r in range(5)]
    assert [k["seed"] for k in kwargs] == [42, 43, 44, 45, 46]
    assert kwargs[0] == {"n": 1, "temperature": 0.6, "top_p": 0.95, "max_tokens": 8192, "seed": 42}


def _request(request_id: str, text: str | None, tokens: int = 3, reason: str = "stop") -> SimpleNamespace:
    outputs = (
        []
        if text is None
        else [SimpleNamespace(text=text, token_ids=list(range(tokens)), finish_reason=reason)]
    )
    return SimpleNamespace(request_id=request_id, outputs=outputs)


def test_vllm_outputs_are_parsed_in_request_order():
    parsed = parse_vllm_outputs([_request("0", "\\boxed{5}", 4), _request("1", "x", 8192, "length")])
    assert parsed == [Completion("\\boxed{5}", 4, "stop"), Completion("x", 8192, "length")]
    with pytest.raises(ValueError, match="request 7 returned no completion"):
        parse_vllm_outputs([_request("7", None)])


def test_an_hf_block_samples_the_same_whatever_ran_before(tiny):
    """A resumed run samples a block without the blocks before it: reseeded per block, it matches."""
    model, tokenizer, prompts = tiny
    seed = block_seed(SAMPLING.seeds[1], 1)
    first = sample_hf(model, tokenizer, prompts[2:], SAMPLING, seed, 2)
    sample_hf(model, tokenizer, prompts[:2], SAMPLING, 7, 2)  # moves torch's generator on
    assert sample_hf(model, tokenizer, prompts[2:], SAMPLING, seed, 2) == first
    assert sample_hf(model, tokenizer, prompts[2:], SAMPLING, block_seed(SAMPLING.seeds[1], 2), 2) != first


def test_block_seeds_keep_the_repeat_seed_first_and_never_collide():
    assert block_seed(42, 0) == 42, "one block per repeat samples as one seed per repeat did"
    seeds = {block_seed(s, b) % 2**32 for s in range(42, 47) for b in range(MAX_BLOCKS + 1)}
    assert len(seeds) == 5 * (MAX_BLOCKS + 1), "torch's CPU generator reads a seed modulo 2**32"
    with pytest.raises(ValueError, match="distinct seeds"):
        block_seed(42, MAX_BLOCKS + 1)


def test_rows_pair_every_item_with_each_repeat_seed():
    keys = [("gsm8k", "gsm8k/0"), ("mbpp", "mbpp/1")]
    completions = [[Completion("a", 1, "stop"), Completion("b", 2, "length")] for _ in SAMPLING.seeds]
    rows = rows_for(keys, completions, SAMPLING)
    assert [(r["item_id"], r["repeat"], r["seed"]) for r in rows] == [
        ("gsm8k/0", 0, 42),
        ("mbpp/1", 0, 42),
        ("gsm8k/0", 1, 43),
        ("mbpp/1", 1, 43),
    ]


def test_a_moonlight_response_ends_at_im_end_not_only_at_eos(tmp_path):
    """Moonlight's eos is [EOS] but its turn ends in <|im_end|>, the token post-training teaches to emit."""
    from tests.chat_families import moonlight_remote_tokenizer

    tokenizer = moonlight_remote_tokenizer(QUESTIONS * 4 + ["the answer is 5"], tmp_path)
    im_end, five = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.encode("5")[0]
    assert stop_ids(tokenizer) == sorted([tokenizer.eos_token_id, im_end])

    class Scripted(torch.nn.Module):
        """A model whose every continuation is '5', <|im_end|>, then more '5's."""

        config = PretrainedConfig(num_hidden_layers=1, max_position_embeddings=4096)
        script = [five, im_end, five, five]

        def forward(self, input_ids, cache, **kwargs):
            self.steps = 0 if input_ids.shape[1] > 1 else self.steps + 1  # a prompt, or one new token
            self.calls += 1
            logits = torch.zeros(len(input_ids), 1, len(tokenizer))
            logits[:, :, self.script[self.steps]] = 100.0
            return SimpleNamespace(logits=logits)

    model = Scripted()
    model.calls = 0
    prompts = chat_prompts(tokenizer, [[{"role": "user", "content": q}] for q in QUESTIONS])
    for completion in generate_hf(model, tokenizer, prompts, SAMPLING, batch_size=3)[0]:
        assert completion == Completion("5", 2, "stop")
    calls = len(SAMPLING.seeds) * 2 * 2
    assert model.calls == calls, "each repeat's two batches end at <|im_end|>, the prompt and one token on"


def test_vllm_requests_stop_at_the_templates_turn_end():
    sampling = Sampling(temperature=0.6, top_p=0.95, max_new_tokens=8, seeds=(42,))
    assert vllm_sampling_kwargs(sampling, 0, [7, 9])["stop_token_ids"] == [7, 9]


def test_a_generic_toys_turn_ends_at_eos(tiny):
    _, tokenizer, _ = tiny
    assert stop_ids(tokenizer) == [tokenizer.eos_token_id]
