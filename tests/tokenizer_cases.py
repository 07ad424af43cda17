"""What the families' tokenizer tests share: the awkward rows and the offset-based span reference.

Each family's test (``test_moonlight_tokenizer``, ``test_deepseek_v2_tokenizer``,
``test_qwen3_tokenizer``) adds the rows its own template could get wrong; DeepSeek-V2's and Qwen3's
have offsets, so their reference labels the row spelled from the template text with them.
"""

from __future__ import annotations

from tests.dag import toy_rows
from workflow_scripts.modeling import tokenizer as tk

#: Rows a span labeller could get wrong in any family: non-ASCII and astral characters, newlines,
#: an empty prompt, edge spaces.
AWKWARD = [
    ("naïve ✓ 😀 what is 2+2?", "4\n\nso 😀 ✓ 12345"),
    ("", "an empty prompt"),
    ("  spaces around  ", " x "),
]


def rows_with(*family_rows: tuple[str, str]) -> list[tuple[str, str]]:
    """Sixteen toy rows, the shared awkward ones and a family's own."""
    prompts, answers = toy_rows(16)
    return [*zip(prompts, answers, strict=True), *AWKWARD, *family_rows]


def offset_reference_spans(
    reference, special: set[int], pieces: tuple[str, str, str], prompt: str, answer: str
) -> tuple[list[int], list[int]]:
    """The labelling rule on ``before + prompt + between + answer + after``, with the reference's offsets.

    ``reference`` is a ``tokenizers.Tokenizer`` read from the saved files; a token is the span it
    overlaps most (the prompt on a tie), none when it is special, empty or outside both texts.
    """
    before, between, after = pieces
    q = (len(before), len(before) + len(prompt))
    a = (q[1] + len(between), q[1] + len(between) + len(answer))
    encoding = reference.encode(before + prompt + between + answer + after, add_special_tokens=False)
    spans = []
    for token, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
        q_overlap = max(0, min(end, q[1]) - max(start, q[0]))
        a_overlap = max(0, min(end, a[1]) - max(start, a[0]))
        if token in special or end <= start or not (q_overlap or a_overlap):
            spans.append(tk.NO_SPAN)
        else:
            spans.append(tk.Q_SPAN if q_overlap >= a_overlap else tk.A_SPAN)
    return encoding.ids, spans
