"""What the toy-model benchmarks share: the ``--architecture``/``--spec`` options and the toy spec.

Imported by ``bench_prior_pass.py`` and ``bench_train_step.py`` (this folder is on ``sys.path``
when they run; they put the repository root there before importing this).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from workflow_scripts.families import ARCHITECTURES
from workflow_scripts.modeling.toy import ToyModelSpec
from workflow_scripts.registry import toy_model_sizes


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--architecture`` (one router family or all) and ``--spec`` (toy size overrides)."""
    parser.add_argument(
        "--architecture", choices=(*ARCHITECTURES, "all"), default="all", help="router family (default all)"
    )
    parser.add_argument(
        "--spec", type=json.loads, default={}, help="ToyModelSpec fields overriding the toy sizes (JSON)"
    )


def architectures(choice: str) -> tuple[str, ...]:
    """The router families an ``--architecture`` value names."""
    return ARCHITECTURES if choice == "all" else (choice,)


def toy_spec(config: dict[str, Any], architecture: str, overrides: dict[str, Any]) -> ToyModelSpec:
    """The toy spec of the registry model of ``architecture``, as the toy base rule builds it."""
    model = next(m for m in config["models"].values() if m["architecture"] == architecture)
    return ToyModelSpec.from_dict({**toy_model_sizes(model), **overrides})
