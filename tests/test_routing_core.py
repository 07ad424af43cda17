"""Router math against independent numpy implementations, on random inputs with fixed seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from workflow_scripts.routing.core import (
    LOG_PRIOR_FLOOR,
    centered_logit_l2,
    clipped_log_prior,
    hard_topk_from_prior,
    kl_to_base,
    load_balancing_loss,
    prior_to_bias,
    router_l2,
    soft_bias_logits,
    span_bias_per_token,
    z_loss,
)

EPS, C = 0.05, 5.0


def random_prior(rng: np.random.Generator, shape: tuple[int, ...], zeros: bool = True) -> np.ndarray:
    """Peaked Dirichlet rows (some above C/E), optionally with exact zeros (below eps/E)."""
    prior = rng.dirichlet(np.full(shape[-1], 0.3), size=shape[:-1])
    if zeros:
        prior[rng.random(prior.shape) < 0.15] = 0.0
    return prior


def np_clipped_log(prior: np.ndarray, eps: float = EPS, c: float = C) -> np.ndarray:
    e = prior.shape[-1]
    clipped = np.minimum(np.maximum(prior, eps / e), c / e)
    clipped = clipped / clipped.sum(axis=-1, keepdims=True)
    return np.log(clipped)


def np_bias(prior: np.ndarray, eps: float = EPS, c: float = C) -> np.ndarray:
    log_c = np_clipped_log(prior, eps, c)
    return log_c - log_c.mean(axis=-1, keepdims=True)


def np_log_softmax(z: np.ndarray) -> np.ndarray:
    shifted = z - z.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def np_softmax(z: np.ndarray) -> np.ndarray:
    return np.exp(np_log_softmax(z))


def assert_grad_nonzero(tensor: torch.Tensor) -> None:
    assert tensor.grad is not None
    assert torch.isfinite(tensor.grad).all()
    assert tensor.grad.abs().sum() > 0


# ---------------------------------------------------------------- prior -> bias (eq. 3)


def test_prior_to_bias_matches_numpy_on_n_2_l_e_table():
    rng = np.random.default_rng(0)
    prior = random_prior(rng, (5, 2, 3, 16))
    e = prior.shape[-1]
    assert (prior > C / e).any() and (prior == 0).any(), "both clamps must be exercised"
    expected = np_bias(prior)

    bias64 = prior_to_bias(torch.from_numpy(prior))
    assert bias64.shape == (5, 2, 3, 16) and bias64.dtype == torch.float64
    np.testing.assert_allclose(bias64.numpy(), expected, rtol=0, atol=1e-12)

    bias32 = prior_to_bias(torch.from_numpy(prior).float())
    assert bias32.dtype == torch.float32
    np.testing.assert_allclose(bias32.numpy(), expected, rtol=0, atol=1e-5)
    assert torch.isfinite(bias32).all()
    assert bias32.mean(dim=-1).abs().max() < 1e-6


def test_prior_to_bias_zero_mean_and_finite_at_scale():
    rng = np.random.default_rng(1)
    prior = torch.from_numpy(random_prior(rng, (64, 2, 8, 64))).float()
    prior[..., :3] = 0.0
    bias = prior_to_bias(prior)
    assert torch.isfinite(bias).all()
    assert bias.mean(dim=-1).abs().max() < 1e-6


def test_prior_to_bias_of_uniform_prior_is_zero_and_bf16_is_widened():
    uniform = torch.full((2, 4, 8), 1 / 8, dtype=torch.bfloat16)
    bias = prior_to_bias(uniform)
    assert bias.dtype == torch.float32
    assert torch.equal(bias, torch.zeros_like(bias))


def test_clipped_log_prior_matches_numpy_and_custom_clip():
    rng = np.random.default_rng(2)
    prior = random_prior(rng, (7, 12))
    got = clipped_log_prior(torch.from_numpy(prior), clip_eps=0.2, clip_c=3.0).numpy()
    np.testing.assert_allclose(got, np_clipped_log(prior, 0.2, 3.0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.exp(got).sum(axis=-1), 1.0, atol=1e-12)
    with pytest.raises(ValueError):
        clipped_log_prior(torch.from_numpy(prior), clip_eps=0.0)


# ---------------------------------------------------------------- soft bias (eq. 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_soft_bias_beta_zero_is_bit_identical(dtype):
    torch.manual_seed(3)
    logits = torch.randn(9, 16).to(dtype)
    bias = torch.randn(9, 16)
    assert torch.equal(soft_bias_logits(logits, bias, 0.0), logits)
    assert torch.equal(soft_bias_logits(logits, bias[0], 0), logits)


def test_soft_bias_hand_example_row_and_per_token():
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]])
    row = torch.tensor([0.5, -0.25, -0.25])
    expected = torch.tensor([[1.25, 1.875, 2.875], [0.25, -1.125, 0.375]])  # z + 0.5 * b
    assert torch.allclose(soft_bias_logits(logits, row, 0.5), expected)
    per_token = torch.stack([row, torch.zeros(3)])
    expected_per_token = torch.tensor([[2.0, 1.5, 2.5], [0.0, -1.0, 0.5]])  # beta 2; second token no bias
    assert torch.allclose(soft_bias_logits(logits, per_token, 2.0), expected_per_token)


def test_soft_bias_keeps_logit_dtype_and_gradient():
    torch.manual_seed(4)
    logits = torch.randn(5, 8, dtype=torch.bfloat16, requires_grad=True)
    bias = torch.randn(8)
    out = soft_bias_logits(logits, bias, 1.0)
    assert out.dtype == torch.bfloat16
    expected = (logits.detach().float() + bias).to(torch.bfloat16)
    assert torch.equal(out.detach(), expected)
    out.float().pow(2).sum().backward()
    assert_grad_nonzero(logits)
    with pytest.raises(ValueError):
        soft_bias_logits(logits, torch.zeros(7), 1.0)


# ---------------------------------------------------------------- per-token span gather


def test_span_bias_per_token_gathers_span_rows_and_zeros_no_span():
    rows = torch.tensor([[1.0, -1.0, 0.0], [-2.0, 1.0, 1.0]])
    span_ids = torch.tensor([-1, 0, 0, 1, 1, -1])
    got = span_bias_per_token(rows, span_ids)
    q, a, none = [1.0, -1.0, 0.0], [-2.0, 1.0, 1.0], [0.0, 0.0, 0.0]
    expected = torch.tensor([none, q, q, a, a, none])
    assert torch.equal(got, expected)


def test_span_bias_per_token_batched_matches_numpy():
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(3, 2, 10))
    span_ids = rng.integers(-1, 2, size=(3, 17))
    got = span_bias_per_token(torch.from_numpy(rows), torch.from_numpy(span_ids)).numpy()
    expected = np.zeros((3, 17, 10))
    for b in range(3):
        for t in range(17):
            if span_ids[b, t] >= 0:
                expected[b, t] = rows[b, span_ids[b, t]]
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError):
        span_bias_per_token(torch.zeros(3, 10), torch.zeros(4, dtype=torch.long))


# ---------------------------------------------------------------- RPB-hard


@pytest.mark.parametrize("renormalize", [False, True])
def test_hard_topk_selects_prior_topk_with_router_weights(renormalize):
    rng = np.random.default_rng(6)
    num_tokens, num_experts, k = 11, 16, 4
    bias_rows = np_bias(random_prior(rng, (2, num_experts), zeros=False))
    span_ids = np.array([0] * 5 + [1] * 6)
    prior_bias = bias_rows[span_ids]  # (T, E)
    scores = np_softmax(rng.normal(size=(num_tokens, num_experts)))

    scores_t = torch.from_numpy(scores).requires_grad_(True)
    weights, indices = hard_topk_from_prior(torch.from_numpy(prior_bias), scores_t, k, renormalize)
    assert weights.shape == indices.shape == (num_tokens, k)

    expected_idx = np.argsort(-prior_bias, axis=-1, kind="stable")[:, :k]
    np.testing.assert_array_equal(indices.numpy(), expected_idx)
    assert (indices[:5] == indices[0]).all() and (indices[5:] == indices[5]).all(), "one expert set per span"
    expected_w = np.take_along_axis(scores, expected_idx, axis=-1)
    if renormalize:
        expected_w = expected_w / expected_w.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(weights.detach().numpy(), expected_w, rtol=0, atol=1e-12)

    (weights * torch.arange(1.0, k + 1, dtype=weights.dtype)).sum().backward()
    assert_grad_nonzero(scores_t)


def test_hard_topk_hand_example_four_experts():
    prior = torch.tensor([0.1, 0.5, 0.3, 0.1])  # one span row
    prior_bias = prior_to_bias(prior)  # order 1 > 2 > {0, 3}
    scores = torch.tensor([[0.4, 0.1, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25]])
    weights, indices = hard_topk_from_prior(prior_bias, scores, 2, renormalize=False)
    assert indices.tolist() == [[1, 2], [1, 2]]
    assert torch.allclose(weights, torch.tensor([[0.1, 0.2], [0.25, 0.25]]))
    weights, indices = hard_topk_from_prior(prior_bias, scores, 2, renormalize=True)
    assert torch.allclose(weights, torch.tensor([[1 / 3, 2 / 3], [0.5, 0.5]]))
    # Ties (experts 0 and 3 share the prior value) go to the lower expert index.
    _, indices = hard_topk_from_prior(prior_bias, scores, 3, renormalize=False)
    assert indices.tolist() == [[1, 2, 0], [1, 2, 0]]


def test_hard_topk_rejects_bad_k():
    with pytest.raises(ValueError):
        hard_topk_from_prior(torch.zeros(4), torch.zeros(2, 4), 5, renormalize=False)


# ---------------------------------------------------------------- KL-to-base and logit-L2 (§3.3)


def span_case(seed: int, num_tokens: int = 20, num_experts: int = 12):
    """Per-token priors gathered from a (2, E) table, logits, and span ids with no-span tokens."""
    rng = np.random.default_rng(seed)
    rows = random_prior(rng, (2, num_experts))
    span_ids = rng.integers(-1, 2, size=num_tokens)
    span_ids[:2] = [0, 1]
    prior = np.where(span_ids[:, None] >= 0, rows[np.clip(span_ids, 0, 1)], 0.0)
    logits = rng.normal(scale=2.0, size=(num_tokens, num_experts))
    return rows, span_ids, prior, logits


def np_kl(prior: np.ndarray, logits: np.ndarray, mask: np.ndarray) -> float:
    log_p = np_log_softmax(logits[mask])
    pi = prior[mask]
    try:
        from scipy.special import rel_entr
    except ImportError:
        safe = np.where(pi > 0, pi, 1.0)
        terms = np.where(pi > 0, pi * (np.log(safe) - log_p), 0.0)
    else:
        terms = rel_entr(pi, np.exp(log_p))
    return float(terms.sum(axis=-1).mean())


def test_kl_to_base_matches_reference_and_ignores_no_span_tokens():
    rows, span_ids, prior, logits = span_case(7)
    mask = span_ids >= 0
    assert (~mask).any() and (prior == 0).any()
    logits_t = torch.from_numpy(logits).requires_grad_(True)
    got = kl_to_base(torch.from_numpy(prior), logits_t, torch.from_numpy(mask))
    assert got.shape == ()
    assert got.item() == pytest.approx(np_kl(prior, logits, mask), rel=1e-10, abs=1e-12)
    got.backward()
    assert_grad_nonzero(logits_t)
    assert torch.all(logits_t.grad[torch.from_numpy(~mask)] == 0)

    # Whatever the no-span tokens hold (prior rows, even NaN, or logits), the loss is unchanged.
    prior_junk, logits_junk = prior.copy(), logits.copy()
    prior_junk[~mask] = np.nan
    logits_junk[~mask] = 1e3
    junk = kl_to_base(torch.from_numpy(prior_junk), torch.from_numpy(logits_junk), torch.from_numpy(mask))
    assert junk.item() == pytest.approx(got.item(), rel=1e-12)


def test_kl_to_base_float32_and_bf16_logits():
    _, span_ids, prior, logits = span_case(8)
    mask = torch.from_numpy(span_ids >= 0)
    ref = np_kl(prior, logits, span_ids >= 0)
    got32 = kl_to_base(torch.from_numpy(prior).float(), torch.from_numpy(logits).float(), mask)
    assert got32.dtype == torch.float32 and got32.item() == pytest.approx(ref, rel=1e-5)
    bf16 = torch.from_numpy(logits).to(torch.bfloat16)
    got_bf16 = kl_to_base(torch.from_numpy(prior).float(), bf16, mask)
    ref_bf16 = np_kl(prior, bf16.double().numpy(), span_ids >= 0)
    assert got_bf16.dtype == torch.float32 and got_bf16.item() == pytest.approx(ref_bf16, rel=1e-5)


def test_kl_to_base_is_zero_at_the_prior_and_with_no_span():
    prior = torch.tensor([[0.7, 0.2, 0.1, 0.0]])
    logits = torch.log(prior.clamp_min(1e-30))
    assert kl_to_base(prior, logits, torch.tensor([True])).item() == pytest.approx(0.0, abs=1e-6)
    logits = torch.randn(3, 4, requires_grad=True)
    none = kl_to_base(torch.rand(3, 4), logits, torch.zeros(3, dtype=torch.bool))
    assert none.item() == 0.0
    none.backward()  # still attached to the graph
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_centered_logit_l2_matches_numpy_and_ignores_no_span_tokens():
    _, span_ids, prior, logits = span_case(9)
    mask = span_ids >= 0
    z = logits[mask]
    log_pi = np.log(np.maximum(prior[mask], LOG_PRIOR_FLOOR))  # §3.3: the prior itself, not eq. (3)
    delta = (z - z.mean(axis=-1, keepdims=True)) - (log_pi - log_pi.mean(axis=-1, keepdims=True))
    expected = float((delta**2).sum(axis=-1).mean())

    logits_t = torch.from_numpy(logits).requires_grad_(True)
    got = centered_logit_l2(logits_t, torch.from_numpy(prior), torch.from_numpy(mask))
    assert torch.isfinite(got) and got.item() == pytest.approx(expected, rel=1e-10)
    got.backward()
    assert_grad_nonzero(logits_t)
    assert torch.all(logits_t.grad[torch.from_numpy(~mask)] == 0)

    prior_junk, logits_junk = prior.copy(), logits.copy()
    prior_junk[~mask] = np.nan
    logits_junk[~mask] = -50.0
    junk = centered_logit_l2(
        torch.from_numpy(logits_junk), torch.from_numpy(prior_junk), torch.from_numpy(mask)
    )
    assert junk.item() == pytest.approx(got.item(), rel=1e-12)


def test_centered_logit_l2_is_zero_at_centred_log_prior_plus_shift():
    rng = np.random.default_rng(10)
    prior = torch.from_numpy(random_prior(rng, (6, 8), zeros=False)).float()
    logits = prior.log() + 3.0  # a per-row shift is centred away
    got = centered_logit_l2(logits, prior, torch.ones(6, dtype=torch.bool))
    assert got.item() == pytest.approx(0.0, abs=1e-9)


def test_centered_logit_l2_targets_the_unclipped_prior_and_survives_zeros():
    """Entries the eq. (3) clip would move still count at their own value; an exact zero stays finite."""
    prior = torch.tensor([[0.001, 0.009, 0.49, 0.5], [0.0, 0.0, 0.5, 0.5]], dtype=torch.float64)
    logits = prior[:1].log()
    assert clipped_log_prior(prior[:1]).sub(logits).abs().max() > 1.0  # the clip changes this row
    got = centered_logit_l2(logits, prior[:1], torch.ones(1, dtype=torch.bool))
    assert got.item() == pytest.approx(0.0, abs=1e-12)
    assert torch.isfinite(
        centered_logit_l2(torch.zeros(2, 4), prior.float(), torch.ones(2, dtype=torch.bool))
    )


# ---------------------------------------------------------------- Router-L2 (eq. 5)


def test_router_l2_matches_numpy_and_has_gradient():
    rng = np.random.default_rng(11)
    base = [rng.normal(size=(8, 16)) for _ in range(3)]
    current = [b + rng.normal(scale=0.1, size=b.shape) for b in base]
    expected = np.mean([((w - b) ** 2).sum() for w, b in zip(current, base, strict=True)])

    weights = [torch.from_numpy(w).requires_grad_(True) for w in current]
    got = router_l2(weights, [torch.from_numpy(b) for b in base])
    assert got.item() == pytest.approx(expected, rel=1e-12)
    got.backward()
    for w in weights:
        assert_grad_nonzero(w)


def test_router_l2_bf16_inputs_give_fp32_result_of_bf16_values():
    torch.manual_seed(12)
    base = [torch.randn(4, 32).to(torch.bfloat16) for _ in range(2)]
    current = [(b.float() + 0.01 * torch.randn(4, 32)).to(torch.bfloat16) for b in base]
    expected = np.mean(
        [((w.double().numpy() - b.double().numpy()) ** 2).sum() for w, b in zip(current, base, strict=True)]
    )
    got = router_l2(current, base)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(expected, rel=1e-6)
    assert router_l2(base, base).item() == 0.0
    with pytest.raises(ValueError):
        router_l2(current, base[:1])


# ---------------------------------------------------------------- load balancing


def naive_lbl(probs: np.ndarray, indices: np.ndarray, num_experts: int, keep: np.ndarray | None = None):
    num_tokens, top_k = indices.shape
    keep = np.ones(num_tokens, dtype=bool) if keep is None else keep
    counts = np.zeros(num_experts)
    p_sum = np.zeros(num_experts)
    kept = 0
    for t in range(num_tokens):
        if not keep[t]:
            continue
        kept += 1
        for slot in range(top_k):
            counts[indices[t, slot]] += 1
        for e in range(num_experts):
            p_sum[e] += probs[t, e]
    loss = 0.0
    for e in range(num_experts):
        loss += (counts[e] / (kept * top_k)) * (p_sum[e] / kept)
    return num_experts * loss


def test_load_balancing_loss_matches_naive_loop_and_has_gradient():
    rng = np.random.default_rng(13)
    num_tokens, num_experts, k = 40, 8, 2
    logits = rng.normal(size=(num_tokens, num_experts))
    probs = np_softmax(logits)
    indices = np.argsort(-probs, axis=-1, kind="stable")[:, :k]

    logits_t = torch.from_numpy(logits).requires_grad_(True)
    got = load_balancing_loss(torch.softmax(logits_t, -1), torch.from_numpy(indices), num_experts, k)
    assert got.item() == pytest.approx(naive_lbl(probs, indices, num_experts), rel=1e-12)
    got.backward()
    assert_grad_nonzero(logits_t)

    keep = rng.random(num_tokens) < 0.6
    masked = load_balancing_loss(
        torch.from_numpy(probs), torch.from_numpy(indices), num_experts, k, token_mask=torch.from_numpy(keep)
    )
    assert masked.item() == pytest.approx(naive_lbl(probs, indices, num_experts, keep), rel=1e-12)


def test_load_balancing_loss_normalisation():
    num_experts, k = 4, 2
    # Perfect balance: uniform probabilities, every expert gets the same number of slots -> 1 for any k.
    probs = torch.full((4, num_experts), 0.25)
    indices = torch.tensor([[0, 1], [2, 3], [1, 0], [3, 2]])
    assert load_balancing_loss(probs, indices, num_experts, k).item() == pytest.approx(1.0)
    # transformers' load_balancing_loss_func (counts / T instead of / (T k)) is top_k times this value.
    rng = np.random.default_rng(14)
    p = np_softmax(rng.normal(size=(10, num_experts)))
    idx = np.argsort(-p, axis=-1, kind="stable")[:, :k]
    one_hot = np.eye(num_experts)[idx]  # (T, k, E)
    hf_style = num_experts * np.sum(one_hot.mean(axis=0) * p.mean(axis=0)[None, :])
    ours = load_balancing_loss(torch.from_numpy(p), torch.from_numpy(idx), num_experts, k).item()
    assert hf_style == pytest.approx(k * ours, rel=1e-12)
    with pytest.raises(ValueError):
        load_balancing_loss(torch.from_numpy(p), torch.from_numpy(idx), num_experts, 3)


# ---------------------------------------------------------------- z-loss


def test_z_loss_matches_numpy_logsumexp_and_has_gradient():
    rng = np.random.default_rng(15)
    logits = rng.normal(scale=3.0, size=(25, 16))
    m = logits.max(axis=-1)
    lse = m + np.log(np.exp(logits - m[:, None]).sum(axis=-1))
    logits_t = torch.from_numpy(logits).requires_grad_(True)
    got = z_loss(logits_t)
    assert got.item() == pytest.approx(float(np.mean(lse**2)), rel=1e-12)
    got.backward()
    assert_grad_nonzero(logits_t)

    keep = rng.random(25) < 0.5
    masked = z_loss(torch.from_numpy(logits), token_mask=torch.from_numpy(keep))
    assert masked.item() == pytest.approx(float(np.mean(lse[keep] ** 2)), rel=1e-12)


def test_z_loss_bf16_runs_in_fp32():
    logits = torch.tensor([[100.0, 100.0]], dtype=torch.bfloat16)
    got = z_loss(logits)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx((100.0 + math.log(2.0)) ** 2, rel=1e-6)
