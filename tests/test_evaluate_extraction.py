"""Answer extraction (Appendix F.3) on crafted responses."""

from __future__ import annotations

import pytest

from workflow_scripts.evaluate.extraction import (
    drop_thousands_commas,
    extract_choice,
    extract_code,
    extract_math_answer,
    last_boxed,
    read_braced,
    strip_reasoning,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>the answer is 7</think>The answer is 5.", "The answer is 5."),
        ("<think>a</think>x<think>b</think>y", "xy"),
        ("reasoning without an opening tag</think>\nFinal: 5", "\nFinal: 5"),
        ("<think>first</think> mid </think> final", " final"),
        ("Answer first. <think>truncated while reasoning, 42", "Answer first. "),
        ("no reasoning channel at all", "no reasoning channel at all"),
        ("<think>\nmulti\nline\n</think>\nok", "\nok"),
    ],
)
def test_strip_reasoning(text, expected):
    assert strip_reasoning(text) == expected


def test_read_braced_balances_nesting_and_escapes():
    text = r"{a{b}c\}d}rest"
    assert read_braced(text, 0) == (r"a{b}c\}d", len(text) - len("rest"))
    assert read_braced("{never closed", 0) is None
    with pytest.raises(ValueError, match="no '\\{' at index 0"):
        read_braced("a{b}", 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"\boxed{\sqrt{\frac{a^{2}}{b}}}", r"\sqrt{\frac{a^{2}}{b}}"),
        (r"first \boxed{3}, then corrected: \boxed{4}", "4"),
        (r"\boxed{\text{the set } \{1, 2\}}", r"\text{the set } \{1, 2\}"),
        (r"\fbox{12}", "12"),
        (r"the answer is \boxed 5$ done", "5"),
        (r"\boxed {7}", "7"),
        (r"good \boxed{8} then broken \boxed{\frac{1}{2}", "8"),
        (r"\boxed{  }", None),
        (r"\boxed{\boxed{3}}", "3"),
        (r"\boxedx{3} is not a box", None),
        ("no box here", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_drop_thousands_commas_keeps_lists():
    assert drop_thousands_commas("1,234,567 and 1,2 and 12,3456") == "1234567 and 1,2 and 12,3456"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"We get \boxed{\frac{1}{2}}. Check: 0.5", r"\frac{1}{2}"),
        (r"\boxed{2} #### 3", "2"),
        ("Natalia sold 48 clips.\n#### 1,234\nextra 99", "1234"),
        ("#### 5\nmore\n#### 72", "72"),
        ("#### \nthe total is 9", "9"),
        ("So the loss is -1,234.5 dollars.", "-1234.5"),
        ("Steps: 3 then 10-3=7.", "7"),
        ("x equals +2.50", "2.50"),
        ("the value is .75", ".75"),
        ("Final temperature: -40", "-40"),
        ("I cannot solve this.", None),
        ("", None),
    ],
)
def test_extract_math_answer(text, expected):
    assert extract_math_answer(text) == expected


def test_extract_math_answer_after_reasoning():
    text = "<think>maybe \\boxed{3}</think>The result is 4."
    assert extract_math_answer(strip_reasoning(text)) == "4"


@pytest.mark.parametrize(
    ("text", "n_options", "expected"),
    [
        ("Reasoning...\nAnswer: B", 4, "B"),
        ("**Answer:** C", 4, "C"),
        ("**Answer: D**", 4, "D"),
        ("Answer: (A).", 4, "A"),
        ("answer: [C]", 4, "C"),
        ("Final answer: B\n", 4, "B"),
        ("Answer: A\nOn reflection,\nAnswer: C", 4, "C"),
        ("Answer: J", 10, "J"),
        ("Answer: J", 4, None),
        ("Answer: A\nAnswer: E", 4, None),
        ("Answer: Based on the options, it is B", 4, None),
        ("Answer: b", 4, None),
        ("The answer is B", 4, None),
        ("Answer:\nB", 4, None),
        ("", 4, None),
    ],
)
def test_extract_choice(text, n_options, expected):
    assert extract_choice(text, n_options) == expected


@pytest.mark.parametrize("n_options", [0, 27])
def test_extract_choice_rejects_bad_option_count(n_options):
    with pytest.raises(ValueError, match="n_options must be in 1..26"):
        extract_choice("Answer: A", n_options)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Here:\n```python\ndef f():\n    return 1\n```\n", "def f():\n    return 1\n"),
        ("```py\nx = 1\n```", "x = 1\n"),
        ("```Python\nx = 2\n```", "x = 2\n"),
        ("```python\nfirst = 1\n```\ntext\n```python\nsecond = 2\n```", "second = 2\n"),
        ("```python\ntagged = 1\n```\n```\nuntagged = 2\n```", "tagged = 1\n"),
        ("```\nuntagged = 1\n```\n```\nuntagged = 2\n```", "untagged = 2\n"),
        ("```bash\npip install x\n```\n```\ncode = 3\n```", "code = 3\n"),
        ("```bash\npip install x\n```", None),
        ("```python\nnever closed", None),
        ("def f(): return 1", None),
    ],
)
def test_extract_code(text, expected):
    assert extract_code(text) == expected


@pytest.mark.slow
def test_last_boxed_is_linear_on_unclosed_boxes():
    """5 MB of unclosed ``\\boxed{`` (once quadratic: 56 KB took 27 s) ends fast, with no answer."""
    import time

    start = time.perf_counter()
    assert last_boxed("\\boxed{" * 700_000) is None
    assert last_boxed("\\boxed{" * 100_000 + "\\boxed{7}") == "7"
    assert strip_reasoning("<think>" * 700_000 + "x") == ""
    assert time.perf_counter() - start < 10.0
