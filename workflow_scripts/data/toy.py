"""Toy raw sources: rows in the real source schemas, for the toy-scale pipeline and the tests.

``generate(fmt, subset, rows, seed, bad_fraction)`` returns a table laid out like
the hub dataset (GLM-5.1-Reasoning-1M-Cleaned ``main``/``Math`` or
OpenR1-Math-220k ``default``), so the same reader and scorer run at both
scales. Answers carry a ``<think>...</think>`` reasoning channel before the
final completion, in three templated domains (math word problems with LaTeX
and ``\\boxed``, Python tasks with fenced code, general prose). A
``bad_fraction`` share of rows is damaged, cycling through every hard penalty
of the scorer and two out-of-band lengths (BAD_KINDS), so a build always has
to remove something. All randomness comes from one numpy Generator seeded
with ``seed``: the same arguments give the same table.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from workflow_scripts.errors import UserInputError

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
    "short_answer",  # no penalty: answer below its length band
    "long_prompt",  # no penalty: prompt above its length band
)

NAMES = ("Ada", "Bram", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jun")
ITEMS = ("apple", "notebook", "ticket", "marble", "brick", "lamp", "stamp", "candle")
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
FUNCS = (
    (
        "sum_of_squares",
        "returns the sum of the squares of a list of integers",
        "total = 0\n    for x in xs:\n        total += x * x\n    return total",
    ),
    ("count_vowels", "counts the vowels in a string", "return sum(1 for ch in xs.lower() if ch in 'aeiou')"),
    (
        "running_max",
        "returns the running maximum of a list",
        "out = []\n    best = None\n    for x in xs:\n        best = x if best is None else max(best, x)\n"
        "        out.append(best)\n    return out",
    ),
    (
        "dedupe",
        "removes duplicates from a list while keeping the first occurrence",
        "seen = set()\n    out = []\n    for x in xs:\n        if x not in seen:\n            seen.add(x)\n"
        "            out.append(x)\n    return out",
    ),
    (
        "is_palindrome",
        "checks whether a string reads the same backwards, ignoring case",
        "s = xs.lower()\n    return s == s[::-1]",
    ),
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


def _math(r: np.ndarray) -> tuple[str, str, str]:
    a, b, c = int(r[0] % 40) + 2, int(r[1] % 20) + 1, int(r[2] % 9) + 1
    name, item = NAMES[r[3] % len(NAMES)], ITEMS[r[4] % len(ITEMS)]
    if r[5] % 2:
        prompt = (
            f"{name} buys {a} {item}s for ${b}$ dollars each and sells each for ${b + c}$ dollars. "
            "What is the total profit in dollars?"
        )
        result, work = a * c, f"{a} \\times ({b + c} - {b}) = {a} \\times {c} = {a * c}"
    else:
        prompt = (
            f"A rectangle has sides {a} cm and {b} cm. {name} cuts off a square of side {min(a, b)} cm. "
            "What area is left, in square centimetres?"
        )
        result = a * b - min(a, b) ** 2
        work = f"{a} \\cdot {b} - {min(a, b)}^{{2}} = {a * b} - {min(a, b) ** 2} = {result}"
    final = (
        f"## Solution\n\nStep 1: Set up the expression.\n\n\\[ {work} \\]\n\n"
        f"Step 2: Check it with \\(\\frac{{{result}}}{{1}} = {result}\\).\n\n"
    )
    return prompt, final, f"\n\nThe answer is $\\boxed{{{result}}}$."


def _code(r: np.ndarray) -> tuple[str, str, str]:
    fname, task, body = FUNCS[r[0] % len(FUNCS)]
    prompt = f"Write a Python function `{fname}(xs)` that {task}. Include a short explanation."
    final = (
        f"Here is a straightforward implementation.\n\n```python\ndef {fname}(xs):\n    {body}\n```\n\n"
        "- It handles the empty input.\n- It does not modify its argument.\n\n"
    )
    call = f"print({fname}([{r[1] % 7}, {r[2] % 5}]))"
    example = f"For example, `{fname}` can be called as:\n\n```python\n{call}\n```"
    return prompt, final, example


def _general(r: np.ndarray) -> tuple[str, str, str]:
    topic = TOPICS[r[0] % len(TOPICS)]
    prompt = f"Explain {topic} to a curious high-school student in a few paragraphs."
    final = (
        f"# {topic.capitalize()}\n\n{topic.capitalize()} is easiest to understand through its causes "
        "and its effects.\n\n- First, look at what drives it.\n- Then, follow what it changes.\n\n"
    )
    return prompt, final, "\n\nIn short, it is a process worth understanding well."


BUILDERS = {"math": _math, "code": _code, "general": _general}


def _row(domain: str, r: np.ndarray, kind: str | None) -> tuple[str, str | None]:
    """(prompt, raw answer or None for a missing assistant turn) of one row; ``r`` holds its draws."""
    prompt, head, tail = BUILDERS[domain](r)
    a, b = int(r[6] % 50) + 3, int(r[7] % 9) + 2
    sentences = [sentence.format(a=a, b=b, p=a * b) for sentence in FILLER[domain]]
    filler = "".join(sentences[(int(r[6]) + k) % len(sentences)] for k in range(int(r[8] % 40 + 4)))
    body = head + filler + tail
    think = f"<think>\nLet me reason about this carefully. {sentences[0] * int(r[9] % 6 + 1)}\n</think>\n\n"
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
        body = tail.strip()
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


def generate(fmt: str, subset: str, rows: int, seed: int, bad_fraction: float) -> pa.Table:
    """A raw table of ``rows`` rows in format ``fmt`` (glm_sharegpt or openr1) and subset ``subset``."""
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
    pairs = [_row(str(domains[i]), draws[i], kinds[i]) for i in range(rows)]
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
