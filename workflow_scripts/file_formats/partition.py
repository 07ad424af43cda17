"""A partition file: a base checkpoint's expert communities per layer, as ``probe partition`` writes it.

The priors' shuffled controls permute within its communities, the retention stage's null model
draws from them, and the figures colour by them; each reads it through ``load_partition_labels``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from workflow_scripts.errors import UserInputError


def load_partition_labels(path: str | os.PathLike[str], option: str = "--partition") -> np.ndarray:
    """The (L, E) community labels of a partition file; malformed content is refused naming it."""
    try:
        labels = json.loads(Path(path).read_text())["labels"]
    except json.JSONDecodeError as error:
        raise UserInputError(f"{option} {path}: not a partition file (invalid JSON: {error})") from None
    except (KeyError, TypeError):
        raise UserInputError(f"{option} {path}: not a partition file (no 'labels' list)") from None
    array = np.asarray(labels)
    if array.ndim != 2 or array.size == 0 or not np.issubdtype(array.dtype, np.integer):
        raise UserInputError(
            f"{option} {path}: 'labels' must be a non-empty (layers, experts) table of integers, "
            f"not shape {array.shape} of {array.dtype}"
        )
    return array
