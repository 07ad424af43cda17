"""The Megatron-Core router subclass against ``routing.core`` and the transformers adapter, every condition.

For each registry condition and each of the paper's three router families, a transformers
gate (the local backend: ``routing.hf`` + ``Objective``) and a Megatron-Core ``TopKRouter``
swapped to ``PriorBiasedRouter`` (configured by ``settings.router_settings``, the production
code) get identical router weights, tokens, prior rows and spans. Their routing map, gate
weights, every auxiliary loss value and the gradient of everything on the router weights
must agree to float tolerance. Runs on CPU in the Megatron-Core environment.
"""

from __future__ import annotations

import pytest

pytest.importorskip("megatron.core", reason="runs in the Megatron-Core environment (docs/training.md)")
pytestmark = pytest.mark.megatron

import torch  # noqa: E402
import yaml  # noqa: E402
from megatron.core.transformer.moe.moe_logging import get_moe_metrics_tracker  # noqa: E402
from megatron.core.transformer.moe.moe_utils import get_updated_expert_bias  # noqa: E402
from torch import nn  # noqa: E402

from tests.conftest import ROOT  # noqa: E402
from tests.dag import job_conditions  # noqa: E402
from tests.megatron_env import build_router, init_cpu_megatron  # noqa: E402
from tests.test_routing_hf import BATCH, SEQ, build_model, gate_input, random_prior, span_ids  # noqa: E402
from workflow_scripts.modeling.objective import Objective  # noqa: E402
from workflow_scripts.registry import MEGATRON_COMPUTED_TERMS, RouterTerm  # noqa: E402
from workflow_scripts.routing import core  # noqa: E402
from workflow_scripts.routing.hf import RoutingContext, attach, find_gates  # noqa: E402
from workflow_scripts.routing.megatron import (  # noqa: E402
    MEGATRON_NATIVE_TERMS,
    RouterAnchor,
    install,
    sequence_parallel_slice,
)
from workflow_scripts.train.megatron.settings import router_settings  # noqa: E402
from workflow_scripts.train.megatron.step import routing_context  # noqa: E402

ARCHS = ("deepseek_v3", "deepseek_v2", "qwen3_moe")
CONDITIONS = job_conditions(yaml.safe_load((ROOT / "config.yaml").read_text()))
RATE = 1e-3
# Megatron row n = t * B + b holds the transformers row b * T + t.
ORDER = torch.arange(BATCH * SEQ).reshape(BATCH, SEQ).T.reshape(-1)
#: ``(B, T)`` padding: the last two positions of every sequence, which the balancing and
#: z-loss means and the expert-bias counts leave out on both sides.
PADDING = torch.arange(SEQ)[None, :].expand(BATCH, -1) >= SEQ - 2


@pytest.fixture(scope="module", autouse=True)
def _megatron() -> None:
    init_cpu_megatron()


def architecture_fields(arch: str, gate: nn.Module) -> dict:
    """The router fields Megatron-Bridge's provider sets for each family (from the HF config)."""
    fields = {
        "hidden_size": gate.weight.shape[1],
        "num_moe_experts": gate.weight.shape[0],
        "moe_router_topk": gate.top_k,
    }
    if arch == "deepseek_v3":
        fields |= {
            "moe_router_score_function": "sigmoid",
            "moe_router_pre_softmax": True,
            "moe_router_num_groups": gate.num_group,
            "moe_router_group_topk": gate.topk_group,
            "moe_router_topk_scaling_factor": gate.routed_scaling_factor,
            "moe_router_enable_expert_bias": True,
        }
    elif arch == "deepseek_v2":
        fields |= {
            "moe_router_score_function": "softmax",
            "moe_router_pre_softmax": True,
            "moe_router_topk_scaling_factor": gate.routed_scaling_factor,
        }
    else:
        fields |= {"moe_router_score_function": "softmax", "moe_router_pre_softmax": False}
    return fields


