"""The toy's sampler against transformers' ``generate``, on each family's model and KV cache."""

from __future__ import annotations

import pytest
import torch

from tests.dag import TINY_SPEC
from workflow_scripts.evaluate.hf_sampler import sample_batch
from workflow_scripts.families import ARCHITECTURES
from workflow_scripts.modeling.tokenizer import train_tokenizer
from workflow_scripts.modeling.toy import ToyModelSpec, build_toy_model

PROMPTS = ["What is 2 + 3?", "Name a prime number, please.", "def add(a, b):", "Sort [3, 1, 2] and say why."]
NEW_TOKENS = 8


@pytest.fixture(scope="module", params=ARCHITECTURES)
def batch(request):
    """A toy of one family, and the prompts left-padded as ``sample_hf`` pads them."""
    tokenizer = train_tokenizer(PROMPTS * 4, 300)
    model = build_toy_model(request.param, ToyModelSpec(**TINY_SPEC), tokenizer, seed=0).eval()
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    width = max(map(len, encoded))
    input_ids = torch.full((len(encoded), width), tokenizer.pad_token_id)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        attention[row, width - len(ids) :] = 1
    return model, input_ids, attention


def _generate(model, input_ids, attention, **kwargs) -> list[list[int]]:
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids, attention_mask=attention, max_new_tokens=NEW_TOKENS, top_k=0, **kwargs
        )
    return out[:, input_ids.shape[1] :].tolist()


def test_until_a_row_stops_it_draws_what_generate_draws(batch):
    """Same seed, no stop token drawn: every token equals ``generate``'s sampled one."""
    model, input_ids, attention = batch
    never = [model.config.vocab_size + 7]
    torch.manual_seed(5)
    ours = sample_batch(model, input_ids, attention, 0.6, 0.95, NEW_TOKENS, never)
    torch.manual_seed(5)
    theirs = _generate(model, input_ids, attention, do_sample=True, temperature=0.6, top_p=0.95)
    assert ours == theirs


def test_a_retired_row_leaves_the_rows_still_decoding_as_they_were(batch):
    """Greedy (temperature ~0): with rows retired at different steps, each row is its own greedy answer.

    A stop token is chosen from the rows' own answers so that some stop early and others go on;
    a misaligned cache, mask or position after a row leaves would change the others' tokens.
    """
    model, input_ids, attention = batch
    alone = [
        _generate(model, input_ids[row : row + 1, attention[row].argmax() :], None, do_sample=False)[0]
        for row in range(len(input_ids))
    ]
    stop = alone[0][2]
    expected = [answer[: answer.index(stop) + 1] if stop in answer else answer for answer in alone]
    assert len({len(answer) for answer in expected}) > 1, "rows must retire at different steps"
    ours = sample_batch(model, input_ids, attention, 1e-6, 1.0, NEW_TOKENS, [stop])
    assert ours == expected
