"""The four task-type prompt templates of Appendix F.3, as data, and their rendering to chat messages.

Prompts are zero-shot and built from one template per task family, not per
benchmark, so every condition sees the same instruction for a family:

- math (GSM8K, MATH-500): a system turn asking for step-by-step reasoning and a
  user turn restating the problem and asking for the final answer in ``\\boxed{}``;
- multiple_choice (MMLU, MMLU-STEM, MMLU-Pro, GPQA, GPQA-Diamond): brief reasoning,
  then a final line ``Answer: X`` naming the option letter;
- code (HumanEval, MBPP): the complete solution in one fenced python block;
  HumanEval gives the signature to complete, MBPP the task and the tests it must pass;
- livebench: the question's own text as a bare user turn, no system preamble (its
  answer-format instructions are inside the question, as in the official protocol).

The messages are plain ``{"role", "content"}`` turns; the model's chat template is
applied later by the generation backend. Bump ``TEMPLATE_VERSION`` whenever any
text below changes, since scores can move with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workflow_scripts.errors import UserInputError
from workflow_scripts.evaluate.items import OPTION_LETTERS

TEMPLATE_VERSION = "1"


@dataclass(frozen=True)
class Template:
    """A system turn (``None`` for none) and a ``str.format`` user turn."""

    system: str | None
    user: str


MATH = Template(
    system=(
        "You are a careful mathematician. Reason through the problem step by step, "
        "showing each step of your work before you state the final answer."
    ),
    user=(
        "Solve the following problem.\n\n{problem}\n\n"
        "Reason step by step, and put your final answer within \\boxed{{}}."
    ),
)
MULTIPLE_CHOICE = Template(
    system=None,
    user=(
        "Answer the following multiple-choice question.\n\n{question}\n\n{options}\n\n"
        "Reason briefly, then finish with a final line of the form 'Answer: X', "
        "where X is the letter of the correct option ({letters})."
    ),
)
CODE = Template(
    system=None,
    user="{task}\n\nWrite the complete solution in Python, in a single fenced ```python code block.",
)
LIVEBENCH = Template(system=None, user="{question}")

TEMPLATES: dict[str, Template] = {
    "math": MATH,
    "multiple_choice": MULTIPLE_CHOICE,
    "code": CODE,
    "livebench": LIVEBENCH,
}

# The code template's task block, by grader: what each benchmark supplies to the model.
HUMANEVAL_TASK = "Complete the following Python function.\n\n```python\n{signature}\n```"
MBPP_TASK = "{description}\n\nYour code must pass these tests:\n\n```python\n{tests}\n```"
OPTION_LINE = "{letter}. {text}"


def _options(item: Mapping[str, Any]) -> list[str]:
    choices = [str(choice) for choice in item["choices"]]
    if not 2 <= len(choices) <= len(OPTION_LETTERS):
        raise UserInputError(
            f"item {item['item_id']}: {len(choices)} options, expected 2 to {len(OPTION_LETTERS)}"
        )
    return choices


def _code_task(item: Mapping[str, Any]) -> str:
    """HumanEval: its prompt (signature and docstring); MBPP: its description and test asserts."""
    if item["grader"] == "humaneval":
        return HUMANEVAL_TASK.format(signature=item["prompt"].strip("\n"))
    if item["grader"] == "mbpp":
        tests = json.loads(item["metadata"])["test_list"]
        return MBPP_TASK.format(description=item["prompt"].strip(), tests="\n".join(tests))
    raise UserInputError(
        f"item {item['item_id']}: code template has no task block for grader '{item['grader']}'"
    )


def _fields(item: Mapping[str, Any]) -> dict[str, str]:
    """The values a template's user turn is formatted with."""
    template = item["template"]
    if template == "math":
        return {"problem": item["prompt"].strip()}
    if template == "multiple_choice":
        choices = _options(item)
        letters = OPTION_LETTERS[: len(choices)]
        lines = [
            OPTION_LINE.format(letter=letter, text=text)
            for letter, text in zip(letters, choices, strict=True)
        ]
        return {
            "question": item["prompt"].strip(),
            "options": "\n".join(lines),
            "letters": ", ".join(letters),
        }
    if template == "code":
        return {"task": _code_task(item)}
    return {"question": item["prompt"]}


def render(item: Mapping[str, Any]) -> list[dict[str, str]]:
    """Chat messages for one item (a row of ``ITEM_COLUMNS``) under its task-type template (F.3)."""
    if item["template"] not in TEMPLATES:
        raise UserInputError(
            f"item {item['item_id']}: unknown template '{item['template']}'; known: {sorted(TEMPLATES)}"
        )
    template = TEMPLATES[item["template"]]
    messages = [] if template.system is None else [{"role": "system", "content": template.system}]
    messages.append({"role": "user", "content": template.user.format(**_fields(item))})
    return messages
