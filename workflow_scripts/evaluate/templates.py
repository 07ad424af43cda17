"""The four task-type prompt templates of Appendix F.3, as data, and their rendering to chat messages.

Prompts are zero-shot, one template per task family rather than per benchmark, so every
condition sees the same instruction for a family (``render``). The texts live in
``workflow_scripts.task_formats`` (with ``TEMPLATE_VERSION``), which the toy corpora use too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workflow_scripts.errors import UserInputError
from workflow_scripts.evaluate.items import OPTION_LETTERS
from workflow_scripts.task_formats import (
    CHOICE_USER,
    CODE_USER,
    HUMANEVAL_TASK,
    MATH_SYSTEM,
    MATH_USER,
    MBPP_TASK,
    option_lines,
)


@dataclass(frozen=True)
class Template:
    """A system turn (``None`` for none) and a ``str.format`` user turn."""

    system: str | None
    user: str


MATH = Template(system=MATH_SYSTEM, user=MATH_USER)
MULTIPLE_CHOICE = Template(system=None, user=CHOICE_USER)
CODE = Template(system=None, user=CODE_USER)
LIVEBENCH = Template(system=None, user="{question}")

TEMPLATES: dict[str, Template] = {
    "math": MATH,
    "multiple_choice": MULTIPLE_CHOICE,
    "code": CODE,
    "livebench": LIVEBENCH,
}


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
        return {
            "question": item["prompt"].strip(),
            "options": option_lines(choices, letters),
            "letters": ", ".join(letters),
        }
    if template == "code":
        return {"task": _code_task(item)}
    return {"question": item["prompt"]}


def render(item: Mapping[str, Any]) -> list[dict[str, str]]:
    """Chat messages for one item (a row of ``ITEM_COLUMNS``) under its task-type template (F.3).

    One template per task family, not per benchmark:

    - math (GSM8K, MATH-500): a system turn asking for step-by-step reasoning and a
      user turn restating the problem and asking for the final answer in ``\boxed{}``;
    - multiple_choice (MMLU, MMLU-STEM, MMLU-Pro, GPQA, GPQA-Diamond): brief reasoning,
      then a final line ``Answer: X`` naming the option letter;
    - code (HumanEval, MBPP): the complete solution in one fenced python block;
      HumanEval gives the signature to complete, MBPP the task and the tests it must pass;
    - livebench: the question's own text as a bare user turn, no system preamble (its
      answer-format instructions are inside the question, as in the official protocol).

    The messages are plain ``{"role", "content"}`` turns; the generation backend applies the
    model's chat template later.
    """
    if item["template"] not in TEMPLATES:
        raise UserInputError(
            f"item {item['item_id']}: unknown template '{item['template']}'; known: {sorted(TEMPLATES)}"
        )
    template = TEMPLATES[item["template"]]
    messages = [] if template.system is None else [{"role": "system", "content": template.system}]
    messages.append({"role": "user", "content": template.user.format(**_fields(item))})
    return messages
