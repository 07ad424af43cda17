"""Expert-identity shuffles of a routing prior: the within-community and global controls (§5.2.2, App. E).

A shuffle is one permutation of the ``E`` expert ids per MoE layer, ``(L, E)``: within-community
maps every expert to one of its own base community (a prior's mass on community C stays in C),
global scrambles all ``E``. Everything downstream uses one convention::

    shuffled[n, s, l, e] = prior[n, s, l, perms[l, e]]

so rows keep their multiset of values and still sum to one.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from workflow_scripts.atomic import atomic_path

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "apply_permutations",
    "check_permutations",
    "global_permutations",
    "permute_experts",
    "within_community_permutations",
]

# Rows per streamed chunk, as in ``priors.stats`` (a 1024 x 2 x 26 x 64 float32 chunk is 13 MiB).
DEFAULT_CHUNK_ROWS = 1024


def _layer_rng(seed: int, layer: int) -> np.random.Generator:
    """The generator of one layer's draw: ``PCG64([seed, layer])``.

    Layer ``l`` of a draw with seed ``seed`` uses
    ``numpy.random.Generator(PCG64([seed, l]))``, so each layer is reproducible on its own and
    independent of the number of layers and of the other layers' draws.
    """
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return np.random.Generator(np.random.PCG64([int(seed), int(layer)]))


def within_community_permutations(partition: np.ndarray, seed: int) -> np.ndarray:
    """Per-layer permutations that only move experts inside their own community.

    Implements the within-community shuffle of §5.2.2 / Appendix E (``perms`` = the shuffle
    of expert identities "inside each detected base community"). Communities are visited in
    ascending label order and each draws ``rng.permutation(members)``.

    Args:
        partition: ``(L, E)`` integer community labels of the base model, one row per layer.
        seed: non-negative permutation seed.

    Returns:
        ``(L, E)`` int64 ``perms`` with ``partition[l, perms[l, e]] == partition[l, e]``.
    """
    labels = np.asarray(partition)
    if labels.ndim != 2 or labels.shape[1] == 0:
        raise ValueError(f"partition must have shape (L, E), got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"partition must hold integer labels, got dtype {labels.dtype}")
    perms = np.tile(np.arange(labels.shape[1], dtype=np.int64), (labels.shape[0], 1))  # (L, E)
    for layer, row in enumerate(labels):
        rng = _layer_rng(seed, layer)
        for label in np.unique(row):
            members = np.flatnonzero(row == label)  # (|C|,), ascending expert ids
            perms[layer, members] = rng.permutation(members)
    return perms


def global_permutations(num_layers: int, num_experts: int, seed: int) -> np.ndarray:
    """Per-layer uniformly random permutations of all experts.

    Implements the global shuffle of §5.2.2 / Appendix E (expert identities permuted "across
    all communities"): ``perms[l]`` is ``rng.permutation(E)`` of the layer's generator.

    Returns:
        ``(L, E)`` int64 ``perms``.
    """
    if num_layers < 1 or num_experts < 1:
        raise ValueError(f"need positive num_layers and num_experts, got {num_layers}, {num_experts}")
    return np.stack([_layer_rng(seed, layer).permutation(num_experts) for layer in range(num_layers)]).astype(
        np.int64
    )  # (L, E)


def check_permutations(perms: np.ndarray, num_layers: int, num_experts: int) -> np.ndarray:
    """Validate ``(L, E)`` per-layer permutations (each row a bijection of ``range(E)``); return int64."""
    arr = np.asarray(perms)
    if arr.shape != (num_layers, num_experts):
        raise ValueError(f"perms must have shape {(num_layers, num_experts)}, got {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"perms must hold integer expert ids, got dtype {arr.dtype}")
    if not np.array_equal(np.sort(arr, axis=1), np.broadcast_to(np.arange(num_experts), arr.shape)):
        raise ValueError("every row of perms must be a permutation of range(E)")
    return arr.astype(np.int64, copy=False)


def permute_experts(values: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """Apply per-layer expert permutations to an in-memory ``(..., L, E)`` array.

    Implements ``shuffled[..., l, e] = values[..., l, perms[l, e]]`` (module convention) with
    one fancy-indexing gather; ``perms`` must already be validated.
    """
    layers = np.arange(perms.shape[0])[:, None]  # (L, 1)
    return values[..., layers, perms]  # (..., L, E)


def apply_permutations(
    prior: np.ndarray,
    perms: np.ndarray,
    out_path: str | os.PathLike[str],
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> Path:
    """Write the shuffled prior ``shuffled[n, s, l, e] = prior[n, s, l, perms[l, e]]`` to ``out_path``.

    Implements the shuffled prior tensors of Appendix E (``prior`` = ``pi_base`` of shape
    ``N x 2 x L x E``, ``perms`` = a within-community or global shuffle). Rows are streamed in
    chunks of ``chunk_rows`` into a memory-mapped temporary ``.npy`` next to ``out_path``, which
    is moved into place only when complete, so memory does not grow with ``N``. The output has
    the dtype of ``prior``; the bytes do not depend on ``chunk_rows``.

    Args:
        prior: ``(N, 2, L, E)`` prior, e.g. a ``load_prior`` memory map.
        perms: ``(L, E)`` per-layer permutations.
        out_path: the ``.npy`` to write.
        chunk_rows: rows per chunk.

    Returns:
        ``out_path`` as a ``Path``.
    """
    from numpy.lib.format import open_memmap

    if prior.ndim != 4 or prior.shape[1] != 2:
        raise ValueError(f"expected a prior of shape (N, 2, L, E), got {prior.shape}")
    if chunk_rows <= 0:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    perms = check_permutations(perms, prior.shape[2], prior.shape[3])
    with atomic_path(out_path) as tmp:
        out = open_memmap(tmp, mode="w+", dtype=prior.dtype, shape=prior.shape)
        for start in range(0, prior.shape[0], chunk_rows):
            chunk = np.asarray(prior[start : start + chunk_rows])  # (n, 2, L, E)
            out[start : start + chunk.shape[0]] = permute_experts(chunk, perms)
        out.flush()
        del out  # close the map before the file is moved into place
    return Path(out_path)
