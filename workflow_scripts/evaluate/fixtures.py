"""Bundled benchmark rows, in each benchmark's real raw hub schema, for tests and as toy-row templates.

``fixtures/<benchmark>.jsonl`` holds a handful of simple rows with correct gold
answers; read through ``normalise`` they give the same items a hub download would,
so the tests exercise the real schema path without network access. The toy
benchmarks (``toy_benchmarks``) take their columns and task-free fields from them.
"""

from __future__ import annotations

import json
from importlib import resources

import pandas as pd

from workflow_scripts.errors import UserInputError

FIXTURE_PACKAGE = "workflow_scripts.evaluate"
FIXTURE_FOLDER = "fixtures"


def available_fixtures() -> list[str]:
    """Benchmark ids that have a bundled fixture."""
    folder = resources.files(FIXTURE_PACKAGE) / FIXTURE_FOLDER
    return sorted(
        entry.name.removesuffix(".jsonl") for entry in folder.iterdir() if entry.name.endswith(".jsonl")
    )


def read_fixture(benchmark: str) -> pd.DataFrame:
    """The bundled raw rows of ``benchmark`` as a frame, columns as in the hub schema, in file order.

    Rows are read with ``json`` rather than ``pd.read_json`` so that no value is
    coerced (numeric-looking strings stay strings, lists stay lists).
    """
    resource = resources.files(FIXTURE_PACKAGE) / FIXTURE_FOLDER / f"{benchmark}.jsonl"
    if not resource.is_file():
        raise UserInputError(
            f"no bundled fixture for benchmark '{benchmark}'; available: {available_fixtures()}"
        )
    rows = []
    for number, line in enumerate(resource.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserInputError(
                f"fixture {benchmark}.jsonl line {number}: not valid JSON ({error})"
            ) from error
        if not isinstance(row, dict):
            raise UserInputError(f"fixture {benchmark}.jsonl line {number}: expected a JSON object")
        rows.append(row)
    if not rows:
        raise UserInputError(f"fixture {benchmark}.jsonl has no rows")
    return pd.DataFrame.from_records(rows)
