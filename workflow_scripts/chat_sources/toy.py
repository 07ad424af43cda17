"""Toy raw sources: rows in the real source schemas, for the toy-scale pipeline and the tests.

``generate(fmt, subset, rows, seed, bad_fraction)`` returns a table laid out like the hub
dataset (GLM-5.1-Reasoning-1M-Cleaned ``main``/``Math`` or OpenR1-Math-220k ``default``), so the
same reader and scorer run at both scales. Answers carry a ``<think>...</think>`` channel before
a final completion built from the task families of ``workflow_scripts.toy_tasks``; a
``bad_fraction`` share of rows is damaged, cycling through every hard penalty of the scorer and two
out-of-band lengths (``BAD_KINDS``), so a build always has something to remove. One seeded numpy
Generator: the same arguments give the same table.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from workflow_scripts.errors import UserInputError
from workflow_scripts.toy_tasks import (
    draw_choice,
    draw_function,
    draw_list,
    draw_program,
    draw_sum,
    draw_truth_chain,
)

# Share of each domain per (format, subset).
SUBSETS: dict[tuple[str, str], dict[str, float]] = {
    ("glm_sharegpt", "main"): {"code": 0.5, "general": 0.35, "math": 0.15},
    ("glm_sharegpt", "Math"): {"math": 1.0},
    ("openr1", "default"): {"math": 1.0},
}
# Damage kinds, in the order bad rows cycle through them.
BAD_KINDS = (
    "empty_prompt",  # penalty: empty
    "empty_answer",  # penalty: empty (the answer is only a reasoning channel)
    "unclosed_think",  # penalty: reasoning_tag
    "retained_tag",  # penalty: reasoning_tag (a tag after the last </think>)
    "missing_assistant",  # penalty: missing_assistant
    "punctuation_run",  # penalty: punctuation_run
    "degenerate_phrase",  # penalty: degenerate_phrase
    "too_long",  # penalty: too_long
    "short_answer",  # no penalty: only the answer's last characters, far below its length band
    "long_prompt",  # no penalty: prompt above its length band
)

TOPICS = (
    "photosynthesis",
    "the water cycle",
    "plate tectonics",
    "inflation",
    "vaccination",
    "the printing press",
    "bird migration",
    "compound interest",
    "ocean tides",
    "volcanoes",
)
FILLER = {
    "math": (
        "We check the step: the quantity ${a} \\times {b}$ equals ${p}$, consistent with the data. ",
        "Rounding is not needed here, since every quantity is a whole number. ",
        "A quick estimate, about {a} groups of {b}, agrees with the exact value. ",
    ),
    "code": (
        "The loop visits each element once, so the function runs in linear time for {a} items. ",
        "Memory use stays small because only {b} helper variables are kept. ",
        "Edge cases such as an empty input return early without raising an error. ",
    ),
    "general": (
        "Researchers have studied this for about {a} years, and the picture keeps getting clearer. ",
        "A simple analogy helps: think of {b} buckets passing water down a line. ",
        "Everyday examples make the idea concrete and easy to remember. ",
    ),
}


def _math(rng: np.random.Generator, held_back: bool) -> tuple[str, str]:
    task = draw_sum(rng, held_back)
    return task.prompt(str(rng.choice(SUM_STYLES))), task.response


def _code(rng: np.random.Generator, held_back: bool) -> tuple[str, str]:
    inputs = [draw_list(rng) for _ in range(3)]
    if rng.integers(2):
        program = draw_program(rng, held_back)
        return program.prompt(inputs[:2]), program.response
    function = draw_function(rng, held_back)
    return function.prompt(str(rng.choice(FUNCTION_STYLES)), inputs), function.response


def _general(rng: np.random.Generator, held_back: bool) -> tuple[str, str]:
    kind = int(rng.integers(3))
    if kind == 0:
        task = draw_choice(rng, int(rng.integers(4, 11)))
        return task.prompt, task.response
    if kind == 1:
        chain = draw_truth_chain(rng)
        return chain.prompt, chain.response
    topic = TOPICS[int(rng.integers(len(TOPICS)))]
    prompt = f"Explain {topic} to a curious high-school student in a few paragraphs."
    head = (
        f"# {topic.capitalize()}\n\n{topic.capitalize()} is easiest to understand through its causes "
        "and its effects.\n\n- First, look at what drives it.\n- Then, follow what it changes."
    )
    return prompt, head


SUM_STYLES = ("word", "expression", "amps")
FUNCTION_STYLES = ("humaneval", "mbpp")
BUILDERS = {"math": _math, "code": _code, "general": _general}


def _row(domain: str, r: np.ndarray, kind: str | None, held_back: bool) -> tuple[str, str | None]:
    """(prompt, raw answer or None for a missing assistant turn) of one row; ``r`` holds its draws.

    The final answer is the task's worked result (``toy_tasks``' response) and nothing more, so a
    model trained on it stops once it has answered; the domain's filler sentences are the
    reasoning channel, which the corpus build strips.
    """
    prompt, head = BUILDERS[domain](np.random.default_rng(int(r[0])), held_back)
    a, b = int(r[6] % 50) + 3, int(r[7] % 9) + 2
    sentences = [sentence.format(a=a, b=b, p=a * b) for sentence in FILLER[domain]]
    filler = "".join(sentences[(int(r[6]) + k) % len(sentences)] for k in range(int(r[8] % 3 + 2)))
    body = head
    think = f"<think>\nLet me reason about this carefully. {filler}\n</think>\n\n"
    if kind == "empty_prompt":
        prompt = "   "
    elif kind == "empty_answer":
        body = ""
    elif kind == "unclosed_think":
        think = think.replace("</think>", "")
    elif kind == "retained_tag":
        body = body + "\n<think>Wait, let me double-check.\n"
    elif kind == "missing_assistant":
        return prompt, None
    elif kind == "punctuation_run":
        body = body + "\n\nAmazing" + "!" * 20
    elif kind == "degenerate_phrase":
        body = "As an AI language model, I will answer. " + body
    elif kind == "too_long":
        body = body + sentences[1] * (33000 // len(sentences[1]) + 1)
    elif kind == "short_answer":
        body = head[-12:]
    elif kind == "long_prompt":
        prompt = prompt + " Context: " + sentences[2] * (4500 // len(sentences[2]) + 1)
    return prompt, think + body


def _turns(first: list[str], second: list[str | None], role_names: tuple[str, str, str, str]) -> pa.Array:
    """list<struct<role, text>> column: one user turn, then one assistant turn unless it is None."""
    role_field, text_field, user, assistant = role_names
    counts = np.array([1 if answer is None else 2 for answer in second], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    roles, texts = [], []
    for prompt, answer in zip(first, second, strict=True):
        roles.append(user)
        texts.append(prompt)
        if answer is not None:
            roles.append(assistant)
            texts.append(answer)
    fields = [pa.array(roles, pa.string()), pa.array(texts, pa.string())]
    if role_field == "role":  # OpenR1 stores {content, role}
        fields, names = fields[::-1], [text_field, role_field]
    else:
        names = [role_field, text_field]
    return pa.ListArray.from_arrays(pa.array(offsets), pa.StructArray.from_arrays(fields, names=names))


def generate(
    fmt: str, subset: str, rows: int, seed: int, bad_fraction: float, held_back: bool = True
) -> pa.Table:
    """A raw table of ``rows`` rows in format ``fmt`` (glm_sharegpt or openr1) and subset ``subset``.

    ``held_back=False`` leaves out the sub-skills ``toy_tasks`` holds back from the toy bases.
    """
    if (fmt, subset) not in SUBSETS:
        raise UserInputError(
            f"toy source: no subset '{subset}' for format '{fmt}' (known: {sorted(SUBSETS)})"
        )
    if rows < 1 or not 0.0 <= bad_fraction <= 1.0:
        raise UserInputError("toy source: need rows >= 1 and 0 <= bad_fraction <= 1")
    rng = np.random.default_rng(seed)
    shares = SUBSETS[(fmt, subset)]
    domains = rng.choice(list(shares), size=rows, p=list(shares.values()))
    draws = rng.integers(0, 2**31, size=(rows, 10))
    n_bad = int(round(rows * bad_fraction))
    kinds: list[str | None] = [None] * rows
    for k, at in enumerate(sorted(rng.choice(rows, size=n_bad, replace=False))):
        kinds[at] = BAD_KINDS[k % len(BAD_KINDS)]
    pairs = [_row(str(domains[i]), draws[i], kinds[i], held_back) for i in range(rows)]
    prompts = [prompt for prompt, _ in pairs]
    answers = [answer for _, answer in pairs]
    outputs = ["" if answer is None else answer for answer in answers]
    ids = [f"{subset.lower()}-{seed}-{i:07d}" for i in range(rows)]

    if fmt == "glm_sharegpt":
        meta = json.dumps({"source": "toy", "subset": subset, "seed": seed})
        return pa.table(
            {
                "id": pa.array(ids, pa.string()),
                "conversations": _turns(prompts, answers, ("from", "value", "human", "gpt")),
                "input": pa.array(prompts, pa.string()),
                "output": pa.array(outputs, pa.string()),
                "domain": pa.array([str(d) for d in domains], pa.string()),
                "meta": pa.array([meta] * rows, pa.string()),
            }
        )
    uuids = [
        f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        for h in (f"{a:016x}{b:016x}" for a, b in rng.integers(0, 2**63, size=(rows, 2)).tolist())
    ]
    final = [o.rsplit("</think>", 1)[-1].strip() for o in outputs]
    boxed = [f.rsplit("\\boxed{", 1)[-1].split("}", 1)[0] if "\\boxed{" in f else "" for f in final]
    return pa.table(
        {
            "problem": pa.array(prompts, pa.string()),
            "solution": pa.array(final, pa.string()),
            "answer": pa.array(boxed, pa.string()),
            "problem_type": pa.array(["Algebra"] * rows, pa.string()),
            "question_type": pa.array(["math-word-problem"] * rows, pa.string()),
            "source": pa.array(["toy"] * rows, pa.string()),
            "uuid": pa.array(uuids, pa.string()),
            "is_reasoning_complete": pa.array([[a is not None] for a in answers], pa.list_(pa.bool_())),
            "generations": pa.array([[o] for o in outputs], pa.list_(pa.string())),
            "correctness_math_verify": pa.array([[True] for _ in answers], pa.list_(pa.bool_())),
            "correctness_count": pa.array([1] * rows, pa.int64()),
            "messages": _turns(prompts, answers, ("role", "content", "user", "assistant")),
        }
    )
