"""Routing-retention metrics at the three levels of §2 plus the base-router probe statistics.

Implements community NMI (Appendix F.10), per-expert marginal shift (TVD, JSD) and token-level
top-k overlap (§2), routing sharpness and cross-domain divergence (Appendix D.2), and the
effective expert fraction and domain-centroid cosine of Table 11 of the paper.

Distribution-valued functions work along the last axis: a 1-D input gives a float, a batched
(..., E) input gives an array of per-row values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .graphs import check_topk

__all__ = [
    "centroid_cosine",
    "community_nmi",
    "cross_domain_l1",
    "effective_expert_fraction",
    "expert_marginals",
    "jsd",
    "layer_mean_effective_fraction",
    "layer_mean_nmi",
    "sharpness",
    "topk_overlap",
    "tvd",
]

_MASS_TOL = 1e-6


def _scalar_or_array(x: np.ndarray) -> float | np.ndarray:
    return float(x) if np.ndim(x) == 0 else x


def _check_distribution(p: np.ndarray, name: str = "p") -> np.ndarray:
    """Validate (..., E) probability vectors (finite, non-negative, unit mass along the last axis)."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim < 1 or p.shape[-1] == 0:
        raise ValueError(f"{name} must have shape (..., E) with E >= 1, got {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError(f"{name} must be finite and non-negative")
    # Unnormalised counts passed by mistake would silently rescale every distance.
    if not np.allclose(p.sum(axis=-1), 1.0, rtol=0.0, atol=_MASS_TOL):
        raise ValueError(f"{name} must sum to 1 along its last axis")
    return p


def _entropy_from_counts(counts: np.ndarray) -> float:
    """Shannon entropy (nats) of the empirical distribution given by positive counts."""
    prob = counts / counts.sum()
    return float(-np.sum(prob * np.log(prob)))


def community_nmi(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised mutual information between two partitions of the same experts.

    Implements Appendix F.10 of the paper: ``NMI = 2 I(a; b) / (H(a) + H(b))`` (the arithmetic
    normalisation; the log base cancels). Convention: when both partitions are a single
    community, H(a) = H(b) = 0 and NMI is defined as 1 (identical trivial partitions); when only
    one is trivial, I = 0 and NMI = 0.

    Args:
        a: (E,) community labels (any hashable integer ids).
        b: (E,) community labels over the same experts.
    """
    a = np.asarray(a).reshape(-1)
    b = np.asarray(b).reshape(-1)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"partitions must be non-empty and of equal length, got {a.shape} and {b.shape}")
    _, ia = np.unique(a, return_inverse=True)
    _, ib = np.unique(b, return_inverse=True)
    ia, ib = ia.reshape(-1), ib.reshape(-1)
    n_a, n_b = ia.max() + 1, ib.max() + 1
    if n_a == 1 and n_b == 1:
        return 1.0
    joint = np.zeros((n_a, n_b))  # (Ca, Cb) contingency table
    np.add.at(joint, (ia, ib), 1.0)
    n = a.size
    h_a = _entropy_from_counts(joint.sum(axis=1))
    h_b = _entropy_from_counts(joint.sum(axis=0))
    nz = joint > 0
    p_ab = joint[nz] / n
    outer = np.outer(joint.sum(axis=1), joint.sum(axis=0))[nz] / n**2
    mi = float(np.sum(p_ab * np.log(p_ab / outer)))
    # Clip tiny negative rounding residue, as the MI of identical partitions is exactly H.
    return float(np.clip(2.0 * max(mi, 0.0) / (h_a + h_b), 0.0, 1.0))


def layer_mean_nmi(list_a: Sequence[np.ndarray], list_b: Sequence[np.ndarray]) -> float:
    """Community NMI of a checkpoint: the unweighted mean of per-layer NMIs.

    Implements Appendix F.10 of the paper ("the unweighted layer mean across all MoE layers").
    """
    if len(list_a) != len(list_b) or len(list_a) == 0:
        raise ValueError("need the same, non-zero number of layers on both sides")
    return float(np.mean([community_nmi(a, b) for a, b in zip(list_a, list_b, strict=True)]))


def expert_marginals(topk: np.ndarray, num_experts: int) -> np.ndarray:
    """Fraction of token-slots routed to each expert, (..., N, k) -> (..., E).

    Implements the per-expert utilisation distribution p of §2 (compared by TVD/JSD) and
    Appendix D.2. Each row sums to 1; multiply by k for the per-token activation frequency.
    """
    arr = check_topk(topk, num_experts)
    lead, n_slots = arr.shape[:-2], arr.shape[-2] * arr.shape[-1]
    flat = arr.reshape(-1, n_slots)  # (B, N*k)
    # Offset each batch row into its own id range so one bincount serves all layers.
    offsets = (np.arange(flat.shape[0]) * num_experts)[:, None]  # (B, 1)
    counts = np.bincount((flat + offsets).ravel(), minlength=flat.shape[0] * num_experts)
    return (counts.reshape(*lead, num_experts) / n_slots).astype(np.float64)


def tvd(p: np.ndarray, q: np.ndarray) -> float | np.ndarray:
    """Total variation distance 0.5 * ||p - q||_1 along the last axis.

    Implements the TVD marginal-shift metric of §2 of the paper; range [0, 1].
    """
    p = _check_distribution(p, "p")
    q = _check_distribution(q, "q")
    return _scalar_or_array(0.5 * np.abs(p - q).sum(axis=-1))


def jsd(p: np.ndarray, q: np.ndarray, base: float = 2.0) -> float | np.ndarray:
    """Jensen-Shannon divergence along the last axis, in log base ``base`` (default 2, bits).

    Implements the JSD marginal-shift metric of §2 of the paper:
    ``JSD = 0.5 KL(p || m) + 0.5 KL(q || m)`` with ``m = (p + q) / 2`` and ``0 log 0 = 0``.
    With base 2 it lies in [0, 1]; it is the square of ``scipy.spatial.distance.jensenshannon``.
    """
    p = _check_distribution(p, "p")
    q = _check_distribution(q, "q")
    m = 0.5 * (p + q)

    def _kl(x: np.ndarray) -> np.ndarray:
        # Where x == 0 the term is 0; where x > 0, m >= x/2 > 0, so the ratio is well defined.
        ratio = np.divide(x, m, out=np.ones_like(x), where=x > 0)
        return np.sum(x * np.log(ratio), axis=-1)

    out = (0.5 * _kl(p) + 0.5 * _kl(q)) / np.log(base)
    return _scalar_or_array(np.maximum(out, 0.0))


def topk_overlap(topk_a: np.ndarray, topk_b: np.ndarray, k: int | None = None) -> float:
    """Mean over tokens (and layers) of |A_t ∩ B_t| / k for two routers' top-k sets.

    Implements the token-level top-k overlap of §2 of the paper ("intersection size ... normalized
    by k and averaged over tokens and layers"). Inputs are (..., N, k) aligned token-for-token; the
    mean runs over every leading position, which is the layer mean when layers share N.

    Args:
        topk_a: (..., N, k) expert ids, distinct within a row (e.g. base router).
        topk_b: (..., N, k) expert ids, same shape (e.g. post-trained router).
        k: normaliser; defaults to the row width and must not be smaller than it.
    """
    a = np.asarray(topk_a)
    b = np.asarray(topk_b)
    if a.shape != b.shape:
        raise ValueError(f"top-k arrays must have equal shapes, got {a.shape} and {b.shape}")
    width = a.shape[-1]
    k = width if k is None else int(k)
    if k < width:
        raise ValueError(f"k={k} is smaller than the top-k width {width}")
    n_ids = int(max(a.max(), b.max())) + 1
    a = check_topk(a, n_ids)
    b = check_topk(b, n_ids)
    # Rows are sets of distinct ids, so counting members of A that occur anywhere in B is |A ∩ B|.
    hits = (a[..., :, None] == b[..., None, :]).any(axis=-1)  # (..., N, k)
    return float(hits.sum(axis=-1).mean() / k)


def sharpness(p: np.ndarray) -> float | np.ndarray:
    """Routing sharpness ||p - U||_1 along the last axis, U uniform over the E routed experts.

    Implements statistic (i) of Appendix D.2 of the paper. D.2 evaluates it on the
    layer-averaged distribution, so pass ``p.mean(axis=0)`` for an (L, E) stack; a batched input
    returns one value per row instead. Range [0, 2 - 2/E].
    """
    p = _check_distribution(p)
    return _scalar_or_array(np.abs(p - 1.0 / p.shape[-1]).sum(axis=-1))


def cross_domain_l1(p_math: np.ndarray, p_code: np.ndarray) -> float | np.ndarray:
    """Cross-domain divergence ||p_math - p_code||_1 along the last axis.

    Implements statistic (ii) of Appendix D.2 of the paper; as for `sharpness`, D.2 uses the
    layer-averaged distributions (pass ``p.mean(axis=0)``). Range [0, 2].
    """
    p_math = _check_distribution(p_math, "p_math")
    p_code = _check_distribution(p_code, "p_code")
    return _scalar_or_array(np.abs(p_math - p_code).sum(axis=-1))


def effective_expert_fraction(p: np.ndarray) -> float | np.ndarray:
    """Effective expert fraction exp(H(p)) / E along the last axis, H in nats.

    The per-layer term of Table 11's statistic (see `layer_mean_effective_fraction`), H the
    entropy of the mean top-k activation frequency over the E routed experts. Each row is
    renormalised to unit mass first, so P_topk (rows summing to k) and expert marginals (rows
    summing to 1) give the same value (the exp(H) "perplexity" is base-independent anyway).
    Range [1/E, 1].
    """
    p = np.asarray(p, dtype=np.float64)
    if p.ndim < 1 or not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError("p must be a finite, non-negative (..., E) array")
    mass = p.sum(axis=-1, keepdims=True)
    if np.any(mass <= 0):
        raise ValueError("p must have positive mass along its last axis")
    prob = p / mass
    logp = np.log(prob, out=np.zeros_like(prob), where=prob > 0)  # 0 log 0 = 0
    entropy = -np.sum(prob * logp, axis=-1)
    return _scalar_or_array(np.exp(entropy) / p.shape[-1])


def layer_mean_effective_fraction(p_topk: np.ndarray) -> float:
    """Table 11's effective expert fraction: exp(H_l)/E of each MoE layer l, averaged over layers.

    Each layer's row of ``p_topk``, shape (L, E), is its mean top-k activation frequency,
    normalised to a distribution before its entropy H_l is taken. The layer mean comes after
    exp(H)/E, not before: averaging the distributions first flattens them, so at D.2's
    layer-averaged sharpness (0.54 on Moonlight) the value could not fall to the 0.20-0.28
    that Table 11 prints.
    """
    p_topk = np.asarray(p_topk, dtype=np.float64)
    if p_topk.ndim != 2:
        raise ValueError(f"p_topk must have shape (L, E), got {p_topk.shape}")
    return float(np.mean(effective_expert_fraction(p_topk)))


def centroid_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity between the centroids of two domains' routing-frequency vectors.

    Implements the Table 11 statistic of the paper: each domain's P_topk vectors, shape
    (..., E) (e.g. (samples, layers, E)), are averaged over every leading axis into an (E,)
    centroid, and the cosine of the two centroids is returned (lower = stronger separation).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim < 1 or b.ndim < 1 or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"inputs must share the expert axis, got {a.shape} and {b.shape}")
    ca = a.reshape(-1, a.shape[-1]).mean(axis=0)  # (E,)
    cb = b.reshape(-1, b.shape[-1]).mean(axis=0)  # (E,)
    denom = np.linalg.norm(ca) * np.linalg.norm(cb)
    if denom == 0:
        raise ValueError("cosine similarity is undefined for a zero centroid")
    return float(ca @ cb / denom)


def gate_topk_agreement(topk: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, how far the experts a router selected are the top-k of ``probs``.

    The prior's gate is the softmax of the router logits for every family (eq. (2)); Moonlight's
    router selects by sigmoid scores plus a correction bias within the best expert groups, so its
    selection need not be that gate's top-k. An expert counts as inside the gate's top-k when its
    probability is at least the k-th largest (ties at the cut count in: ``probs`` is stored in
    float16). Softmax routers with a plain top-k agree on every token by construction.

    Args:
        topk: ``(L, N, k)`` the experts selected per layer and token.
        probs: ``(L, N, E)`` the gate's probabilities for the same tokens.

    Returns:
        ``(equal, overlap)``, each ``(L,)``: the fraction of tokens whose k selected experts are a
        top-k of ``probs``, and the mean fraction of selected experts inside it.
    """
    if topk.ndim != 3 or probs.ndim != 3 or topk.shape[:2] != probs.shape[:2] or topk.shape[1] == 0:
        raise ValueError(
            f"topk (L, N, k) and probs (L, N, E) must share L and N > 0, got {topk.shape}, {probs.shape}"
        )
    k = topk.shape[-1]
    values = probs.astype(np.float64)
    kth = -np.partition(-values, k - 1, axis=-1)[..., k - 1]  # (L, N), the k-th largest
    chosen = np.take_along_axis(values, topk.astype(np.int64), axis=-1)  # (L, N, k)
    inside = chosen >= kth[..., None]  # (L, N, k)
    return inside.all(axis=-1).mean(axis=-1), inside.mean(axis=(1, 2))