def dense(weights: torch.Tensor, indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    return torch.zeros(weights.shape[0], num_experts).scatter(1, indices, weights.float())


def run_transformers(arch, objective, prior, spans, readout):
    """Local backend: weights (N, E) per layer, loss terms, gradient on each gate weight."""
    model = build_model(arch)
    gates = [gate for _, gate in find_gates(model)]
    for gate in gates:
        gate.weight.requires_grad_(True)
    context = RoutingContext(
        mode=objective.routing_mode or "soft",
        beta=objective.beta,
        bias_in_gate_weights=objective.bias_in_gate_weights,
    )
    if objective.routing_mode:
        context.set_prior(prior, spans, objective.clip_eps, objective.clip_c)
    else:
        context.set_batch(None, None)
    mixed, total = [], torch.zeros(())
    with attach(model, context):
        for layer, gate in enumerate(gates):
            _, weights, indices = gate(gate_input(gate, seed=layer + 1))
            mixed.append(dense(weights, indices, gate.weight.shape[0]))
            total = total + (mixed[-1] * readout[layer]).sum()
        logits, chosen = context.recorder.layer_logits(), context.recorder.layer_indices()
    mask = ~PADDING.reshape(-1)
    terms = objective.data_terms(arch, logits, chosen, mask, spans, prior)
    base = [gate.weight.detach().clone() + 0.01 * torch.randn_like(gate.weight) for gate in gates]
    terms |= objective.parameter_terms([gate.weight for gate in gates], base)
    coefficients = objective.coefficients()
    total = total + sum(coefficients[name] * value for name, value in terms.items())
    total.backward()
    loads = torch.stack(
        [torch.bincount(k[mask].reshape(-1), minlength=gates[0].weight.shape[0]) for k in chosen]
    )
    return {
        "gates": gates,
        "base": base,
        "mixed": [m.detach() for m in mixed],
        "terms": {name: float(value.detach()) for name, value in terms.items()},
        "grads": [gate.weight.grad.clone() for gate in gates],
        "loads": loads.float(),
    }


def run_megatron(arch, objective, prior, spans, readout, reference):
    """Cluster backend on the same weights: per-layer probs, routing map, tracked losses, gradients."""
    gates = reference["gates"]
    routers = []
    for layer, gate in enumerate(gates):
        fields = architecture_fields(arch, gate) | router_settings(objective)
        fields.pop("moe_router_bias_update_rate")  # applied by finalize_model_grads, checked below
        router = build_router(fields, layer_number=layer + 2)
        with torch.no_grad():
            router.weight.copy_(gate.weight)
            if router.expert_bias is not None:
                router.expert_bias.copy_(gate.e_score_correction_bias)
        routers.append(router)
    context = routing_context(objective, num_moe_layers=len(routers))
    install(nn.ModuleList(routers), context)
    if context.needs_prior:
        context.set_batch(prior, sequence_parallel_slice(spans, rank=0, world=1))
    get_moe_metrics_tracker().clear()
    total, probs_out, maps = torch.zeros(()), [], []
    for layer, (router, gate) in enumerate(zip(routers, gates, strict=True)):
        hidden = (
            gate_input(gate, seed=layer + 1).reshape(BATCH, SEQ, -1).transpose(0, 1).contiguous()
        )  # (T, B, H)
        probs, routing_map = router(hidden, PADDING.T)  # (T, B) as Megatron's MoE layer passes it
        probs_out.append(probs.detach())
        maps.append(routing_map)
        total = total + (probs * readout[layer][ORDER]).sum()
    total.backward()
    if objective.router_l2:
        main = [router.weight for router in routers]  # fp32 here: they are the main parameters
        anchor = RouterAnchor(routers, objective.router_l2, "unused", start_iteration=0)
        anchor.base = reference["base"]
        anchor.add_gradients([(weight, None) for weight in main])
    metrics = get_moe_metrics_tracker().metrics
    tracked = {name: entry.values[1 : 1 + len(routers)] for name, entry in metrics.items()}
    return routers, probs_out, maps, tracked


# prior.bias_in_gate_weights changes only soft RPB; both readings are checked there.
CASES = [(name, True) for name in sorted(CONDITIONS)] + [
    (name, False) for name in sorted(CONDITIONS) if CONDITIONS[name]["intervention"] == "rpb"
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("name", "bias_in_gate_weights"), CASES)
def test_megatron_router_matches_core_and_transformers(name, bias_in_gate_weights, arch):
    objective = Objective.from_condition(
        CONDITIONS[name], bias_in_gate_weights=bias_in_gate_weights, expert_bias_update_rate=RATE
    )
    check_parity(arch, objective)


def test_the_routers_leave_to_megatron_the_terms_the_registry_says_it_computes():
    assert set(MEGATRON_NATIVE_TERMS) == set(MEGATRON_COMPUTED_TERMS)


def _collision_probability(layer: core.RouterLayer) -> torch.Tensor:
    """A throwaway router term: the mean over routed tokens of sum_e p_e^2."""
    mask = layer.token_mask.float()
    return (layer.probabilities.pow(2).sum(dim=-1) * mask).sum() / mask.sum().clamp(min=1.0)


@pytest.mark.parametrize("layers", ["sum", "mean"])
@pytest.mark.parametrize("arch", ARCHS)
def test_a_router_term_new_to_the_code_runs_the_same_on_megatron(arch, layers, monkeypatch):
    """docs/layout.md's recipe: a term added to ``ROUTER_TERM_LOSSES`` alone is attached by
    Megatron's routers exactly as the local backend adds it, whatever its layer reduction."""
    monkeypatch.setitem(core.ROUTER_TERM_LOSSES, "throwaway", _collision_probability)
    term = RouterTerm("throwaway", prior=False, layers=layers)
    check_parity(
        arch, Objective(intervention="throwaway", terms=((term, 0.5),), expert_bias_update_rate=RATE)
    )


def check_parity(arch: str, objective: Objective) -> None:
    """Megatron's router under ``objective`` against the local backend's gate and ``routing.core``:
    routing map, gate weights, gradients, each router term's logged value, the expert-bias update."""
    torch.manual_seed(0)
    num_experts = 16 if arch != "qwen3_moe" else 8
    prior, spans = random_prior(num_experts), span_ids()
    readout = [torch.randn(BATCH * SEQ, num_experts) for _ in range(2)]
    reference = run_transformers(arch, objective, prior, spans, readout)
    routers, probs, maps, tracked = run_megatron(arch, objective, prior, spans, readout, reference)

    for layer in range(2):
        want = reference["mixed"][layer][ORDER]
        assert torch.equal(maps[layer], want > 0), f"layer {layer}: routing map differs"
        torch.testing.assert_close(probs[layer].float(), want, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            routers[layer].weight.grad, reference["grads"][layer], rtol=1e-4, atol=1e-6
        )
    # Each router term's name in Megatron's MoE metrics, and how its layers combine.
    logged = {
        term.name: (MEGATRON_NATIVE_TERMS.get(term.name, term.name), term.layers)
        for term, _ in objective.terms
    }
    for name, value in reference["terms"].items():
        if name == "router_l2":
            continue  # a parameter-space term: its gradient is in the comparison above
        megatron_name, combine = logged[name]
        per_layer = tracked[megatron_name]
        got = per_layer.sum() if combine == "sum" else per_layer.mean()
        assert float(got) == pytest.approx(value, rel=1e-5, abs=1e-7), name
    assert {name for name, values in tracked.items() if values.any()} == {
        logged[t][0] for t in reference["terms"] if t != "router_l2"
    }

    # Expert-bias update (deepseek_v3): Megatron's rule on its token counts equals core's on the local loads.
    if routers[0].expert_bias is not None:
        rate = router_settings(objective)["moe_router_bias_update_rate"]
        for layer, router in enumerate(routers):
            assert torch.equal(router.local_tokens_per_expert, reference["loads"][layer])
            updated = get_updated_expert_bias(router.local_tokens_per_expert, router.expert_bias, rate)
            want = core.expert_bias_update(
                router.expert_bias, reference["loads"][layer], objective.expert_bias_update_rate
            )
            torch.testing.assert_close(updated, want)
            if objective.routing_mode is not None:
                assert torch.equal(updated, router.expert_bias), "RPB must freeze the expert bias"


def test_without_a_batch_every_router_is_stock():
    """An installed router with an empty context returns exactly what the stock router returns."""
    objective = Objective.from_condition(CONDITIONS["rpb"])
    gate = [g for _, g in find_gates(build_model("deepseek_v3"))][0]
    fields = architecture_fields("deepseek_v3", gate) | router_settings(objective)
    fields.pop("moe_router_bias_update_rate")
    stock, swapped = build_router(dict(fields), 2), build_router(dict(fields), 2)
    swapped.load_state_dict(stock.state_dict())
    context = routing_context(objective, num_moe_layers=1)
    install(nn.ModuleList([swapped]), context)
    assert type(swapped).__name__ == "PriorBiasedRouter"
    assert set(swapped.state_dict()) == set(stock.state_dict())
    hidden = gate_input(gate).reshape(BATCH, SEQ, -1).transpose(0, 1).contiguous()
    for got, want in zip(swapped(hidden), stock(hidden), strict=True):
        assert torch.equal(got, want)


def test_install_refuses_a_prior_of_other_depth():
    objective = Objective.from_condition(CONDITIONS["rpb"])
    gate = [g for _, g in find_gates(build_model("qwen3_moe"))][0]
    fields = architecture_fields("qwen3_moe", gate) | router_settings(objective)
    fields.pop("moe_router_bias_update_rate")
    with pytest.raises(ValueError, match="L = 3"):
        install(nn.ModuleList([build_router(dict(fields), 2)]), routing_context(objective, num_moe_layers=3))


def test_rpb_router_refuses_load_balancing():
    objective = Objective.from_condition(CONDITIONS["rpb"])
    gate = [g for _, g in find_gates(build_model("qwen3_moe"))][0]
    fields = architecture_fields("qwen3_moe", gate) | {
        "moe_router_load_balancing_type": "aux_loss",
        "moe_aux_loss_coeff": 1e-3,
    }
    router = build_router(fields, 2)
    context = routing_context(objective, num_moe_layers=1)
    install(nn.ModuleList([router]), context)
    prior = random_prior(8)[:, :, :1]
    context.set_batch(prior, sequence_parallel_slice(span_ids(), 0, 1))
    with pytest.raises(RuntimeError, match="no load-balancing loss"):
        router(gate_input(gate).reshape(BATCH, SEQ, -1).transpose(0, 1).contiguous())


def test_sequence_parallel_ranks_hold_the_routers_token_order():
    spans = torch.arange(2 * 8).reshape(2, 8)  # (B, S), a distinct id per token
    halves = [sequence_parallel_slice(spans, rank, 2) for rank in range(2)]
    assert [tuple(h.shape) for h in halves] == [(4, 2), (4, 2)]
    assert torch.equal(torch.cat(halves), spans.T)  # rank r holds rows r*S/2 .. of the (S, B) layout
    with pytest.raises(ValueError, match="not divisible"):
        sequence_parallel_slice(spans[:, :7], 0, 2)
