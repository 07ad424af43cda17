"""The instruction texts models are asked with: Appendix F.3's task templates and LiveBench's own.

One definition below every stage: evaluation renders its prompts from these texts
(``evaluate.templates``), and the toy corpora (``toy_tasks``) phrase their instruction
rows with the same texts, as real instruction data phrases math, multiple-choice and code
requests in the forms benchmarks use. Bump ``TEMPLATE_VERSION`` whenever any text changes,
since scores can move with it.
"""

from __future__ import annotations

TEMPLATE_VERSION = "1"

MATH_SYSTEM = (
    "You are a careful mathematician. Reason through the problem step by step, "
    "showing each step of your work before you state the final answer."
)
MATH_USER = (
    "Solve the following problem.\n\n{problem}\n\n"
    "Reason step by step, and put your final answer within \\boxed{{}}."
)
CHOICE_USER = (
    "Answer the following multiple-choice question.\n\n{question}\n\n{options}\n\n"
    "Reason briefly, then finish with a final line of the form 'Answer: X', "
    "where X is the letter of the correct option ({letters})."
)
OPTION_LINE = "{letter}. {text}"
# Option letters, up to MMLU-Pro's ten options.
OPTION_LETTERS = "ABCDEFGHIJ"
CODE_USER = "{task}\n\nWrite the complete solution in Python, in a single fenced ```python code block."
# The code template's task block, by grader: what each benchmark supplies to the model.
HUMANEVAL_TASK = "Complete the following Python function.\n\n```python\n{signature}\n```"
MBPP_TASK = "{description}\n\nYour code must pass these tests:\n\n```python\n{tests}\n```"

# LiveBench questions carry their own instructions (the LiveBench template is the bare question).
AMPS_INSTRUCTION = "Please put your final answer in a $\\boxed{}$."
WEB_OF_LIES_V2_INSTRUCTION = (
    "Think step by step, and then put your answer in **bold** as a list of three words, yes or no "
    "(for example, **yes, no, yes**). If you don't know, guess."
)
# LiveBench's LCB_generation turn for a standard-input question (no starter code).
LCB_GENERATION_TURN = (
    "### Instructions: You are an expert Python programmer. You will be given a question (problem "
    "specification) and will generate a correct Python program that matches the specification and "
    "passes all tests.\n\n"
    "### Question:\n{question_content}\n\n"
    "### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not "
    "directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure that "
    "when the python program runs, it reads the inputs, runs the algorithm and writes output to STDOUT."
    "\n```python\n# YOUR CODE HERE\n```\n\n"
    "### Answer: (use the provided format with backticks)\n\n"
)


def option_lines(options: list[str] | tuple[str, ...], letters: str) -> str:
    """The option block of a multiple-choice prompt: one ``X. text`` line per option."""
    return "\n".join(
        OPTION_LINE.format(letter=letter, text=text) for letter, text in zip(letters, options, strict=True)
    )
