"""The transformers gate override (soft / hard RPB) against the stock gates of three MoE families.

Tiny randomly initialised models are built from config classes (no downloads). Router
weights are scaled up from the default init so that routing is far from uniform and the
selections are not decided by rounding noise.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from workflow_scripts.routing.core import clipped_log_prior  # noqa: E402
from workflow_scripts.routing.hf import (  # noqa: E402
    RouterRecorder,
    RoutingContext,
    attach,
    detach,
    find_gates,
    gate_architecture,
)

ARCHS = ["deepseek_v3", "deepseek_v2", "deepseek_v2_grouped", "qwen3_moe"]
VOCAB = 256
HIDDEN = 64
BATCH, SEQ = 2, 12
MOE_LAYERS = [1, 2]  # decoder layer 0 is dense in every model below

_COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=HIDDEN,
    intermediate_size=128,
    moe_intermediate_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=64,
    num_experts_per_tok=4,
)
_MLA = dict(
    q_lora_rank=None,
    kv_lora_rank=16,
    qk_rope_head_dim=8,
    qk_nope_head_dim=8,
    v_head_dim=16,
    head_dim=8,
    n_shared_experts=1,
    first_k_dense_replace=1,
)


def build_model(arch: str, seed: int = 0) -> nn.Module:
    """A tiny random MoE causal LM with non-trivial routers (and correction bias for V3)."""
    torch.manual_seed(seed)
    if arch == "deepseek_v3":
        config = transformers.DeepseekV3Config(
            **_COMMON, **_MLA, n_routed_experts=16, n_group=4, topk_group=2, routed_scaling_factor=2.5
        )
        model = transformers.DeepseekV3ForCausalLM(config)
    elif arch.startswith("deepseek_v2"):
        grouped = arch.endswith("grouped")
        config = transformers.DeepseekV2Config(
            **_COMMON,
            **_MLA,
            n_routed_experts=16,
            topk_method="group_limited_greedy" if grouped else "greedy",
            n_group=4 if grouped else None,
            topk_group=2 if grouped else None,
            routed_scaling_factor=1.5,
        )
        model = transformers.DeepseekV2ForCausalLM(config)
    else:
        config = transformers.Qwen3MoeConfig(
            **_COMMON, num_experts=8, mlp_only_layers=[0], norm_topk_prob=True, head_dim=16
        )
        model = transformers.Qwen3MoeForCausalLM(config)
    with torch.no_grad():
        for _, gate in find_gates(model):
            gate.weight.normal_(0.0, 0.5)
            if hasattr(gate, "e_score_correction_bias"):
                gate.e_score_correction_bias.uniform_(-0.1, 0.1)
    return model.eval()


def num_experts(model: nn.Module) -> int:
    return find_gates(model)[0][1].weight.shape[0]


def gate_input(gate: nn.Module, dtype: torch.dtype = torch.float32, seed: int = 1) -> torch.Tensor:
    """Random hidden states in the layout the architecture's MoE block hands its gate."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(BATCH, SEQ, HIDDEN, generator=generator).to(dtype)  # (B, T, H)
    if gate_architecture(gate) == "qwen3_moe":
        return hidden.reshape(BATCH * SEQ, HIDDEN)  # the Qwen3 block flattens before the gate
    return hidden


