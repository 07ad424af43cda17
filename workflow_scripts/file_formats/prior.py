"""A prior file and its records: the checks a reader runs before it trusts one, and how to open it.

The priors stage writes a prior ``.npy`` ``(N, 2, L, E)`` with its ``meta.json``; training and the
report read it. A reader checks the file against the checksums its records hold (the meta for the
base prior, ``prior_validation.json`` for a shuffled one) and the meta against its own split, model
and chat template, so a prior edited, replaced or built for another run is refused.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from workflow_scripts.errors import UserInputError


def template_sha256(chat_template: str | None) -> str | None:
    """SHA-256 of a chat template's text (``None`` for a tokenizer without one)."""
    if chat_template is None:
        return None
    return hashlib.sha256(chat_template.encode("utf-8")).hexdigest()


#: ``prior_validation.json["files"]`` key of each shuffled prior kind (the registry's ``prior``).
SHUFFLE_SCOPES = {"shuffled_within": "within", "shuffled_global": "global"}


def check_prior_file(
    meta: Mapping[str, Any],
    prior_path: str | os.PathLike[str],
    kind: str | None = None,
    shuffle_record: Mapping[str, Any] | None = None,
) -> str:
    """Raise ``UserInputError`` unless ``prior_path`` holds exactly the bytes its records name.

    The base prior must have the sha256 that ``meta["prior"]`` recorded when it was written.
    A shuffled prior (``kind`` ``shuffled_within`` / ``shuffled_global``, or any prior that is
    not the base one when ``kind`` is ``None``) must have the sha256 that the shuffle recorded
    for it in ``shuffle_record["files"]`` (``prior_validation.json``), and that record's
    ``source`` must be this meta's prior, so the chain split/model/template -> prior ->
    shuffled prior is closed. Checksums, not paths, are compared (moved files still match).

    Returns:
        The kind the file was recognised as: ``"base"``, ``"shuffled_within"`` or
        ``"shuffled_global"``.
    """
    from workflow_scripts.records import file_sha256

    recorded = (meta.get("prior") or {}).get("sha256")
    if recorded is None:
        raise UserInputError(
            f"prior meta.json lacks the checksum of the prior file ('prior.sha256'); recompute the "
            f"prior ({prior_path})"
        )
    actual = file_sha256(Path(prior_path))
    if kind not in (None, "base", *SHUFFLE_SCOPES):
        raise UserInputError(f"unknown prior kind {kind!r}; known: base, {', '.join(SHUFFLE_SCOPES)}")
    if kind in (None, "base") and actual == recorded:
        return "base"
    if kind == "base":
        raise UserInputError(
            f"prior file {prior_path} has sha256 {actual}, but its meta.json records sha256 {recorded} "
            f"({meta['prior'].get('path')}): the file was modified or replaced after the meta was "
            "written; recompute the prior"
        )
    if shuffle_record is None:
        raise UserInputError(
            f"prior file {prior_path} (sha256 {actual}) is not the prior its meta.json records "
            f"(sha256 {recorded}) and no shuffle record (prior_validation.json) names it: a shuffled "
            "prior needs the record of its shuffle, any other file was modified after its meta was written"
        )
    files = shuffle_record.get("files") or {}
    source = (files.get("source") or {}).get("sha256")
    if source != recorded:
        raise UserInputError(
            f"the shuffle record was made from a prior with sha256 {source}, not the prior of this "
            f"meta.json (sha256 {recorded}); rerun the shuffle"
        )
    scopes = {kind: SHUFFLE_SCOPES[kind]} if kind is not None else SHUFFLE_SCOPES
    for name, scope in scopes.items():
        if (files.get(scope) or {}).get("sha256") == actual:
            return name
    expected = {scope: (files.get(scope) or {}).get("sha256") for scope in scopes.values()}
    raise UserInputError(
        f"prior file {prior_path} has sha256 {actual}, but the shuffle record names {expected}: the "
        "file was modified or replaced after the shuffle wrote it; rerun the shuffle"
    )


def check_prior_matches(
    meta: Mapping[str, Any],
    split_path: str | os.PathLike[str],
    model_dir: str | os.PathLike[str],
    chat_template: str | None,
    split_sha256: str | None = None,
    model_sha256: str | None = None,
) -> None:
    """Raise ``UserInputError`` unless a prior's meta matches this split, model and chat template.

    Compares checksums (not paths, so moved files still match): the split parquet's
    sha256, the model directory's ``path_digest`` sha256 and the chat template's sha256.
    The message names every input that differs. ``split_sha256``/``model_sha256``: those
    checksums when the caller has taken them already (a model directory is tens of GB).
    """
    from workflow_scripts.records import file_sha256, path_digest

    missing = [k for k in ("split", "model", "chat_template_sha256") if k not in meta]
    if missing:
        raise UserInputError(f"prior meta.json lacks {missing}; recompute the prior")
    recorded_split = meta["split"].get("sha256")
    recorded_model = meta["model"].get("sha256")
    differences = []
    split_sha = split_sha256 or file_sha256(Path(split_path))
    if split_sha != recorded_split:
        differences.append(
            f"split (prior built from {meta['split'].get('path')} sha256 {recorded_split}, "
            f"given {split_path} sha256 {split_sha})"
        )
    model_sha = model_sha256 or path_digest(model_dir).get("sha256")
    if model_sha != recorded_model:
        differences.append(
            f"model (prior built from {meta['model'].get('path')} sha256 {recorded_model}, "
            f"given {model_dir} sha256 {model_sha})"
        )
    template_sha = template_sha256(chat_template)
    if template_sha != meta["chat_template_sha256"]:
        differences.append(
            f"chat template (prior built with sha256 {meta['chat_template_sha256']}, given {template_sha})"
        )
    if differences:
        raise UserInputError("the prior does not belong to this run: " + "; ".join(differences))


def load_prior(path: str | os.PathLike[str]) -> np.memmap:
    """Open a prior ``.npy`` read-only, memory-mapped; checks it is ``(N, 2, L, E)``.

    ``open_memmap`` reads only the ``.npy`` format (``np.load`` would unpickle or open a
    zip); a file it cannot map (bad header, truncated data) is an error naming it.
    """
    try:
        prior = np.lib.format.open_memmap(path, mode="r")
    except (OSError, ValueError) as error:
        raise UserInputError(f"{path}: not a readable prior .npy ({error})") from error
    if prior.ndim != 4 or prior.shape[1] != 2:
        raise UserInputError(f"{path}: expected a prior of shape (N, 2, L, E), got {prior.shape}")
    return prior
