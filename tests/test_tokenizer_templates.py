"""Span labels and the generation-block template under the paper families' real chat templates."""

from __future__ import annotations

import pytest

from tests.chat_families import FAMILIES, family_tokenizer
from tests.dag import toy_rows
from workflow_scripts.modeling.batches import Example, labels_for
from workflow_scripts.modeling.tokenizer import (
    A_SPAN,
    Q_SPAN,
    answer_span_mask,
    check_rendering,
    generation_template,
)

#: Rows with content a literal-cutting template could mangle: quotes, backslashes, Jinja
#: syntax, non-ASCII, astral-plane characters, newlines, text that repeats the template's own.
AWKWARD = [
    ("it's a \\ test {{ x }} {% if %}", "naïve ✓ 😀\n\nAssistant: twice"),
    ("User: ", "<|im_end|>"),
    ("", "empty prompt"),
]


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    prompts, answers = toy_rows(8)
    prompts += [prompt for prompt, _ in AWKWARD]
    answers += [answer for _, answer in AWKWARD]
    return family_tokenizer(FAMILIES[request.param], prompts + answers), prompts, answers


def test_spans_decode_to_the_prompt_and_the_answer_under_every_family_template(family):
    """DeepSeek-V2's turn ('Assistant: ') and Qwen3's (a think block) differ from the generation prompt."""
    tokenizer, prompts, answers = family
    for prompt, answer in zip(prompts, answers, strict=True):
        if "<|im_end|>" in answer:
            continue  # a special token in the text is tokenised as that token: no exact decode
        ids, spans = answer_span_mask(tokenizer, prompt, answer)
        decoded = {
            span: tokenizer.decode([t for t, s in zip(ids, spans, strict=True) if s == span])
            for span in (Q_SPAN, A_SPAN)
        }
        assert decoded[Q_SPAN].strip() == prompt.strip()
        assert decoded[A_SPAN].strip() == answer.strip()


def test_generation_template_renders_every_row_as_the_family_template(family):
    tokenizer, prompts, answers = family
    template = generation_template(tokenizer)
    check_rendering(tokenizer, template, prompts, answers)
    for prompt in prompts:
        for generation in (True, False):
            turn = [{"role": "user", "content": prompt}]
            own = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=generation)
            derived = tokenizer.apply_chat_template(
                turn, chat_template=template, tokenize=False, add_generation_prompt=generation
            )
            assert derived == own


def test_generation_block_holds_exactly_the_local_backends_answer_labels(family):
    """The answer and the one token closing its turn: not Qwen3's think block nor its last newline."""
    tokenizer, prompts, answers = family
    template = generation_template(tokenizer)
    for prompt, answer in zip(prompts[:8], answers[:8], strict=True):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
            chat_template=template,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        ids, spans = answer_span_mask(tokenizer, prompt, answer)
        assert rendered["input_ids"] == ids
        assert rendered["assistant_masks"] == [
            int(label != -100) for label in labels_for(Example(ids, spans), "answer")
        ]


def test_generation_template_refuses_other_conversation_shapes(family):
    tokenizer, _, _ = family
    system = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    with pytest.raises(Exception, match="one user turn"):
        tokenizer.apply_chat_template(system, chat_template=generation_template(tokenizer), tokenize=False)


def test_check_rendering_names_the_row_a_template_renders_differently(family):
    tokenizer, prompts, answers = family
    altered = generation_template(tokenizer).replace(
        "messages[1]['content']", "messages[1]['content'] | trim"
    )
    with pytest.raises(ValueError, match="split row 1"):
        check_rendering(tokenizer, altered, prompts[:1] + ["p"], answers[:1] + [" padded answer "])