def stock(gate: nn.Module, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return type(gate).forward(gate, hidden)


def random_prior(num_exp: int, seed: int = 2) -> torch.Tensor:
    """A (B, 2, L, E) prior with distinct entries inside the clip range (clipping keeps its order)."""
    generator = torch.Generator().manual_seed(seed)
    raw = torch.rand(BATCH, 2, len(MOE_LAYERS), num_exp, generator=generator) + 0.5
    return raw / raw.sum(dim=-1, keepdim=True)


def span_ids() -> torch.Tensor:
    """(B, T) spans: template tokens (-1), a Q span, an A span, padding (-1)."""
    ids = torch.full((BATCH, SEQ), -1, dtype=torch.long)
    ids[0, 1:5] = 0
    ids[0, 5:10] = 1
    ids[1, 0:3] = 0
    ids[1, 3:12] = 1
    return ids


def routing_context(model: nn.Module, mode: str = "soft", beta: float = 0.0, **kwargs) -> RoutingContext:
    return RoutingContext.from_prior(
        random_prior(num_experts(model)), span_ids(), mode=mode, beta=beta, **kwargs
    )


def assert_same(actual: tuple[torch.Tensor, ...], expected: tuple[torch.Tensor, ...]) -> None:
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_find_gates_lists_moe_layers_in_order(arch):
    model = build_model(arch)
    gates = find_gates(model)
    assert [layer for layer, _ in gates] == MOE_LAYERS
    assert all(gate is model.model.layers[layer].mlp.gate for layer, gate in gates)


def test_find_gates_rejects_unsupported_models():
    with pytest.raises(TypeError, match="no supported MoE gate"):
        find_gates(nn.Sequential(nn.Linear(4, 4)))
    with pytest.raises(TypeError, match="not a supported MoE gate"):
        gate_architecture(nn.Linear(4, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", ARCHS)
def test_beta_zero_gate_is_bit_identical(arch, dtype):
    model = build_model(arch).to(dtype)
    for bias_in_weights in (True, False):
        context = routing_context(model, beta=0.0, bias_in_gate_weights=bias_in_weights)
        with attach(model, context):
            for _, gate in find_gates(model):
                hidden = gate_input(gate, dtype)
                assert_same(gate(hidden), stock(gate, hidden))
    empty = RoutingContext(mode="hard")  # no rows: stock routing in either mode
    with attach(model, empty):
        for _, gate in find_gates(model):
            hidden = gate_input(gate, dtype)
            assert_same(gate(hidden), stock(gate, hidden))


@pytest.mark.parametrize("arch", ARCHS)
def test_beta_zero_model_forward_is_bit_identical(arch):
    model = build_model(arch)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        plain = model(input_ids=ids, output_router_logits=True)
        with attach(model, routing_context(model, beta=0.0)):
            hooked = model(input_ids=ids, output_router_logits=True)
    assert torch.equal(hooked.logits, plain.logits)
    # transformers' own router-logit recorder still sees the gates (hooks matched by isinstance)
    assert len(hooked.router_logits) == len(MOE_LAYERS)
    for got, want in zip(hooked.router_logits, plain.router_logits, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("arch", ARCHS)
def test_detach_restores_the_stock_gate(arch):
    model = build_model(arch)
    keys = list(model.state_dict().keys())
    handle = attach(model, routing_context(model, beta=5.0))
    assert list(model.state_dict().keys()) == keys
    with pytest.raises(RuntimeError, match="already have a forward override"):
        attach(model, routing_context(model, beta=1.0))
    handle.detach()
    handle.detach()  # idempotent
    assert detach(model) == 0
    assert list(model.state_dict().keys()) == keys
    for _, gate in find_gates(model):
        assert "forward" not in vars(gate)
        assert gate.forward.__func__ is type(gate).forward
        hidden = gate_input(gate)
        assert_same(gate(hidden), stock(gate, hidden))
    # the module-level detach removes an attached override too
    attach(model, routing_context(model, beta=5.0))
    assert detach(model) == len(MOE_LAYERS)
    assert all("forward" not in vars(gate) for _, gate in find_gates(model))


@pytest.mark.parametrize("arch", ARCHS)
def test_soft_bias_pulls_span_tokens_to_the_prior(arch):
    model = build_model(arch)
    num_exp = num_experts(model)
    prior = torch.zeros(BATCH, 2, len(MOE_LAYERS), num_exp)
    prior[..., 3] = 1.0  # all mass on expert 3
    spans = span_ids()
    in_span = (spans >= 0).reshape(-1)
    for bias_in_weights in (True, False):
        context = RoutingContext.from_prior(
            prior, spans, mode="soft", beta=50.0, bias_in_gate_weights=bias_in_weights
        )
        with attach(model, context):
            for _, gate in find_gates(model):
                hidden = gate_input(gate)
                logits, weights, indices = gate(hidden)
                ref_logits, ref_weights, ref_indices = stock(gate, hidden)
                assert torch.equal(logits, ref_logits)  # unbiased logits come back
                assert (indices[in_span] == 3).any(dim=-1).all()
                assert not (ref_indices[in_span] == 3).any(dim=-1).all()  # the stock gate disagrees
                assert torch.equal(indices[~in_span], ref_indices[~in_span])  # no-span tokens untouched
                assert torch.equal(weights[~in_span], ref_weights[~in_span])
                if not bias_in_weights:
                    expected = manual_weights(gate, hidden, indices)
                    torch.testing.assert_close(weights, expected)


def manual_weights(gate: nn.Module, hidden: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Gate weights of the UNMODIFIED router at ``indices``, computed by hand from ``gate.weight``."""
    logits = hidden.reshape(-1, HIDDEN).float() @ gate.weight.float().T  # (N, E)
    arch = gate_architecture(gate)
    if arch == "deepseek_v3":
        chosen = torch.sigmoid(logits).gather(1, indices)
        if gate.norm_topk_prob:
            chosen = chosen / chosen.sum(dim=-1, keepdim=True)
        return chosen * gate.routed_scaling_factor
    chosen = torch.softmax(logits, dim=-1).gather(1, indices)
    if arch == "deepseek_v2":
        return chosen * gate.routed_scaling_factor  # V2 never renormalises
    return chosen / chosen.sum(dim=-1, keepdim=True) if gate.norm_topk_prob else chosen


@pytest.mark.parametrize("arch", ARCHS)
def test_hard_mode_routes_span_tokens_through_the_prior_top_k(arch):
    model = build_model(arch)
    prior = random_prior(num_experts(model))
    spans = span_ids()
    flat_spans = spans.reshape(-1)
    in_span = flat_spans >= 0
    with attach(model, RoutingContext.from_prior(prior, spans, mode="hard")):
        for position, (_, gate) in enumerate(find_gates(model)):
            hidden = gate_input(gate)
            logits, weights, indices = gate(hidden)
            ref_logits, ref_weights, ref_indices = stock(gate, hidden)
            assert torch.equal(logits, ref_logits)
            assert indices.dtype == torch.int64 and weights.dtype == ref_weights.dtype
            sample = torch.arange(BATCH).repeat_interleave(SEQ)  # flat row b*T + t -> b
            for row in torch.nonzero(in_span).flatten().tolist():
                row_prior = prior[sample[row], flat_spans[row], position]  # (E,)
                expected = set(torch.topk(row_prior, gate.top_k).indices.tolist())
                assert set(indices[row].tolist()) == expected
            torch.testing.assert_close(weights, manual_weights(gate, hidden, indices))
            assert torch.equal(indices[~in_span], ref_indices[~in_span])
            assert torch.equal(weights[~in_span], ref_weights[~in_span])


def test_hard_rows_are_the_clipped_log_prior():
    prior = random_prior(8)
    context = RoutingContext.from_prior(prior, span_ids(), mode="hard")
    assert torch.equal(context.bias_rows, clipped_log_prior(prior))


@pytest.mark.parametrize("mode", ["soft", "hard"])
@pytest.mark.parametrize("arch", ARCHS)
def test_recorder_holds_unbiased_logits_and_gradients_reach_the_router(arch, mode):
    model = build_model(arch).train()
    context = routing_context(model, mode=mode, beta=2.0)
    gate_inputs: dict[int, torch.Tensor] = {}

    def keep_input(position):
        def hook(module, args, output):
            gate_inputs[position] = args[0].detach()

        return hook

    gates = find_gates(model)
    hooks = [gate.register_forward_hook(keep_input(i)) for i, (_, gate) in enumerate(gates)]
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(4))
    with attach(model, context):
        out = model(input_ids=ids)
    for hook in hooks:
        hook.remove()

    recorded = context.recorder.layer_logits()
    assert len(recorded) == len(MOE_LAYERS) == len(context.recorder.layer_indices())
    for position, (_, gate) in enumerate(gates):
        expected = F.linear(gate_inputs[position].reshape(-1, HIDDEN), gate.weight)
        assert recorded[position].shape == (BATCH * SEQ, gate.weight.shape[0])
        torch.testing.assert_close(recorded[position], expected)
        assert recorded[position].requires_grad

    model.zero_grad()
    out.logits.float().pow(2).mean().backward()  # a loss of the model output only
    for _, gate in gates:
        assert gate.weight.grad is not None
        assert gate.weight.grad.abs().sum() > 0


def test_context_validation_and_shape_errors():
    model = build_model("qwen3_moe")
    with pytest.raises(ValueError, match="mode must be one of"):
        RoutingContext(mode="medium")
    with pytest.raises(ValueError, match=r"\(B, 2, L, E\)"):
        RoutingContext(bias_rows=torch.zeros(2, 3, 2, 8), span_ids=span_ids())
    with pytest.raises(ValueError, match="span_ids"):
        RoutingContext(bias_rows=torch.zeros(BATCH, 2, 2, 8), span_ids=None)
    with pytest.raises(ValueError, match="MoE layers"):
        attach(model, RoutingContext(bias_rows=torch.zeros(BATCH, 2, 3, 8), span_ids=span_ids()))
    context = routing_context(model, beta=1.0, recorder=RouterRecorder())
    with attach(model, context):
        gate = find_gates(model)[0][1]
        with pytest.raises(ValueError, match="B\\*T"):
            gate(torch.randn(BATCH * SEQ + 1, HIDDEN))


# ------------------------------------------------ soft RPB at moderate beta vs an independent numpy gate


def _np_bias(prior: np.ndarray, eps: float = 0.05, cap: float = 5.0) -> np.ndarray:
    """eq. (3) in numpy: clamp to [eps/E, C/E], renormalise, log, subtract the expert mean."""
    num_exp = prior.shape[-1]
    c = np.clip(prior.astype(np.float64), eps / num_exp, cap / num_exp)
    log_c = np.log(c / c.sum(axis=-1, keepdims=True))
    return log_c - log_c.mean(axis=-1, keepdims=True)


def _np_softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_topk(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-scores, axis=-1, kind="stable")[:, :k]


def _np_group_keep(scores: np.ndarray, groups: int, keep: int, group_score) -> np.ndarray:
    """(N, E) mask of the experts in each token's ``keep`` best groups."""
    n, num_exp = scores.shape
    per_group = scores.reshape(n, groups, num_exp // groups)
    best = _np_topk(group_score(per_group), keep)  # (N, keep)
    mask = np.zeros((n, groups), dtype=bool)
    np.put_along_axis(mask, best, True, axis=1)
    return np.repeat(mask, num_exp // groups, axis=1)


def _np_soft_gate(arch, gate, hidden, prior, spans, layer, beta, bias_in_weights):
    """Reference soft-RPB gate: selection on z + beta*b, weights by the architecture's rule."""
    w = gate.weight.detach().double().numpy()
    x = hidden.reshape(-1, w.shape[1]).double().numpy()
    z = x @ w.T  # (N, E)
    flat = spans.reshape(-1).numpy()
    sample = np.repeat(np.arange(spans.shape[0]), spans.shape[1])
    bias = _np_bias(prior.numpy())[sample, np.clip(flat, 0, 1), layer]  # (N, E)
    bias[flat < 0] = 0.0  # no-span tokens: no bias
    biased = z + beta * bias
    weigh_from = biased if bias_in_weights else z
    k = gate.top_k
    if arch == "deepseek_v3":
        choice = 1.0 / (1.0 + np.exp(-biased)) + gate.e_score_correction_bias.double().numpy()
        top_two = lambda g: np.sort(g, axis=-1)[..., -2:].sum(axis=-1)  # noqa: E731
        choice = np.where(_np_group_keep(choice, gate.num_group, gate.topk_group, top_two), choice, -np.inf)
        idx = _np_topk(choice, k)
        weights = np.take_along_axis(1.0 / (1.0 + np.exp(-weigh_from)), idx, axis=1)
        if gate.norm_topk_prob:
            weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)
        return idx, weights * gate.routed_scaling_factor
    probs = _np_softmax(biased)
    if arch.startswith("deepseek_v2"):
        if gate.topk_method == "group_limited_greedy":
            keep = _np_group_keep(probs, gate.num_group, gate.topk_group, lambda g: g.max(axis=-1))
            probs = np.where(keep, probs, 0.0)
        idx = _np_topk(probs, k)
        return idx, np.take_along_axis(_np_softmax(weigh_from), idx, axis=1) * gate.routed_scaling_factor
    idx = _np_topk(probs, k)  # qwen3_moe
    weights = np.take_along_axis(_np_softmax(weigh_from), idx, axis=1)
    if gate.norm_topk_prob:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return idx, weights


def _dense(indices: np.ndarray, weights: np.ndarray, num_exp: int) -> np.ndarray:
    """(N, E) gate weights with zeros off the selection (order-free comparison of top-k outputs)."""
    out = np.zeros((indices.shape[0], num_exp))
    np.put_along_axis(out, indices, weights, axis=1)
    return out


@pytest.mark.parametrize("bias_in_weights", [False, True])
@pytest.mark.parametrize("beta", [0.5, 1.0])
@pytest.mark.parametrize("arch", ARCHS)
def test_soft_rpb_matches_numpy_reference(arch, beta, bias_in_weights):
    model = build_model(arch)
    num_exp = num_experts(model)
    rng = np.random.default_rng(3)
    prior = torch.from_numpy(rng.dirichlet(np.full(num_exp, 0.3), size=(BATCH, 2, len(MOE_LAYERS))))
    prior = prior.float()  # some entries fall outside [eps/E, C/E]: the clamp is exercised
    spans = span_ids()
    context = RoutingContext.from_prior(
        prior, spans, mode="soft", beta=beta, bias_in_gate_weights=bias_in_weights
    )
    changed = 0
    with attach(model, context), torch.no_grad():
        for layer, (_, gate) in enumerate(find_gates(model)):
            hidden = gate_input(gate)
            _, weights, indices = gate(hidden)
            ref_idx, ref_weights = _np_soft_gate(
                arch, gate, hidden, prior, spans, layer, beta, bias_in_weights
            )
            got = np.sort(indices.numpy(), axis=1)
            assert np.array_equal(got, np.sort(ref_idx, axis=1)), f"layer {layer}: selection differs"
            np.testing.assert_allclose(
                _dense(indices.numpy(), weights.double().numpy(), num_exp),
                _dense(ref_idx, ref_weights, num_exp),
                rtol=1e-5,
                atol=1e-6,
            )
            stock_idx = np.sort(stock(gate, hidden)[2].numpy(), axis=1)
            changed += int((got != stock_idx).any(axis=1).sum())
    assert changed > 0  # the bias moved some selections: the comparison is not the stock gate's
