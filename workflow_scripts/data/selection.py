"""Selection of the training split and the held-out probe pool from a scored frame.

Implements the reduction of Appendix F.2 ("every row is scored once, the top
20,000 are kept, and they are written back in source order") and the probing
pool of F.8 (~5,000 tokens per domain, disjoint from training). Disjoint means by
prompt text too: a row whose prompt the other side holds (another id, a second answer
to the same problem) is on neither side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.chat_sources.readers import text_column
from workflow_scripts.data.config import build
from workflow_scripts.data.scoring import DOMAINS, FENCED_BLOCK, char_length, contains
from workflow_scripts.errors import UserInputError

FILTERS = ("none", "fenced_code", "no_fenced_code")


@dataclass(frozen=True)
class CorpusSpec:
    """One corpus of config.yaml: how its rows are filtered, how many are kept, and its probe pool."""

    domain: str
    filter: str
    train_rows: int | None  # None: every eligible row not in the probe pool; 0: a probe-only pool
    probe_tokens: int  # estimated tokens to collect for the probe pool
    chars_per_token: float  # characters per token for that estimate
    probe_seed: int  # seed of the probe pool's hash order

    @classmethod
    def from_dict(cls, data: dict[str, Any], corpus: str) -> CorpusSpec:
        spec = build(cls, data, f"corpus '{corpus}'")
        if spec.domain not in DOMAINS:
            raise UserInputError(f"corpus '{corpus}': domain '{spec.domain}' is not one of {DOMAINS}")
        if spec.filter not in FILTERS:
            raise UserInputError(f"corpus '{corpus}': filter '{spec.filter}' is not one of {FILTERS}")
        if spec.train_rows is not None and spec.train_rows < 0:
            raise UserInputError(f"corpus '{corpus}': train_rows must be >= 0 or null")
        if spec.probe_tokens < 1 or spec.chars_per_token <= 0:
            raise UserInputError(f"corpus '{corpus}': probe_tokens and chars_per_token must be positive")
        return spec


@dataclass(frozen=True)
class Selection:
    """Boolean masks over the scored frame's rows (all in the frame's order)."""

    passes_filter: np.ndarray
    eligible: np.ndarray
    train: np.ndarray
    probe: np.ndarray
    tokens: np.ndarray  # estimated tokens per row
    shared_prompt: np.ndarray  # eligible rows on neither side: the other side holds their prompt


def passes_filter(answer: pd.Series, name: str) -> np.ndarray:
    """Corpus filter. ``fenced_code`` reads the FINAL completion (after the reasoning channel is
    removed), since that is the text the corpus trains on: a row whose only code sits in its
    reasoning would otherwise enter a coding corpus without any code in it. A fenced block needs
    both its opening and closing ```. ``no_fenced_code`` is its complement (e.g. a general pool)."""
    if name == "none":
        return np.ones(len(answer), dtype=bool)
    fenced = contains(text_column(answer), FENCED_BLOCK)
    return fenced if name == "fenced_code" else ~fenced


def stable_hash(row_id: np.ndarray, seed: int) -> np.ndarray:
    """SplitMix64 finaliser of ``row_id + seed x golden``: a fixed, platform-independent order.

    For a given seed this is a bijection on uint64, so distinct row ids never tie.
    """
    with np.errstate(over="ignore"):
        x = row_id.astype(np.uint64) + np.uint64(seed % 2**64) * np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _take_probe(
    candidates: np.ndarray, row_id: np.ndarray, tokens: np.ndarray, spec: CorpusSpec
) -> np.ndarray:
    """Candidates (indices) in hash order until their estimated tokens reach ``probe_tokens``."""
    order = candidates[np.argsort(stable_hash(row_id[candidates], spec.probe_seed), kind="stable")]
    cumulative = np.cumsum(tokens[order])
    count = min(int(np.searchsorted(cumulative, spec.probe_tokens, side="left")) + 1, len(order))
    return order[:count]


def select(scored: pd.DataFrame, spec: CorpusSpec, corpus: str) -> Selection:
    """Pick training and probe rows from a frame made by ``scoring.score_frame``.

    Eligible rows pass the corpus filter and carry no hard penalty. Training keeps the
    ``train_rows`` best by score (ties: lower ``row_id`` first); the probe pool takes eligible
    rows outside training. With ``train_rows`` null the probe pool is taken first and training
    is every other eligible row; with ``train_rows`` 0 there is no training split at all.
    The side taken second never takes a row whose prompt (the stripped text the splits hold)
    the first side holds: the probe pool is held out by problem, not only by row.
    """
    n_rows = len(scored)
    row_id = scored["row_id"].to_numpy(dtype=np.int64)
    tokens = (char_length(text_column(scored["prompt"])) + char_length(text_column(scored["answer"]))) / (
        spec.chars_per_token
    )
    filtered = passes_filter(scored["answer"], spec.filter)
    eligible = filtered & (scored["n_penalties"].to_numpy() == 0)
    eligible_at = np.flatnonzero(eligible)
    prompt = pd.factorize(scored["prompt"].astype(object))[0]  # one code per distinct prompt text
    train, probe = np.zeros(n_rows, dtype=bool), np.zeros(n_rows, dtype=bool)
    shared = np.zeros(n_rows, dtype=bool)

    if spec.train_rows is None:
        probe[_take_probe(eligible_at, row_id, tokens, spec)] = True
        shared = eligible & ~probe & np.isin(prompt, prompt[probe])
        train[eligible & ~probe & ~shared] = True
    elif spec.train_rows == 0:
        probe[_take_probe(eligible_at, row_id, tokens, spec)] = True
    else:
        if len(eligible_at) < spec.train_rows:
            raise UserInputError(
                f"corpus '{corpus}': train_rows is {spec.train_rows} "
                f"but only {len(eligible_at)} rows pass the filter without a penalty"
            )
        # lexsort's last key is primary: score descending, then row_id ascending.
        ranked = eligible_at[np.lexsort((row_id[eligible_at], -scored["score"].to_numpy()[eligible_at]))]
        train[ranked[: spec.train_rows]] = True
        shared = eligible & ~train & np.isin(prompt, prompt[train])
        probe[_take_probe(np.flatnonzero(eligible & ~train & ~shared), row_id, tokens, spec)] = True

    if not probe.any():
        raise UserInputError(f"corpus '{corpus}': no eligible row is left for the probe pool")
    if spec.train_rows != 0 and not train.any():
        raise UserInputError(f"corpus '{corpus}': no eligible row is left for training")
    return Selection(
        passes_filter=filtered,
        eligible=eligible,
        train=train,
        probe=probe,
        tokens=tokens,
        shared_prompt=shared,
    )
